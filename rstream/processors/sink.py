"""Operators that write to topics: the shuffle sink (to a shuffle topic, by key) and the sink."""

from __future__ import annotations

import marshal
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import accumulate, compress, repeat
from operator import eq, itemgetter, lt, not_, sub
from typing import Any

from rstream.broker.batch import BodyRecords
from rstream.processors.base import Processor, WindowPartial
from rstream.processors.chunk import Chunk, ChunkedPipeline
from rstream.processors.fold import CountFold, Fold
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import SHUFFLE_STYLE, SINK_STYLE, OperatorSpec, Role, register
from rstream.processors.watermarks import ACTIVE_HEADER, BEHIND_HEADER, PRODUCER_HEADER, WM_HEADER, finite
from rstream.serde.batches import FrameRecords, ItemRecords
from rstream.serde.codec import MARSHAL_VERSION, encode, stable_queue
from rstream.settings import JobProperties
from rstream.time.watermark import NO_WATERMARK, TimeType
from rstream.time.windows import WINDOW_KEY_FORMAT, TumblingWindow, Window, WindowKey

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

    def __init__(self, name: str, topic: str, queues: int, framed: bool = False, side: int = 0) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.framed = framed
        self.side = side
        self.watermark = NO_WATERMARK
        self.markers_sent = 0

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.markers_sent = 0  # the watermark markers ``flush`` sent (they are not records out)
        self.from_source = ctx.watermarks is None  # in a shuffle pipeline, time comes from upstream
        if self.framed:
            self._outs = [ctx.frame_output(self.topic, q) for q in range(self.queues)]
        else:
            output = ctx.item_output if self.defer else ctx.output
            self._outs = [output(self.topic, q) for q in range(self.queues)]
        self._deferred = all(isinstance(out, ItemRecords) for out in self._outs)
        #: every queue's output keeps frames as columns (``FrameRecords``): a chunk goes in as columns
        self._fielded = self.framed and all(type(out) is FrameRecords for out in self._outs)
        self._routes: dict[Any, tuple[Any, bytes]] = {}  # key -> (its queue's output, serialized key)
        self._adders: dict[Any, tuple[Any, Any, Any, bytes]] = {}  # key -> its queue's appends, serialized key
        self._slots: dict[Any, tuple[int, bytes]] = {}  # key -> (its queue, serialized key)
        self.producer = f"{ctx.topic}/{ctx.queue}/{self.name}"
        self.watermark = ctx.source_watermarks.get(self.name, NO_WATERMARK)
        self.lateness = ctx.settings.allowed_lateness_ms

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        route = self._routes.get(key) or self._route(key)  # keys are hashable here: key_by checked them
        out, kb = route
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
            offset = ctx.offset  # type: ignore[union-attr]
        else:
            wm = self.watermark = max(self.watermark, ctx.emit_watermark)  # type: ignore[union-attr]
            offset = ctx.frame.source_offset  # type: ignore[union-attr]
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
        if self._deferred:
            self._add_chunk(chunk)
            return
        if self.framed:
            self._send_frames(chunk, self._marks(chunk.times))
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

    def _marks(self, times: list[Any]) -> list[Any]:
        """Each record's watermark, the source queue's so far: a running max of time - lateness (the
        sink's watermark moves on to the last)."""
        marks = running_marks(times, self.lateness, self.watermark)
        if marks:
            self.watermark = marks[-1]
        return marks

    def _send_frames(self, chunk: Chunk, marks: list[Any]) -> None:
        """A source pipeline's chunk, each record with its frame (its watermark from ``marks``)."""
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

    def _send_partial(self, key: Any, body: bytes, ts: Any, headers: dict[str, str]) -> None:
        """A combining sink's partial for ``key`` (its body already encoded) to the key's queue."""
        q, kb = self._slots.get(key) or self._slot(key)
        self._outs[q].append((kb, body, ts, headers, None))

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
            self.watermark = max(self.watermark, ctx.emit_watermark)  # type: ignore[union-attr]
        marker = {WM_HEADER: str(self.watermark), PRODUCER_HEADER: self.producer, ACTIVE_HEADER: str(ctx.now_ms())}  # type: ignore[union-attr]
        if not ctx.caught_up:  # type: ignore[union-attr]
            marker[BEHIND_HEADER] = "1"
        for out in self._outs:
            out.append((None, b"", max(self.watermark, 0), marker, "WATERMARK"))
        self.markers_sent += len(self._outs)

    def metrics(self) -> OperatorMetrics:
        if self.framed:
            return OperatorMetrics.of(records_in=self.records_in, watermark=finite(self.watermark))
        return OperatorMetrics.of(records_in=self.records_in)


#: Header of a shuffle record that holds a partial aggregate (a combine), not an input value.
PARTIAL_HEADER = "rstream-partial"
_PARTIAL = {PARTIAL_HEADER: "1"}


class CombiningShuffleSinkProcessor(ShuffleSinkProcessor):
    """With ``aggregate_emit="batch"``: folds each key's values into one partial accumulator for the
    batch (the aggregation's own fold) and shuffles that, instead of every record (Spark's partial
    aggregation); the aggregation merges it."""

    def __init__(self, name: str, topic: str, queues: int, fold: Fold) -> None:
        super().__init__(name, topic, queues)
        self.fold = fold

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.partials: dict[Any, list[Any]] = {}

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        fold = self.fold
        partial = self.partials.get(key)
        try:
            x = fold.extract(value)
            if partial is None:
                self.partials[key] = [fold.add(fold.initial(), x), ts]
                return
            partial[0] = fold.add(partial[0], x)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc  # type: ignore[union-attr]
        if ts > partial[1]:
            partial[1] = ts

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        if type(self.fold) is not CountFold:
            plan.each(chunk, self.process)
            return
        keys, times = chunk.keys, chunk.times
        self.records_in += len(keys)
        latest: dict[Any, int] | None = None  # None: one time for all (records appended together)
        if times.count(times[0]) != len(times):
            if times == sorted(times):  # the common case: the last time of a key is its latest
                latest = dict(zip(keys, times))
            else:
                latest = {}
                for key, ts in zip(keys, times):
                    if ts > latest.get(key, ts - 1):
                        latest[key] = ts
        partials, first = self.partials, times[0]
        for key, n in Counter(keys).items():
            partial = partials.get(key)
            ts = first if latest is None else latest[key]
            if partial is None:
                partials[key] = [n, ts]
                continue
            partial[0] += n
            if ts > partial[1]:
                partial[1] = ts

    def flush(self) -> None:
        for key, (acc, ts) in self.partials.items():
            self._send_partial(key, encode(acc), ts, _PARTIAL)


#: ``PARTIAL_HEADER``'s value on a shuffle record that stands for a key's records (``combine_counts``).
RECORDS_PARTIAL = "records"
#: The headers of such a record.
RECORDS_HEADERS = {PARTIAL_HEADER: RECORDS_PARTIAL}


def run_times(runs: list[Any]) -> list[Any]:
    """The data times of the records a ``RecordCombiningShuffleSinkProcessor`` partial holds, in
    order, from its runs ``[time, how many, time, how many, ...]``."""
    times: list[Any] = []
    for ts, n in zip(runs[::2], runs[1::2]):
        times.extend(repeat(ts, n))
    return times


class RecordCombiningShuffleSinkProcessor(ShuffleSinkProcessor):
    """Before a count that emits every update (``aggregate_emit="record"``, no window; the job's
    ``combine_counts``): instead of one shuffle record per record, one per key at the end of the
    range, which says how many records of the key came and their data times, in order, as runs
    ``[time, how many, ...]`` (one run when they share a time, as records sent together do). The
    count emits an update for each of them, with its time, as if each had come alone
    (``ShuffleSourceProcessor``): the same updates, state and results per key; only the order of
    updates across keys within the range changes. A count needs no value, so none is sent."""

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.runs: dict[Any, list[Any]] = {}  # key -> [time, how many, time, how many, ...]
        self.records_combined = self.partials_sent = 0

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        self._add_runs(((key, ts, 1),))

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        keys, times = chunk.keys, chunk.times
        self.records_in += len(keys)
        first = times[0]
        if times.count(first) == len(times) and len(set(map(type, times))) == 1:  # one time (1 == 1.0 is not)
            # each key's records at once, in order of first appearance (as Counter keeps them)
            self._add_runs((key, first, n) for key, n in Counter(keys).items())
        else:
            self._add_runs(zip(keys, times, repeat(1)))

    def _add_runs(self, added: Iterable[tuple[Any, Any, int]]) -> None:
        """Each ``(key, time, how many)`` to its key's runs: its last run grows while the time is the same."""
        all_runs = self.runs
        for key, ts, n in added:
            runs = all_runs.get(key)
            if runs is None:
                all_runs[key] = [ts, n]
            elif runs[-2] == ts and type(runs[-2]) is type(ts):
                runs[-1] += n
            else:
                runs += (ts, n)

    def flush(self) -> None:
        for key, runs in self.runs.items():
            self._send_partial(key, encode(runs), max(runs[::2]), RECORDS_HEADERS)
        self.partials_sent = len(self.runs)
        self.records_combined = self.records_in


class WindowCombiningShuffleSinkProcessor(ShuffleSinkProcessor):
    """The framed shuffle sink before a count over tumbling or sliding windows. Each record still
    gets its source queue's watermark; one late behind it goes on alone with its frame, as
    ``ShuffleSinkProcessor`` sends every record (its late row needs its value and offset), and the
    others are counted per key and window start for the whole range, then sent at its end as one
    ``WindowPartial`` per key, before the watermark marker: Spark's partial aggregation. The window
    count adds the counts up; where a partial's window already fired (its source was idle), it
    finds those records again (``StreamContext.source_records``) and reports each late, as if it
    had come alone. The shuffle topic then holds a record per key and range, not per record.

    It combines where the records come straight from a source queue through pure operators only
    (``combinable``, set by the task: so the range can be run again to find them) and their data
    time is not the wall clock's, unless the job's ``combine_windows`` is off; else it is a plain
    framed sink."""

    #: Whether nothing but pure operators stands between the source and this sink (set by the task).
    combinable = False

    def __init__(self, name: str, topic: str, queues: int, window: Window, side: int = 0) -> None:
        super().__init__(name, topic, queues, framed=True, side=side)
        self.window = window
        #: A tumbling window's size: each record is in the window starting at ``t - t % size``.
        self.size = window.size if isinstance(window, TumblingWindow) else None

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        settings = ctx.settings
        self.combining = (self.combinable and self.from_source and settings.combine_windows
                          and settings.time_type is not TimeType.PROCESSING_TIME)
        self.watermark_before = self.watermark
        self.counts: Counter[tuple[Any, Any]] = Counter()  # (key, window start) -> on-time records in it
        self.times: defaultdict[Any, list[Any]] = defaultdict(list)  # key -> its on-time records' data times
        #: the records the range's partials hold, and the partials sent (the task counts records, not partials)
        self.records_combined = self.partials_sent = 0

    def process(self, key: Any, value: Any, ts: int) -> None:
        if not self.combining:
            super().process(key, value, ts)
            return
        # (record by record only where a chunk fell back, or a range is re-executed): a chunk of one
        self._combine(Chunk([self.ctx.offset], [key], [value], [ts]))  # type: ignore[union-attr]

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        if not self.combining:
            super().take_chunk(chunk, plan)
            return
        self._combine(chunk)

    def _combine(self, chunk: Chunk) -> None:
        """Each record's watermark; the late ones on alone with their frames, the others counted."""
        n = len(chunk.offsets)
        if not n:
            return
        self.records_in += n
        keys, times = chunk.keys, chunk.times
        marks = self._marks(times)
        late = list(map(lt, times, marks))
        if True in late:
            at = list(compress(range(n), late))
            pick = [chunk.offsets[i] for i in at], [keys[i] for i in at], [chunk.values[i] for i in at], \
                [times[i] for i in at]
            self._send_frames(Chunk(*pick), [marks[i] for i in at])
            on_time = list(map(not_, late))
            keys, times = list(compress(keys, on_time)), list(compress(times, on_time))
        times_of = self.times
        for key, t in zip(keys, times):
            times_of[key].append(t)
        # counted in C, in order of first appearance (as ``process`` adds them)
        if self.size is not None:
            size = self.size
            self.counts.update(zip(keys, [t - t % size for t in times]))
        else:
            assign = self.window.assign
            self.counts.update((key, start) for key, t in zip(keys, times) for start, _end in assign(t))

    def flush(self) -> None:
        if self.combining:
            ctx, times_of = self.ctx, self.times
            windows: dict[Any, tuple[list[Any], list[int]]] = {}  # key -> (window starts, counts)
            for (key, start), n in self.counts.items():
                at = windows.get(key)
                if at is None:
                    windows[key] = ([start], [n])
                else:
                    at[0].append(start)
                    at[1].append(n)
            for key, (starts, counts) in windows.items():
                times = times_of[key]
                partial = WindowPartial(starts, counts, times, self.producer, ctx.range_start, ctx.range_end,  # type: ignore[union-attr]
                                        self.watermark_before, self.side)
                self._send_partial(key, encode(tuple(partial)), max(times), _PARTIAL)
                self.records_combined += len(times)
            self.partials_sent = len(windows)
        super().flush()


class SinkProcessor(Processor):
    """Writes ``serializer(key, value)`` to the sink topic. Records with a key go to the queue of a
    stable hash of the key, so each key's results stay in order; keyless records keep their
    input queue's order (input queue modulo the sink's queue count)."""

    def __init__(self, name: str, topic: str, queues: int, serialize: Callable[[Any, Any], bytes]) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.serialize = serialize
        # a built-in serializer's method over a whole chunk (the same bytes as serialize, record by record)
        self.serialize_many = getattr(getattr(serialize, "__self__", None), "serialize_many", None)

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self._outs = [ctx.body_output(self.topic, q) for q in range(self.queues)]
        self._keyless = self._outs[ctx.queue % self.queues]
        self._routes: dict[Any, tuple[list[Any], Any]] = {}  # key -> (its queue's output, message key)
        #: key -> the appends of its queue's columns and its message key (outputs kept as columns)
        self._adds: dict[Any, tuple[Any, Any, Any, Any]] = {}
        self._columns = all(type(out) is BodyRecords for out in self._outs)

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            body = self.serialize(key, value)
            if type(body) is not bytes:
                body = _as_bytes(body)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, (key, value)) from exc  # type: ignore[union-attr]
        if key is None:
            self._keyless.append((None, body, ts, None, None))
            return
        try:
            route = self._routes.get(key)
        except TypeError:  # an unhashable key from a deserializer: route it without the cache
            out, mkey = self._route(key)
            out.append((mkey, body, ts, None, None))
            return
        if route is None:
            route = self._routes[key] = self._route(key)
        route[0].append((route[1], body, ts, None, None))

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        bodies = self.bodies(chunk)
        if bodies is None:  # record by record: process says which record, and converts str bodies
            plan.each(chunk, self.process)
            return
        self.append(chunk, bodies)

    def bodies(self, chunk: Chunk) -> list[bytes] | None:
        """The serialized bodies of a chunk's items, changing nothing; None when the serializer
        raised on one of them or returned something that is neither bytes nor str."""
        try:
            if self.serialize_many is not None:
                bodies = self.serialize_many(chunk.keys, chunk.values)
            else:
                bodies = list(map(self.serialize, chunk.keys, chunk.values))
            types = set(map(type, bodies))
            if types == {str, bytes} or types == {str}:
                bodies = [b.encode() if type(b) is str else b for b in bodies]
            elif types and types != {bytes}:
                return None
        except Exception:
            return None
        return bodies

    def append(self, chunk: Chunk, bodies: list[bytes]) -> None:
        """Write a chunk's items with their ``bodies``, each to its key's queue."""
        self.records_in += len(bodies)
        if self._columns:  # three appends per record; no tuple made for the broker to take apart
            if self._extend_windows(chunk, bodies) or self._extend_one_queue(chunk, bodies):
                return
            adds, find = self._adds, self._adder
            for key, body, ts in zip(chunk.keys, bodies, chunk.times):
                try:
                    add = adds.get(key) or find(key)
                except TypeError:  # an unhashable key from a deserializer: route it without the cache
                    add = self._adder(key, cache=False)
                add[0](add[3])
                add[1](body)
                add[2](ts)
            return
        routes, keyless = self._routes, self._keyless
        for key, body, ts in zip(chunk.keys, bodies, chunk.times):
            if key is None:
                keyless.append((None, body, ts, None, None))
                continue
            try:
                route = routes.get(key)
            except TypeError:  # an unhashable key from a deserializer: route it without the cache
                route = self._route(key)
            else:
                if route is None:
                    route = routes[key] = self._route(key)
            route[0].append((route[1], body, ts, None, None))

    def _extend_one_queue(self, chunk: Chunk, bodies: list[bytes]) -> bool:
        """Append the whole chunk with three ``extend`` calls when every distinct key of it goes to
        the same queue and is its own message key (a str, bytes or None key): a keyed count's results
        after a shuffle, whose queues split the keys as the sink's do (each of its queues' keys fall
        in one sink queue). False, and nothing appended, otherwise."""
        keys = chunk.keys
        try:
            distinct = set(keys)
        except TypeError:  # an unhashable key from a deserializer
            return False
        adds, find = self._adds, self._adder
        target = None
        for key in distinct:
            add = adds.get(key) or find(key)
            if add[3] is not key:
                return False
            if target is None:
                target = add
            elif add[0].__self__ is not target[0].__self__:
                return False
        if target is not None:
            target[0].__self__.extend(keys)
            target[1].__self__.extend(bodies)
            target[2].__self__.extend(chunk.times)
        return True

    def _extend_windows(self, chunk: Chunk, bodies: list[bytes]) -> bool:
        """Append a chunk of window results (every key a ``WindowKey``: fired windows, each one new
        to this sink, so a route cached per key would only cost) column by column: the message keys
        (``str(key)``) with one format, the queues from the keys' bytes as ``_route`` has them, then
        each queue's share with ``compress``, in the chunk's order. False, and nothing appended,
        for any other chunk or a key that marshal cannot write."""
        keys = chunk.keys
        if not keys or type(keys[0]) is not WindowKey or set(map(type, keys)) != {WindowKey}:
            return False
        if self.queues == 1:
            queues = None
        else:
            try:
                kbs = list(map(marshal.dumps, map(tuple, keys), repeat(MARSHAL_VERSION)))
            except ValueError:  # a key marshal cannot write: routed one by one (pickled, as encode does)
                return False
            queues = list(map(stable_queue, kbs, repeat(self.queues)))
        mkeys = list(map(WINDOW_KEY_FORMAT.format, *zip(*keys)))  # str(key), per column
        for q in sorted(set(queues)) if queues is not None else (0,):
            out = self._outs[q]
            if queues is None or queues.count(q) == len(queues):
                out.keys.extend(mkeys)
                out.bodies.extend(bodies)
                out.borns.extend(chunk.times)
                continue
            mask = list(map(eq, queues, repeat(q)))
            out.keys.extend(compress(mkeys, mask))
            out.bodies.extend(compress(bodies, mask))
            out.borns.extend(compress(chunk.times, mask))
        return True

    def _adder(self, key: Any, cache: bool = True) -> tuple[Any, Any, Any, Any]:
        """The appends of the columns of the key's queue (the input queue's for no key), and the
        message key; cached for the batch."""
        out: Any
        out, mkey = (self._keyless, None) if key is None else self._route(key)
        add = (out.keys.append, out.bodies.append, out.borns.append, mkey)
        if cache:
            self._adds[key] = add
        return add

    def _route(self, key: Any) -> tuple[list[Any], Any]:
        """The output list of the key's queue, and the message key (str or bytes). A window's result
        goes by the bytes of its plain tuple ``(key, start, end)``: marshal writes those, where a
        ``WindowKey`` would be pickled (three times slower, and bound to where the class lives)."""
        if self.queues == 1:
            out = self._outs[0]
        else:
            out = self._outs[stable_queue(encode(tuple(key) if type(key) is WindowKey else key), self.queues)]
        return out, key if type(key) is str or type(key) is bytes else str(key)


def _as_bytes(body: Any) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"the serializer must return bytes, got {type(body).__name__}: {body!r:.80}")


def _make_shuffle_sink(name: str, params: Mapping[str, Any], settings: JobProperties,
                       sink_queues: Mapping[str, int]) -> Processor:
    combine = params.get("combine")  # the fold of the aggregation after the shuffle, when it combines
    window = params.get("combine_window")  # (not "window": that would make the node a windowed one)
    if window is None and settings.per_batch and combine is not None:
        return CombiningShuffleSinkProcessor(name, params["topic"], params["queues"], combine)
    if window is None and type(combine) is CountFold and settings.combine_counts:  # a count of every update
        return RecordCombiningShuffleSinkProcessor(name, params["topic"], params["queues"])
    if window is not None and type(combine) is CountFold:  # a count over fixed windows
        return WindowCombiningShuffleSinkProcessor(name, params["topic"], params["queues"], window,
                                                   params.get("side", 0))
    return ShuffleSinkProcessor(name, params["topic"], params["queues"], params.get("framed", False),
                                params.get("side", 0))


def _make_sink(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return SinkProcessor(name, params["topic"], sink_queues[params["topic"]], params["serializer"])


#: Added by the second build before an aggregation or join: records to a shuffle topic, by key.
SHUFFLE_SINK = register(OperatorSpec("shuffle_sink", SHUFFLE_STYLE, _make_shuffle_sink, role=Role.INTERNAL,
                                     writes="shuffle_topic"))
#: ``sink(topic, serializer)``: every record to ``topic``.
SINK = register(OperatorSpec("sink", SINK_STYLE, _make_sink, role=Role.SINK, writes="topic"))
