"""Keyed aggregations: count, sum, min, max and aggregate(accumulator).

Each keeps the values of the keys it touched in this batch in a dict, reads a key from the state
store the first time it is seen, and stages the changed keys in the store at the end of the batch.
Every input record emits the key's updated result, as RocketMQ Streams does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from rstream.processors.base import Processor, StreamContext
from rstream.processors.sink import PARTIAL_HEADER
from rstream.state.store import MISSING

V = TypeVar("V")
A = TypeVar("A")
R = TypeVar("R")


class Accumulator(Generic[V, A, R]):
    """How ``aggregate`` folds a key's values: ``initial()`` starts a key's accumulator,
    ``add(acc, value)`` returns the next one, ``result(acc)`` is what is emitted. Accumulators
    are stored in the state store, so they must be plain data (numbers, strings, tuples, lists,
    dicts) or picklable."""

    def initial(self) -> A:
        raise TypeError(f"{type(self).__name__} must define initial()")

    def add(self, acc: A, value: V) -> A:
        raise TypeError(f"{type(self).__name__} must define add(acc, value)")

    def result(self, acc: A) -> R:
        return acc  # type: ignore[return-value]


class AggregateProcessor(Processor):
    """Base of the keyed aggregations. With ``per_batch`` (``aggregate_emit="batch"``) a key's
    result is emitted once per batch, at its end, instead of for every input record; the input
    may then hold partial results combined before the shuffle (marked by a header)."""

    kind = "aggregate"

    def __init__(self, name: str, per_batch: bool = False) -> None:
        super().__init__(name)
        self.per_batch = per_batch
        self.keys_changed = 0

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        if ctx.store is None:
            raise RuntimeError(f"{self.name} needs a state store for {ctx.topic}/{ctx.queue}")
        self.store = ctx.store
        self.cache: dict[Any, Any] = {}
        self.times: dict[Any, int] = {}  # per key, the time of its latest record (per-batch emission)

    def _emit(self, key: Any, result: Any, ts: int) -> None:
        if self.per_batch:
            self.times[key] = ts
        else:
            self.forward(key, result, ts)

    def result(self, state: Any) -> Any:
        return state

    def flush(self) -> None:
        if self.per_batch:
            for key, ts in self.times.items():
                self.forward(key, self.result(self.cache[key]), ts)
        put = self.store.put
        for key, value in self.cache.items():
            put(self.name, key, value)
        self.keys_changed = len(self.cache)

    def staged(self) -> list[tuple[Any, Any]]:
        """``(key, value)`` held in memory that ``flush`` will put in the store."""
        return list(self.cache.items())

    def metrics(self) -> dict[str, Any]:
        return {"records_in": self.records_in, "keys_changed": self.keys_changed}


class CountProcessor(AggregateProcessor):
    kind = "count"

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        cache = self.cache
        old = cache.get(key, MISSING)
        if old is MISSING:
            old = self.store.get(self.name, key)
            if old is MISSING:
                old = 0
        headers = self.ctx.headers  # type: ignore[union-attr]
        new = old + (value if headers is not None and PARTIAL_HEADER in headers else 1)
        cache[key] = new
        self._emit(key, new, ts)


class _FoldProcessor(AggregateProcessor):
    def __init__(self, name: str, fn: Callable[[Any], Any], per_batch: bool = False) -> None:
        super().__init__(name, per_batch)
        self.fn = fn

    #: ``combine(old, x) -> new``: how a fold merges a new number into the key's state.
    combine: Callable[[Any, Any], Any] = staticmethod(operator.add)

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        headers = self.ctx.headers  # type: ignore[union-attr]
        if headers is not None and PARTIAL_HEADER in headers:
            x = value  # already fn(value), combined before the shuffle
        else:
            try:
                x = self.fn(value)
            except Exception as exc:
                raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        cache = self.cache
        old = cache.get(key, MISSING)
        if old is MISSING:
            old = self.store.get(self.name, key)
        new = x if old is MISSING else self.combine(old, x)
        cache[key] = new
        self._emit(key, new, ts)


class SumProcessor(_FoldProcessor):
    kind = "sum"
    combine = staticmethod(operator.add)


class MinProcessor(_FoldProcessor):
    kind = "min"
    combine = staticmethod(min)


class MaxProcessor(_FoldProcessor):
    kind = "max"
    combine = staticmethod(max)


class AccumulateProcessor(AggregateProcessor):
    kind = "aggregate"

    def __init__(self, name: str, accumulator: Accumulator[Any, Any, Any], per_batch: bool = False) -> None:
        super().__init__(name, per_batch)
        self.accumulator = accumulator

    def result(self, state: Any) -> Any:
        return self.accumulator.result(state)

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        acc_ = self.accumulator
        cache = self.cache
        acc = cache.get(key, MISSING)
        try:
            if acc is MISSING:
                acc = self.store.get(self.name, key)
                if acc is MISSING:
                    acc = acc_.initial()
            acc = acc_.add(acc, value)
            result = None if self.per_batch else acc_.result(acc)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        cache[key] = acc
        self._emit(key, result, ts)
