"""The shuffle sink: each record to the shuffle topic queue of its key (RIP-58's shuffle), with its
source queue's watermark on a framed topic, and a watermark marker to every queue at the end of the
range. A combine node before it (``rstream.shuffle.combine``) hands it partials instead of records."""

from __future__ import annotations

import marshal
from collections import Counter
from collections.abc import Iterator, Mapping
from itertools import accumulate, repeat
from operator import itemgetter, sub
from typing import Any

from rstream.processors.base import Processor, StreamContext
from rstream.processors.chunk import Chunk, ChunkedPipeline
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import SHUFFLE_STYLE, OperatorSpec, Role, register
from rstream.processors.watermarks import finite
from rstream.serde.codec import MARSHAL_VERSION, encode, stable_queue
from rstream.settings import JobProperties
from rstream.shuffle import wire
from rstream.shuffle.batches import FrameRecords, ItemRecords
from rstream.time.watermark import NO_WATERMARK

_dumps = marshal.dumps
_FIRST, _SECOND = itemgetter(0), itemgetter(1)

#: Below this many records a chunk's watermarks are a running max in Python (numpy's calls cost more).
_NUMPY_MARKS = 256
_INT64 = (-(2**63), 2**63 - 1)


def running_marks(times: list[Any], lateness: int, watermark: int) -> list[Any]:
    """Each record's watermark: ``max(watermark, max(times[:i + 1]) - lateness)`` for record ``i``.
    With numpy (imported when a chunk first needs it) where every time is an int that fits 64 bits
    with room for the lateness: 30 ns a record against 140 for ``accumulate(..., max)`` (two fifths
    of a framed sink's own time in the bench's window count); the same ints either way."""
    n = len(times)
    if n >= _NUMPY_MARKS and _INT64[0] + lateness <= watermark <= _INT64[1] and 0 <= lateness:
        import numpy as np

        at = np.array(times)
        if at.dtype == np.int64 and int(at.min()) >= _INT64[0] + lateness:
            at -= lateness
            np.maximum.accumulate(at, out=at)
            np.maximum(at, watermark, out=at)
            marks: list[Any] = at.tolist()
            return marks
    marks = list(accumulate(map(sub, times, repeat(lateness)), max, initial=watermark))
    del marks[0]  # the watermark before the chunk
    return marks


def _frames() -> FrameRecords:
    return FrameRecords(encode, MARSHAL_VERSION)


def _items() -> ItemRecords:
    return ItemRecords(encode, MARSHAL_VERSION)


class ShuffleSinkProcessor(Processor):
    """Sends each record to the shuffle topic queue chosen by a stable hash of its serialized key,
    so every record of a key meets the same aggregate, in whatever process it runs.

    A *framed* shuffle sink (feeding windows or joins) also keeps its source queue's watermark
    (``max(watermark, data time - allowed lateness)``, never decreasing), sends it with every
    record, and at the end of the batch sends it as a marker to every shuffle queue, also to
    queues that got no record, so a key-sparse queue still sees time advance.

    With ``defer`` (set by the task where no other branch sees its records, so no one can change a
    value after it took it), an unframed sink hands each value to the broker as it is, an item of
    ``ItemRecords``, encoded with its stored batch instead of one by one here. A framed sink keeps
    its frames in ``FrameRecords``: per chunk and queue, one part whose values are encoded at once,
    while they are fresh in the cache (kept as objects until the batch ends, encoding them then
    measured slower), and whose watermarks and source offsets stay columns: no tuple and no body
    per record, and the reading side decodes the values only where it needs them."""

    #: Whether values may be kept as they are until the batch is appended (see the class docstring).
    defer = False
    #: A combine node before it may send partials through it (``rstream.shuffle.combine.PartialSink``).
    takes_partials = True

    def alone(self) -> None:
        self.defer = True

    def __init__(self, name: str, topic: str, queues: int, framed: bool = False, side: int = 0) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.framed = framed
        self.side = side
        self.watermark = NO_WATERMARK
        self.records_out = 0

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        self.records_out = 0  # the input records this batch's shuffle records stand for (markers: none)
        self.from_source = ctx.time.watermarks is None  # in a shuffle pipeline, time comes from upstream
        # a framed sink keeps its frames in parts, as columns (``FrameRecords``); a deferred one its values
        # as items (``ItemRecords``): each encoded with its stored batch, not one by one here
        if self.framed:
            self._outs = [ctx.out.columns(self.topic, q, _frames) for q in range(self.queues)]
        elif self.defer:
            self._outs = [ctx.out.columns(self.topic, q, _items) for q in range(self.queues)]
        else:
            self._outs = [ctx.output(self.topic, q) for q in range(self.queues)]
        self._deferred = all(isinstance(out, ItemRecords) for out in self._outs)
        #: every queue's output keeps frames as columns (``FrameRecords``): a chunk goes in as columns
        self._fielded = self.framed and all(type(out) is FrameRecords for out in self._outs)
        self._routes: dict[Any, tuple[Any, bytes]] = {}  # key -> (its queue's output, serialized key)
        self._adders: dict[Any, tuple[Any, Any, Any, bytes]] = {}  # key -> its queue's appends, serialized key
        self._slots: dict[Any, tuple[int, bytes]] = {}  # key -> (its queue, serialized key)
        self.producer = f"{ctx.at.topic}/{ctx.at.queue}/{self.name}"
        self.watermark = ctx.time.source_watermarks.get(self.name, NO_WATERMARK)
        self.lateness = ctx.settings.allowed_lateness_ms

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        route = self._routes.get(key) or self._route(key)  # keys are hashable here: key_by checked them
        out, kb = route
        self.records_out += 1
        if not self.framed:
            if self._deferred:
                out.add(kb, value, ts)
                return
            try:  # encode() inlined: one call less per record
                out.append((kb, _dumps(value, MARSHAL_VERSION), ts, None, None))
            except ValueError:
                out.append((kb, encode(value), ts, None, None))
            return
        ctx = self.ctx
        if self.from_source:
            candidate = ts - self.lateness
            if candidate > self.watermark:
                self.watermark = candidate
            wm = self.watermark
            offset = ctx.at.offset
        else:
            wm = self.watermark = max(self.watermark, ctx.time.emit_watermark)
            offset = ctx.at.frame.source_offset
        self._send_frame(out, kb, value, ts, wm, offset)

    def _send_frame(self, out: Any, kb: bytes, value: Any, ts: int, wm: int, offset: int) -> None:
        """One record with its frame to its queue's output ``out``."""
        if type(out) is FrameRecords:
            out.add(kb, (value, wm, self.producer, offset, self.side), ts)
        else:
            out.append((kb, encode((value, wm, self.producer, offset, self.side)), ts, None, None))

    def _route(self, key: Any) -> tuple[Any, bytes]:
        """The key's queue's output (a list or ``ItemRecords``) and serialized key, cached for the batch."""
        q, kb = self._slots.get(key) or self._slot(key)
        route = self._routes[key] = (self._outs[q], kb)
        return route

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        if self.framed and not self.from_source:
            plan.each(chunk, self.process)
            return
        self.records_in += len(chunk.offsets)
        self.records_out += len(chunk.offsets)
        if self._deferred:
            self._add_chunk(chunk)
            return
        if self.framed:
            self.send_frames(chunk, self.marks(chunk.times))
            return
        try:  # every value at once; one that marshal cannot write: each pickled or not, as encode() does
            bodies = list(map(_dumps, chunk.values, repeat(MARSHAL_VERSION)))
        except ValueError:
            bodies = list(map(encode, chunk.values))
        self._append(chunk.keys, bodies, chunk.times)

    def _append(self, keys: list[Any], bodies: list[bytes], times: list[int]) -> None:
        """Each body to its key's queue (outputs that take whole records)."""
        get, find = self._routes.get, self._route
        for key, body, ts in zip(keys, bodies, times):
            route = get(key) or find(key)
            route[0].append((route[1], body, ts, None, None))

    def marks(self, times: list[Any]) -> list[Any]:
        """Each record's watermark, the source queue's so far: a running max of time - lateness (the
        sink's watermark moves on to the last)."""
        marks = running_marks(times, self.lateness, self.watermark)
        if marks:
            self.watermark = marks[-1]
        return marks

    def send_frames(self, chunk: Chunk, marks: list[Any]) -> None:
        """A source pipeline's chunk, each record with its frame (its watermark from ``marks``). A
        combiner sends the records it does not combine this way (they count as records out here)."""
        if not chunk.offsets:
            return
        if self._fielded:
            self._add_frames(chunk, marks)
            return

        def frames() -> Iterator[tuple[Any, int, str, int, int]]:
            # straight into marshal, no list of them: zip reuses its tuple once dumps let go of it
            return zip(chunk.values, marks, repeat(self.producer), chunk.offsets, repeat(self.side))

        try:
            bodies = list(map(_dumps, frames(), repeat(MARSHAL_VERSION)))
        except ValueError:  # a value marshal cannot write: pickled, as encode() does
            bodies = list(map(encode, frames()))
        self._append(chunk.keys, bodies, chunk.times)

    def _add_frames(self, chunk: Chunk, marks: list[Any]) -> None:
        """``_send_frames`` where every output keeps frames in parts (``FrameRecords``): each column
        of the chunk reordered once by queue (a stable sort, so each queue keeps the chunk's order),
        then each queue's run added as one part, with no tuple made per record."""
        n = len(chunk.offsets)
        get, find = self._slots.get, self._slot
        placed = [get(key) or find(key) for key in chunk.keys]
        queues = list(map(_FIRST, placed))
        kbs = list(map(_SECOND, placed))
        producer, side, outs = self.producer, self.side, self._outs
        if queues.count(queues[0]) == n:  # every record to one queue: the columns as they are
            outs[queues[0]].extend(kbs, chunk.times, chunk.values, marks, chunk.offsets, producer, side)
            return
        pick = itemgetter(*sorted(range(n), key=queues.__getitem__))
        kbs, times, values, marks, offsets = (pick(kbs), pick(chunk.times), pick(chunk.values), pick(marks),
                                              pick(chunk.offsets))
        counts = Counter(queues)
        lo = 0
        for q in sorted(counts):
            hi = lo + counts[q]
            outs[q].extend(kbs[lo:hi], times[lo:hi], values[lo:hi], marks[lo:hi], offsets[lo:hi], producer, side)
            lo = hi

    def send_partial(self, key: Any, body: bytes, ts: Any, headers: dict[str, str], records: int) -> None:
        """A combiner's partial for ``key`` (its body already encoded, ``headers`` saying its kind) to
        the key's queue: it stands for ``records`` input records."""
        q, kb = self._slots.get(key) or self._slot(key)
        self._outs[q].append((kb, body, ts, headers, None))
        self.records_out += records

    def _slot(self, key: Any) -> tuple[int, bytes]:
        """The key's queue and serialized key, cached for the batch."""
        kb = encode(key)
        slot = self._slots[key] = (stable_queue(kb, self.queues), kb)
        return slot

    def _add_chunk(self, chunk: Chunk) -> None:
        """``take_chunk`` when deferred (unframed): each value to its key's queue, as an item."""
        adders, find = self._adders, self._adder
        for key, item, ts in zip(chunk.keys, chunk.values, chunk.times):
            add_key, add_item, add_born, kb = adders.get(key) or find(key)
            add_key(kb)
            add_item(item)
            add_born(ts)

    def _adder(self, key: Any) -> tuple[Any, Any, Any, bytes]:
        """The appends of the key's queue's columns, and the serialized key, cached for the batch."""
        out, kb = self._routes.get(key) or self._route(key)
        adder = self._adders[key] = (out.keys.append, out.items.append, out.borns.append, kb)
        return adder

    def flush(self) -> None:
        if not self.framed:
            return
        ctx = self.ctx
        if not self.from_source:
            self.watermark = max(self.watermark, ctx.time.emit_watermark)
        # a pipeline that read the end of input says so downstream, after what it made of it
        marker = wire.marker(self.watermark, self.producer, ctx.now_ms(), not ctx.at.caught_up, ctx.time.flushed)
        for out in self._outs:
            out.append(marker)

    def written(self) -> dict[str, int]:
        return {self.topic: self.records_out}

    def carried_watermark(self) -> int | None:
        return self.watermark if self.framed else None

    def metrics(self) -> OperatorMetrics:
        if self.framed:
            return OperatorMetrics.of(records_in=self.records_in, watermark=finite(self.watermark))
        return OperatorMetrics.of(records_in=self.records_in)




def _make_shuffle_sink(name: str, params: Mapping[str, Any], settings: JobProperties,
                       sink_queues: Mapping[str, int]) -> Processor:
    return ShuffleSinkProcessor(name, params["topic"], params["queues"], params.get("framed", False),
                                params.get("side", 0))


#: Added by the second build before an aggregation or join: records to a shuffle topic, by key.
SHUFFLE_SINK = register(OperatorSpec("shuffle_sink", SHUFFLE_STYLE, _make_shuffle_sink, role=Role.INTERNAL,
                                     writes="shuffle_topic"))
