"""Aggregations: count, sum, min, max, avg, reduce(fn) and aggregate(accumulator), keyed or windowed.

Each is one ``OperatorSpec`` over one fold (``rstream.processors.fold``): unwindowed it runs as an
``AggregateProcessor`` (one state per key), after ``window(...)`` as the processor ``WINDOW``'s spec makes
(``rstream.processors.window``).
The keyed processor keeps the values of the keys it touched in this batch in a dict, reads a key
from the state store the first time it is seen, and stages the changed keys in the store at the
end of the batch. Every input record emits the key's updated result, as RocketMQ Streams does.

Which record comes first changes those updates (a running sum's, max's or reduce's), and a shuffle
queue holds the records of several source queues in the order their tasks happened to write them. So
a key fed by several source queues may see other intermediate updates when the input is cut into
other batches (its last update is the same). With ``order="data_time"`` (``sum(fn, order=...)``) the
aggregation takes its records in *data-time order* instead (``rstream.processors.ordered``): each is
held until the operator watermark passes its data time, then folded in, so its updates depend on the
records only, at the price of waiting for the watermark. RocketMQ Streams and Kafka Streams fold a
key's records as they arrive; the choice is rstream's. A count needs none of it: its ``n``-th update
is ``n`` in any order. Per-batch emission (``aggregate_emit="batch"``) emits per batch by design and
takes records as they come.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

from rstream.processors.base import Processor, RecordError, StreamContext
from rstream.processors.chunk import Chunk, ChunkedPipeline
from rstream.processors.fold import (
    Accumulated,
    Accumulator,
    AccumulatorFold,
    AvgFold,
    CountFold,
    Fold,
    MaxFold,
    MinFold,
    NumberAvgFold,
    ReduceFold,
    SumFold,
)
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.ordered import Held, InTimeOrder
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register, spec_of
from rstream.settings import JobProperties
from rstream.state.store import MISSING

#: A running aggregation's ``order`` param that makes it take its records in data-time order.
DATA_TIME_ORDER = "data_time"

__all__ = ["AGGREGATE", "AVG", "COUNT", "DATA_TIME_ORDER", "MAX", "MIN", "REDUCE", "SUM", "Accumulator", "AggregateProcessor", "aggregation"]


class AggregateProcessor(Processor):
    """One keyed aggregation on one shuffle queue, folding with ``fold``. With ``per_batch``
    (``aggregate_emit="batch"``) a key's result is emitted once per batch, at its end, instead of
    for every input record; its input may then hold ``Accumulated`` values folded before the shuffle.
    Otherwise, with ``ordered`` (``order="data_time"``), records are folded in data-time order."""

    emits_results = True

    def __init__(self, name: str, fold: Fold, per_batch: bool = False, ordered: bool = False) -> None:
        super().__init__(name)
        self.fold = fold
        self.per_batch = per_batch
        #: Whether it holds records until the watermark passes them (``order="data_time"``).
        self.ordered = ordered and not per_batch
        self.keys_changed = 0
        # the fold's methods the hot path calls, looked up once (None: the result is the accumulator)
        self._step = fold.step
        self._result = None if fold.result_is_acc else fold.result

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        if ctx.store is None:
            raise RuntimeError(f"{self.name} needs a state store for {ctx.at.topic}/{ctx.at.queue}")
        self.store = ctx.store
        self.cache: dict[Any, Any] = {}
        self.times: dict[Any, int] = {}  # per key, the time of its latest record (per-batch emission)
        if self.ordered:
            self.order = InTimeOrder(self.name, ctx)
            self.hand_on = self.forward  # what a held record's update raises further down is its dead letter
            ctx.time.operators.append(self)

    @property
    def results_later(self) -> bool:
        return self.ordered

    def on_watermark(self, watermark: int) -> None:
        """Fold in the held records the watermark passed (every one when every source is idle), in
        data-time order, each emitting its key's update."""
        if not self.ordered:
            return
        order = self.order
        while (held := order.head(watermark)) is not None:
            order.pop()
            with order.taking(held):
                self._take(held)

    def _take(self, h: Held) -> None:
        try:
            self._fold(h.key, h.value, h.ts, self.hand_on)
        except RecordError as err:  # its own fold's error, or what its update raised further down
            self.order.dead_letter(h, err)

    def process(self, key: Any, value: Any, ts: int) -> None:
        """Fold the record in and emit, or hold it until the watermark passes its data time (``ordered``)."""
        self.records_in += 1
        if self.ordered:
            self.order.hold(0, key, value, ts)
        else:
            self._fold(key, value, ts, self.forward)

    def _fold(self, key: Any, value: Any, ts: int, forward: Any) -> None:
        cache = self.cache
        try:
            acc = cache.get(key, MISSING)
            if acc is MISSING:
                acc = self.store.get(self.name, key)
                if acc is MISSING:
                    acc = self.fold.initial()
            if type(value) is Accumulated:
                acc = self.fold.merge(acc, value.acc)
            else:
                acc = self._step(acc, value)
            cache[key] = acc
            if self.per_batch:
                self.times[key] = ts
                return
            result = acc if self._result is None else self._result(acc)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        forward(key, result, ts)

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        # a count that emits every update (it cannot raise): the counts at once, handed on as a
        # chunk; anything else (user folds, partials, per-batch emission, held records) record by record
        if self.per_batch or self.ordered or not self.fold.counts or Accumulated in set(map(type, chunk.values)):
            plan.each(chunk, self.process)
            return
        cache, get, name, keys = self.cache, self.store.get, self.name, chunk.keys
        try:  # each key's running count as an iterator: the chunk's counts in one C-level pass
            running = {key: itertools.count((cache[key] if key in cache else _stored_count(get(name, key))) + 1)
                       for key in dict.fromkeys(keys)}  # in order of first appearance, as cache's keys
        except Exception:  # a stored value that is no count: record by record, which reports it
            plan.each(chunk, self.process)
            return
        counts = list(map(next, map(running.__getitem__, keys)))
        for key, it in running.items():
            cache[key] = next(it) - 1
        self.records_in += len(counts)
        plan.send(self, chunk._replace(values=counts))

    def flush(self) -> None:
        if self.per_batch:
            result = self.fold.result
            for key, ts in self.times.items():
                self.forward(key, result(self.cache[key]), ts)
        if self.ordered:
            self.order.flush()
        put = self.store.put
        for key, value in self.cache.items():
            put(self.name, key, value)
        self.keys_changed = len(self.cache)

    def staged(self) -> list[tuple[Any, Any]]:
        """``(key, value)`` held in memory that ``flush`` will put in the store."""
        return list(self.cache.items())

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, keys_changed=self.keys_changed,
                                  held=len(self.order) if self.ordered else 0)


def _stored_count(n: Any) -> Any:
    return 0 if n is MISSING else n


def aggregation(kind: str, fold: Callable[[Mapping[str, Any]], Fold], combines: bool = False) -> OperatorSpec:
    """The spec of an aggregation folding with ``fold(params)``: keyed, or windowed when the node's
    params carry a window (the second build puts it there). ``combines``: its fold may combine a
    key's values before the shuffle with ``aggregate_emit="batch"`` (associative and commutative)."""

    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        if params.get("window") is not None:  # the window's spec makes an aggregation over it
            windowed = spec_of("window").make
            assert windowed is not None
            return windowed(name, {**params, "fold": fold(params)}, settings, sink_queues)
        return AggregateProcessor(name, fold(params), settings.per_batch, params.get("order") == DATA_TIME_ORDER)

    return register(OperatorSpec(kind, STATEFUL_STYLE, make, shuffle=Shuffle.BY_KEY, fold=fold, combines=combines,
                                 stateful=True))


def _count(params: Mapping[str, Any]) -> Fold:
    return CountFold()


def _sum(params: Mapping[str, Any]) -> Fold:
    return SumFold(params["fn"])


def _min(params: Mapping[str, Any]) -> Fold:
    return MinFold(params["fn"])


def _max(params: Mapping[str, Any]) -> Fold:
    return MaxFold(params["fn"])


def _avg(params: Mapping[str, Any]) -> Fold:
    fn = params.get("fn")
    return NumberAvgFold() if fn is None else AvgFold(fn)


def _reduce(params: Mapping[str, Any]) -> Fold:
    return ReduceFold(params["fn"])


def _accumulate(params: Mapping[str, Any]) -> Fold:
    return AccumulatorFold(params["accumulator"])


COUNT = aggregation("count", _count, combines=True)
SUM = aggregation("sum", _sum, combines=True)
MIN = aggregation("min", _min, combines=True)
MAX = aggregation("max", _max, combines=True)
AVG = aggregation("avg", _avg)
AGGREGATE = aggregation("aggregate", _accumulate)
#: ``reduce(fn)`` (RocketMQ Streams and Kafka Streams both have it): keyed, the running result for every
#: record; after ``window(...)``, one result per window when it fires; session windows merge with ``fn``
#: too. Not combined before the shuffle (``combines`` off): ``fn`` need not be commutative, and only the
#: order of a queue's records is kept, as a shuffle keeps it.
REDUCE = aggregation("reduce", _reduce)
