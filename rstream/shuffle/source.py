"""The shuffle source: the root of a shuffle topic's pipeline. It decodes what the shuffle sink (and
a combine node before it) wrote: records, with their frames on a framed topic; partials, each
record a partial holds on as if it had come alone (a count), or the partial itself (a fold, a window
count); and control records (watermark markers, idle ticks) that advance the operator watermark."""

from __future__ import annotations

import marshal
from collections.abc import Mapping, Sequence, Set
from itertools import repeat
from typing import Any, Protocol, cast

from rstream.broker.base import RecordBlock
from rstream.processors.base import Frame, Processor, RecordError, StreamContext
from rstream.processors.chunk import Chunk
from rstream.processors.fold import Accumulated
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import SOURCE_STYLE, OperatorSpec, Role, register
from rstream.serde.codec import PICKLE_MARK, decode
from rstream.settings import JobProperties
from rstream.shuffle import wire
from rstream.shuffle.batches import Fields
from rstream.shuffle.wire import FOLD, PARTIAL_HEADER, RECORDS, RECORDS_HEADERS, WindowPartial, run_times

_UNSEEN: Any = object()
_loads = marshal.loads


def _shuffled_value(body: bytes, headers: dict[str, str] | None) -> Any:
    """The value of an unframed shuffle record: a fold partial's accumulator (``Accumulated``) or a value."""
    if headers is not None and PARTIAL_HEADER in headers:  # a fold partial: (accumulator, records)
        return Accumulated(decode(body)[0])
    return _loads(body) if body[0] != PICKLE_MARK else decode(body)


#: No offsets (``ShuffleSourceProcessor.expanded``).
_NONE: frozenset[int] = frozenset()


class _TakesPartials(Protocol):
    """A child a window partial goes to (a windowed count that reads frames: ``takes_frames``)."""

    def take_partial(self, key: Any, partial: WindowPartial) -> None: ...


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
    def chunked_root(self) -> bool:
        # a framed topic's data records go in chunks only to an operator that reads their frames
        # (a windowed count); markers always go record by record (QueueRun.feed splits them out)
        return not self.framed or (len(self.children) == 1 and getattr(self.children[0], "takes_frames", False))

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        self._keys: dict[Any, Any] = {}  # serialized key -> key: keys repeat, decoding them once is enough

    def receive(self, offset: int, key: Any, body: bytes, born: int, store: int, headers: Any) -> None:
        k = self._keys.get(key, _UNSEEN)
        if k is _UNSEEN:
            k = self._keys[key] = decode(key) if key is not None else None
        if not self.framed:
            if headers is not None and PARTIAL_HEADER in headers:
                if headers[PARTIAL_HEADER] == RECORDS:
                    self._each_record(k, key, body, born)
                    return
                self.records_in += 1
                self.forward(k, _shuffled_value(body, headers), born)
            else:  # decode() inlined: one call less per record
                self.records_in += 1
                self.forward(k, _loads(body) if body[0] != PICKLE_MARK else decode(body), born)
            return
        ctx = self.ctx
        ctx.time.read_ms = store
        if headers:
            kind = headers.get(PARTIAL_HEADER)
            if kind == FOLD:  # a key's values of a source range folded for a per-batch aggregation: no frame
                self.records_in += 1
                self.forward(k, _shuffled_value(body, headers), born)
                return
            if kind is not None:  # a source range's counts of one key per window
                partial = WindowPartial(*decode(body))
                self.records_in += len(partial.times)  # the records it holds, as if each had come alone
                for child in self.children:
                    cast(_TakesPartials, child).take_partial(k, partial)
                return
            self.markers += 1
            self._control(headers, store)
            return
        self.records_in += 1
        value, watermark, producer, source_offset, side = decode(body)
        ctx.at.frame = Frame(watermark, producer, source_offset, side)
        self.forward(k, value, born)

    def _each_record(self, k: Any, key: bytes, body: bytes, born: int) -> None:
        """A partial that stands for a key's records (``rstream.shuffle.combine.CountCombiner``): each
        of them on, with its own time and no value (a count needs none), as if it had come alone.
        One that user code after the count raises on is a dead letter of its own (the partial as
        read, with the record's time), and the others go on, as they would have one by one."""
        ctx = self.ctx
        for ts in run_times(decode(body)):
            self.records_in += 1
            try:
                self.forward(k, None, ts)
            except RecordError as err:
                if not ctx.settings.skip_data_error:
                    raise
                ctx.dead_letter(err, key, body, ts)

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
            if headers is not None and headers.get(PARTIAL_HEADER) == RECORDS:
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
            keys[kb] = decode(kb) if isinstance(kb, bytes) else None  # a shuffle key is bytes
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
        # the values column as it is (a broker's lazily decoding sequence stays lazy: a windowed count
        # reads a value only for a late record)
        return Chunk(list(records.offsets), keys, cast(list, fields[0]), list(records.borns))

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
            ctx.time.read_ms = records.stores[-1]
            ctx.at.frame = self.frame_at(len(records) - 1)

    def _control(self, headers: dict[str, str], stored_ms: int) -> None:
        ctx = self.ctx
        assert ctx is not None and ctx.time.watermarks is not None
        record = wire.decode(None, b"", headers)
        if isinstance(record, wire.Marker):  # the producer was active when its marker was stored
            ctx.time.watermarks.update(record.producer, record.watermark, stored_ms, record.behind, record.flush)
        elif isinstance(record, wire.Tick) and record.flush:
            ctx.time.watermarks.end_input()
        # the end of input, once it reached every producer (a chained one tells it after its results)
        flush = ctx.time.watermarks.all_ended()
        ctx.time.flushed = ctx.time.flushed or flush
        ctx.advance(force_idle=flush)

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, markers=self.markers)


def _make_shuffle_source(name: str, params: Mapping[str, Any], settings: JobProperties,
                         sink_queues: Mapping[str, int]) -> Processor:
    return ShuffleSourceProcessor(name, params.get("framed", False))


#: Added by the second build after a shuffle topic: the root of its pipeline.
SHUFFLE_SOURCE = register(OperatorSpec("shuffle_source", SOURCE_STYLE, _make_shuffle_source, role=Role.INTERNAL))
