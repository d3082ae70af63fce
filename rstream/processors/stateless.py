"""Stateless operators: source, map, flat_map, filter, foreach, print, select_timestamp, key_by
(the shuffle source is ``rstream.shuffle.source``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
from typing import Any

from rstream.broker.base import RecordBlock
from rstream.processors.base import PassProcessor, Processor, StreamContext, UnhashableKeyError
from rstream.processors.chunk import Chunk
from rstream.processors.spec import (
    KEY_STYLE,
    SIDE_EFFECT_STYLE,
    SOURCE_STYLE,
    STATELESS_STYLE,
    OperatorSpec,
    Role,
    register,
)
from rstream.serde import SerdeError
from rstream.settings import JobProperties
from rstream.time.watermark import TimeType

_PAIR_KEY, _PAIR_VALUE = itemgetter(0), itemgetter(1)

#: Printed lines kept per queue and batch, so a chatty ``print()`` cannot flood the driver.
MAX_PRINTED = 1000


class SourceProcessor(Processor):
    """Root of a source topic's chain: deserializes the body into ``(key, value)``. The record's
    data time follows the job's ``time_type``: the born timestamp (also for event time, until
    ``select_timestamp`` says otherwise), the broker's append time, or the wall clock."""

    chunked_root = True

    def __init__(self, name: str, deserialize: Callable[[bytes], Any]) -> None:
        super().__init__(name)
        self.deserialize = deserialize
        # a built-in deserializer's method over a whole chunk (the same results as deserialize, record by record)
        self.deserialize_many = getattr(getattr(deserialize, "__self__", None), "deserialize_many", None)

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        self.time_type = ctx.settings.time_type

    def receive(self, offset: int, key: Any, body: bytes, born: int, store: int, headers: Any) -> None:
        self.records_in += 1
        try:
            result = self.deserialize(body)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, body) from exc
        if type(result) is not tuple or len(result) != 2:
            raise SerdeError(
                f"the deserializer of {self.name} must return a (key, value) tuple, got "
                f"{type(result).__name__}: {result!r:.80}; e.g. lambda body: (None, body.decode())"
            )
        time_type = self.time_type
        if time_type is TimeType.EVENT_TIME or time_type is TimeType.BORN_TIME:
            ts = born
        elif time_type is TimeType.BROKER_TIME:
            ts = store
        else:
            ts = self.ctx.now_ms()
        self.forward(result[0], result[1], ts)

    def chunk_of(self, records: RecordBlock) -> Chunk:
        if self.deserialize_many is not None:
            keys, values = self.deserialize_many(records.bodies)
        else:
            results = list(map(self.deserialize, records.bodies))
            if set(map(type, results)) != {tuple} or set(map(len, results)) != {2}:
                raise ValueError("a deserializer result is not a (key, value) pair")  # receive says which
            keys, values = list(map(_PAIR_KEY, results)), list(map(_PAIR_VALUE, results))
        time_type = self.time_type
        if time_type is TimeType.EVENT_TIME or time_type is TimeType.BORN_TIME:
            times = list(records.borns)
        elif time_type is TimeType.BROKER_TIME:
            times = list(records.stores)
        else:
            times = [self.ctx.now_ms()] * len(records)
        return Chunk(list(records.offsets), keys, values, times)


class _FnProcessor(Processor):
    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        super().__init__(name)
        self.fn = fn


class MapProcessor(_FnProcessor):
    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        return chunk._replace(values=list(map(self.fn, chunk.values)))

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            out = self.fn(value)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        self.forward(key, out, ts)


class FlatMapProcessor(_FnProcessor):
    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        made = [x if type(x) is list or type(x) is tuple else list(x) for x in map(self.fn, chunk.values)]
        counts = list(map(len, made))
        values = list(chain.from_iterable(made))
        def spread(column: list[Any]) -> list[Any]:
            return list(chain.from_iterable(map(repeat, column, counts)))
        # a source's records have no key, and records appended together share their time: those
        # columns are one value repeated (times are ints, so equal times are the same time)
        keys, times, total = chunk.keys, chunk.times, len(values)
        return Chunk(spread(chunk.offsets),
                     [None] * total if not any(map(is_not, keys, repeat(None))) else spread(keys),
                     values,
                     [times[0]] * total if times and times.count(times[0]) == len(times) else spread(times))

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            items = self.fn(value)
            if type(items) is not list and type(items) is not tuple:
                items = list(items)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        forward = self.forward
        for item in items:
            forward(key, item, ts)


class FilterProcessor(_FnProcessor):
    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        keep = list(map(self.fn, chunk.values))
        return Chunk(*(list(compress(column, keep)) for column in chunk))

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            keep = self.fn(value)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        if keep:
            self.forward(key, value, ts)


class ForeachProcessor(_FnProcessor):

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            self.fn(value)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        self.forward(key, value, ts)


class PrintProcessor(Processor):
    """Collects ``key: value`` lines; the job prints them on the driver, where the user looks."""


    def __init__(self, name: str, prefix: str = "") -> None:
        super().__init__(name)
        self.prefix = prefix

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        printed = self.ctx.out.printed
        if len(printed) < MAX_PRINTED:
            printed.append(f"{self.prefix}{key}: {value}")
        self.forward(key, value, ts)


class SelectTimestampProcessor(_FnProcessor):
    """Sets the record's data time from its value; only with ``time_type`` event_time (other time
    types decide the time at the source, and records pass through unchanged)."""

    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        if not self.active:
            return chunk
        return chunk._replace(times=[int(t) for t in map(self.fn, chunk.values)])

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        self.active = ctx.settings.time_type is TimeType.EVENT_TIME

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        if not self.active:
            self.forward(key, value, ts)
            return
        try:
            new_ts = int(self.fn(value))
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        self.forward(key, value, new_ts)


#: The code of ``lambda x: x``: a function with the same code, one argument and no more returns it.
_IDENTITY = (lambda x: x).__code__
#: Code flags of functions that are no plain call: *args, **kwargs, generators and coroutines of
#: every kind (``inspect.CO_VARARGS | CO_VARKEYWORDS | CO_GENERATOR | CO_COROUTINE |
#: CO_ITERABLE_COROUTINE | CO_ASYNC_GENERATOR``; inspect is not imported for them).
_NOT_PLAIN = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200


def is_identity(fn: Any) -> bool:
    """Whether ``fn`` is ``lambda x: x`` (or ``def f(x): return x``), by its code: the key function of
    most word counts, which a chunk then need not call once per record."""
    code = getattr(fn, "__code__", None)
    if type(code) is not type(_IDENTITY):
        return False
    return (code.co_code == _IDENTITY.co_code and code.co_argcount == 1 and code.co_kwonlyargcount == 0
            and not code.co_flags & _NOT_PLAIN)


class KeyByProcessor(_FnProcessor):
    pure = True

    def __init__(self, name: str, fn: Callable[..., Any]) -> None:
        super().__init__(name, fn)
        self.identity = is_identity(fn)

    def chunk(self, chunk: Chunk) -> Chunk:
        keys = list(chunk.values) if self.identity else list(map(self.fn, chunk.values))
        if set(map(type, keys)) != {str}:  # str keys are hashable; anything else is checked
            for key in keys:
                hash(key)
        return chunk._replace(keys=keys)

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            new_key = self.fn(value)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        try:
            if type(new_key) is not str:  # str keys are hashable: skip the check on the common path
                hash(new_key)
        except TypeError:
            ctx = self.ctx
            raise UnhashableKeyError(
                f"the key function of {self.name} returned an unhashable {type(new_key).__name__}: "
                f"{new_key!r:.80} (record at topic {ctx.at.topic!r} queue {ctx.at.queue} offset {ctx.at.offset}); "
                "keys must be hashable: return a str, a number or a tuple"
            ) from None
        self.forward(new_key, value, ts)


def _with_fn(cls: type[_FnProcessor]) -> Any:
    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        return cls(name, params["fn"])
    return make


def _make_source(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return SourceProcessor(name, params["deserializer"])


def _make_print(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return PrintProcessor(name, params.get("prefix", ""))


def _make_pass(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return PassProcessor(name)


#: ``builder.source(topic, deserializer)``: the root of a source topic's pipeline.
SOURCE = register(OperatorSpec("source", SOURCE_STYLE, _make_source, role=Role.SOURCE))
#: Added by the second build: the root of a shuffle topic's pipeline.
MAP = register(OperatorSpec("map", STATELESS_STYLE, _with_fn(MapProcessor)))
FLAT_MAP = register(OperatorSpec("flat_map", STATELESS_STYLE, _with_fn(FlatMapProcessor)))
FILTER = register(OperatorSpec("filter", STATELESS_STYLE, _with_fn(FilterProcessor)))
FOREACH = register(OperatorSpec("foreach", SIDE_EFFECT_STYLE, _with_fn(ForeachProcessor)))
PRINT = register(OperatorSpec("print", SIDE_EFFECT_STYLE, _make_print))
SELECT_TIMESTAMP = register(OperatorSpec("select_timestamp", STATELESS_STYLE, _with_fn(SelectTimestampProcessor)))
KEY_BY = register(OperatorSpec("key_by", KEY_STYLE, _with_fn(KeyByProcessor)))
#: ``to_rstream()``: records pass on unchanged (the key stays).
TO_RSTREAM = register(OperatorSpec("to_rstream", STATELESS_STYLE, _make_pass))
