"""Stateless operators: source, map, flat_map, filter, foreach, print, select_timestamp, key_by."""

from __future__ import annotations

import marshal
from collections.abc import Callable, Mapping, Sequence, Set
from itertools import chain, compress, repeat
from operator import is_not, itemgetter
from typing import Any

from rstream.broker.base import RecordBlock
from rstream.processors.base import Frame, Partial, Processor, RecordError, UnhashableKeyError, WindowPartial
from rstream.processors.chunk import Chunk
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.sink import PARTIAL_HEADER, RECORDS_HEADERS, RECORDS_PARTIAL, run_times
from rstream.processors.spec import (
    KEY_STYLE,
    SIDE_EFFECT_STYLE,
    SOURCE_STYLE,
    STATELESS_STYLE,
    OperatorSpec,
    Role,
    register,
)
from rstream.processors.watermarks import BEHIND_HEADER, FLUSH_HEADER, PRODUCER_HEADER, WM_HEADER
from rstream.serde import SerdeError
from rstream.serde.batches import Fields
from rstream.serde.codec import PICKLE_MARK, decode
from rstream.settings import JobProperties
from rstream.time.watermark import TimeType

_UNSEEN: Any = object()
_loads = marshal.loads
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

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.time_type = ctx.settings.time_type

    def receive(self, offset: int, key: Any, body: bytes, born: int, store: int, headers: Any) -> None:
        self.records_in += 1
        try:
            result = self.deserialize(body)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, body) from exc  # type: ignore[union-attr]
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
            ts = self.ctx.now_ms()  # type: ignore[union-attr]
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
            times = [self.ctx.now_ms()] * len(records)  # type: ignore[union-attr]
        return Chunk(list(records.offsets), keys, values, times)


def _shuffled_value(body: bytes, headers: dict[str, str] | None) -> Any:
    """The value of an unframed shuffle record: a partial aggregate (``Partial``) or a value."""
    if headers is not None and PARTIAL_HEADER in headers:
        return Partial(decode(body))
    return _loads(body) if body[0] != PICKLE_MARK else decode(body)


#: No offsets (``ShuffleSourceProcessor.expanded``).
_NONE: frozenset[int] = frozenset()


class ShuffleSourceProcessor(Processor):
    """Root of a shuffle topic's chain: decodes the key and value the shuffle sink wrote.

    On a *framed* topic (one that feeds windows or joins) each record also carries its source
    queue's watermark, its producer, its source offset and its join side, and control records
    (watermark markers and idle ticks) advance the operator watermark."""


    def __init__(self, name: str, framed: bool = False) -> None:
        super().__init__(name)
        self.framed = framed
        self.markers = 0
        #: A framed chunk's frames as columns, for the processor after this one (``frame_at``):
        #: values, watermarks, producers, source offsets and sides, each in the chunk's order.
        self.fields: Sequence[Sequence[Any]] = ((),) * 5
        #: The offsets of the last chunk's partials of records, each of whose records is an item (``_expanded_chunk``).
        self.expanded: Set[int] = _NONE
        self._more = 0  # the records the last chunk's partials held beyond one each

    @property
    def chunked_root(self) -> bool:  # type: ignore[override]
        # a framed topic's data records go in chunks only to an operator that reads their frames
        # (a windowed count); markers always go record by record (QueueRun.feed splits them out)
        return not self.framed or (len(self.children) == 1 and getattr(self.children[0], "takes_frames", False))

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self._keys: dict[Any, Any] = {}  # serialized key -> key: keys repeat, decoding them once is enough

    def receive(self, offset: int, key: Any, body: bytes, born: int, store: int, headers: Any) -> None:
        k = self._keys.get(key, _UNSEEN)
        if k is _UNSEEN:
            k = self._keys[key] = decode(key) if key is not None else None
        if not self.framed:
            if headers is not None and PARTIAL_HEADER in headers:
                if headers[PARTIAL_HEADER] == RECORDS_PARTIAL:
                    self._each_record(k, key, body, born)
                    return
                self.records_in += 1
                self.forward(k, Partial(decode(body)), born)
            else:  # decode() inlined: one call less per record
                self.records_in += 1
                self.forward(k, _loads(body) if body[0] != PICKLE_MARK else decode(body), born)
            return
        ctx = self.ctx
        ctx.position_ms = store  # type: ignore[union-attr]
        if headers:
            if PARTIAL_HEADER in headers:  # a source range's counts of one key per window
                partial = WindowPartial(*decode(body))
                self.records_in += len(partial.times)  # the records it holds, as if each had come alone
                for child in self.children:
                    child.take_partial(k, partial)  # type: ignore[attr-defined]
                return
            self.markers += 1
            self._control(headers, store)
            return
        self.records_in += 1
        value, watermark, producer, source_offset, side = decode(body)
        ctx.frame = Frame(watermark, producer, source_offset, side)  # type: ignore[union-attr]
        self.forward(k, value, born)

    def _each_record(self, k: Any, key: bytes, body: bytes, born: int) -> None:
        """A partial that stands for a key's records (``RecordCombiningShuffleSinkProcessor``): each
        of them on, with its own time and no value (a count needs none), as if it had come alone.
        One that user code after the count raises on is a dead letter of its own (the partial as
        read, with the record's time), and the others go on, as they would have one by one."""
        ctx = self.ctx
        for ts in run_times(decode(body)):
            self.records_in += 1
            try:
                self.forward(k, None, ts)
            except RecordError as err:
                if not ctx.settings.skip_data_error:  # type: ignore[union-attr]
                    raise
                ctx.dead_letter(err, key, body, ts)  # type: ignore[union-attr]

    def chunk_of(self, records: RecordBlock) -> Chunk:
        if self.framed:
            return self._framed_chunk_of(records)
        self.expanded, self._more = _NONE, 0
        if records.headers.count(None) != len(records) and RECORDS_HEADERS in records.headers:
            return self._expanded_chunk(records)
        keys = self._chunk_keys(records)
        bodies = records.bodies
        values: list[Any] | None = None
        if records.headers.count(None) == len(records) and records.items is not None:
            values = list(records.items)  # stored as they are (``ItemRecords``): nothing to decode
        elif records.headers.count(None) == len(records):  # no partials: marshal all at once
            try:
                values = list(map(_loads, bodies))
            except (ValueError, EOFError):  # a pickled value (pickle's first byte is no marshal type): one by one
                pass
        if values is None:
            values = list(map(_shuffled_value, bodies, records.headers))
        return Chunk(list(records.offsets), keys, values, list(records.borns))

    def _expanded_chunk(self, records: RecordBlock) -> Chunk:
        """A chunk that holds partials of records (``_each_record``): each of their records an item
        of its own, at the partial's offset (``expanded`` names those offsets: each item there is a
        record of its own where something raises, ``ChunkedPipeline.each``)."""
        offsets: list[int] = []
        keys: list[Any] = []
        values: list[Any] = []
        times: list[Any] = []
        expanded = set()
        for offset, k, body, born, headers in zip(records.offsets, self._chunk_keys(records), records.bodies,
                                                  records.borns, records.headers):
            if headers is not None and headers.get(PARTIAL_HEADER) == RECORDS_PARTIAL:
                held = run_times(decode(body))
                times += held
                n = len(held)
                offsets += repeat(offset, n)
                keys += repeat(k, n)
                values += repeat(None, n)
                expanded.add(offset)
                continue
            offsets.append(offset)
            keys.append(k)
            values.append(_shuffled_value(body, headers))
            times.append(born)
        self._more = len(offsets) - len(records)  # the pipeline counts the block's records (``chunk_done``)
        self.expanded = expanded
        return Chunk(offsets, keys, values, times)

    def _chunk_keys(self, records: RecordBlock) -> list[Any]:
        """The decoded keys of a chunk's records (each distinct serialized key decoded once, cached)."""
        keys, serialized = self._keys, records.keys
        for kb in set(serialized).difference(keys):  # a cache: changes no result
            keys[kb] = decode(kb) if kb is not None else None  # type: ignore[arg-type]  # a shuffle key is bytes
        return list(map(keys.__getitem__, serialized))

    def _framed_chunk_of(self, records: RecordBlock) -> Chunk:
        """Data records of a framed topic (no marker among them): their frames are kept in ``frames``."""
        if any(records.headers):
            raise ValueError("a control record in a framed chunk")  # QueueRun.feed splits them out
        keys = self._chunk_keys(records)
        items = records.items
        if isinstance(items, Fields):  # stored as columns (``FrameRecords``): values decoded when read
            fields = items.fields
        else:
            if items is not None:  # stored as they are (``ItemRecords``): nothing to decode
                frames = list(items)
            else:
                try:
                    frames = list(map(_loads, records.bodies))
                except (ValueError, EOFError):  # a pickled frame (a value marshal cannot write)
                    frames = list(map(decode, records.bodies))
            fields = tuple(map(list, zip(*frames, strict=True))) if frames else ([],) * 5
        self.fields = fields
        return Chunk(list(records.offsets), keys, fields[0], list(records.borns))  # type: ignore[arg-type]

    def frame_at(self, i: int) -> Frame:
        """The frame of the ``i``-th record of the last framed chunk."""
        _values, watermarks, producers, source_offsets, sides = self.fields
        return Frame(watermarks[i], producers[i], source_offsets[i], sides[i])

    def chunk_done(self, records: RecordBlock) -> None:
        """After a chunk went through: the context as ``receive`` leaves it after the last record, and
        the records its partials of records held counted in."""
        self.records_in += self._more
        self._more = 0
        if self.framed:
            ctx = self.ctx
            ctx.position_ms = records.stores[-1]  # type: ignore[union-attr]
            ctx.frame = self.frame_at(len(records) - 1)  # type: ignore[union-attr]

    def _control(self, headers: dict[str, str], stored_ms: int) -> None:
        ctx = self.ctx
        assert ctx is not None and ctx.watermarks is not None
        if WM_HEADER in headers:  # the producer was active when its marker was stored
            ctx.watermarks.update(headers[PRODUCER_HEADER], int(headers[WM_HEADER]), stored_ms,
                                  BEHIND_HEADER in headers)
        flush = FLUSH_HEADER in headers
        ctx.flushed = ctx.flushed or flush
        ctx.advance(force_idle=flush)

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, markers=self.markers)


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
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
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
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
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
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        if keep:
            self.forward(key, value, ts)


class ForeachProcessor(_FnProcessor):

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            self.fn(value)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        self.forward(key, value, ts)


class PrintProcessor(Processor):
    """Collects ``key: value`` lines; the job prints them on the driver, where the user looks."""


    def __init__(self, name: str, prefix: str = "") -> None:
        super().__init__(name)
        self.prefix = prefix

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        printed = self.ctx.printed  # type: ignore[union-attr]
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

    def open(self, ctx: Any) -> None:
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
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
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
    return (type(code) is type(_IDENTITY) and code.co_code == _IDENTITY.co_code  # type: ignore[union-attr]
            and code.co_argcount == 1 and code.co_kwonlyargcount == 0  # type: ignore[union-attr]
            and not code.co_flags & _NOT_PLAIN)  # type: ignore[union-attr]


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
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        try:
            if type(new_key) is not str:  # str keys are hashable: skip the check on the common path
                hash(new_key)
        except TypeError:
            ctx = self.ctx
            raise UnhashableKeyError(
                f"the key function of {self.name} returned an unhashable {type(new_key).__name__}: "
                f"{new_key!r:.80} (record at topic {ctx.topic!r} queue {ctx.queue} offset {ctx.offset}); "  # type: ignore[union-attr]
                "keys must be hashable: return a str, a number or a tuple"
            ) from None
        self.forward(new_key, value, ts)


def _with_fn(cls: type[_FnProcessor]) -> Any:
    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        return cls(name, params["fn"])
    return make


def _make_source(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return SourceProcessor(name, params["deserializer"])


def _make_shuffle_source(name: str, params: Mapping[str, Any], settings: JobProperties,
                         sink_queues: Mapping[str, int]) -> Processor:
    return ShuffleSourceProcessor(name, params.get("framed", False))


def _make_print(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return PrintProcessor(name, params.get("prefix", ""))


class PassProcessor(Processor):
    """Forwards every record unchanged (``to_rstream()``)."""

    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        return chunk


def _make_pass(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return PassProcessor(name)


#: ``builder.source(topic, deserializer)``: the root of a source topic's pipeline.
SOURCE = register(OperatorSpec("source", SOURCE_STYLE, _make_source, role=Role.SOURCE))
#: Added by the second build: the root of a shuffle topic's pipeline.
SHUFFLE_SOURCE = register(OperatorSpec("shuffle_source", SOURCE_STYLE, _make_shuffle_source, role=Role.INTERNAL))
MAP = register(OperatorSpec("map", STATELESS_STYLE, _with_fn(MapProcessor)))
FLAT_MAP = register(OperatorSpec("flat_map", STATELESS_STYLE, _with_fn(FlatMapProcessor)))
FILTER = register(OperatorSpec("filter", STATELESS_STYLE, _with_fn(FilterProcessor)))
FOREACH = register(OperatorSpec("foreach", SIDE_EFFECT_STYLE, _with_fn(ForeachProcessor)))
PRINT = register(OperatorSpec("print", SIDE_EFFECT_STYLE, _make_print))
SELECT_TIMESTAMP = register(OperatorSpec("select_timestamp", STATELESS_STYLE, _with_fn(SelectTimestampProcessor)))
KEY_BY = register(OperatorSpec("key_by", KEY_STYLE, _with_fn(KeyByProcessor)))
#: ``to_rstream()``: records pass on unchanged (the key stays).
TO_RSTREAM = register(OperatorSpec("to_rstream", STATELESS_STYLE, _make_pass))
