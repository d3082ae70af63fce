"""Combining before the shuffle: the ``COMBINE`` node that ``build(combine=True)`` inserts before a
shuffle sink where the aggregation after the shuffle allows it, and the combiners it runs.

RIP-58's shuffle sends one record per input record. A combine node sends, per key and source range,
one *partial* that stands for all of that key's records (Spark's partial aggregation before an
exchange; Kafka Streams' ``topology.optimization`` is the precedent for making it a visible rewrite
of the topology). The results, the state and the late records are those of the plain shuffle; what
the shuffle topic holds, and the order of updates across keys within a range, change.

Three combiners, one per kind of partial (``rstream.shuffle.wire``):

- ``CountCombiner`` before a count that emits every update: per key, how many records came and
  their data times (runs); the count emits one update per record from it.
- ``FoldCombiner`` before an aggregation that emits once per batch (``aggregate_emit="batch"``):
  per key, the fold of its values (the aggregation merges it).
- ``WindowCountCombiner`` before a count over tumbling or sliding windows: per key, the on-time
  records' count per window start; late records go on alone with their frames.

A combiner that does not apply to a job (an aggregation other than a count that emits every update,
a window count on processing time, records not straight from a source queue) passes records on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from operator import lt, not_
from typing import Any, Protocol, cast

from rstream.processors.base import Processor, StreamContext
from rstream.processors.chunk import Chunk, ChunkedPipeline
from rstream.processors.fold import Fold
from rstream.processors.spec import NodeStyle, OperatorSpec, Role, register
from rstream.serde.codec import encode
from rstream.settings import JobProperties
from rstream.shuffle import wire
from rstream.time.watermark import NO_WATERMARK, TimeType
from rstream.time.windows import TumblingWindow, Window


class PartialSink(Protocol):
    """What a combine node needs of the shuffle sink after it (``rstream.shuffle.sink``, which declares
    ``takes_partials``): where it writes and as which producer, its watermark marks, and sending frames
    and partials. The combine node names no other node's class."""

    name: str
    topic: str
    side: int
    producer: str
    records_out: int
    ctx: StreamContext

    def marks(self, times: list[Any]) -> list[Any]: ...

    def send_frames(self, chunk: Chunk, marks: list[Any]) -> None: ...

    def send_partial(self, key: Any, body: bytes, ts: Any, headers: dict[str, str], records: int) -> None: ...


class Combiner(Protocol):
    """What a combine node runs for one source range: records in, partials out at the end."""

    #: The kind of partial it sends (``wire.RECORDS``, ``wire.FOLD``, ``wire.WINDOWS``).
    partial: str

    def add(self, key: Any, value: Any, ts: int) -> bool:
        """One record (user code that raises here raises ``RecordError``); False where it went on
        alone instead (a late record before a window count)."""

    def add_chunk(self, chunk: Chunk) -> bool:
        """A chunk's items, as ``add`` on each would; False (nothing added) where it takes them one by
        one only (user code that may raise on one of them)."""

    def held(self, key: Any) -> int:
        """How many of ``key``'s records the range's partial holds so far."""

    def flush(self) -> None:
        """Send each key's partial to the shuffle sink."""


class CountCombiner:
    """Before a count that emits every update: per key, its records' data times as runs ``[time, n,
    time, n, ...]`` (one run when they share a time, as records sent together do). A count needs no
    value, so none is sent."""

    partial = wire.RECORDS

    def __init__(self, sink: PartialSink) -> None:
        self.sink = sink
        self.runs: dict[Any, list[Any]] = {}

    def add(self, key: Any, value: Any, ts: int) -> bool:
        self._add_runs(((key, ts, 1),))
        return True

    def add_chunk(self, chunk: Chunk) -> bool:
        keys, times = chunk.keys, chunk.times
        first = times[0]
        if times.count(first) == len(times) and len(set(map(type, times))) == 1:  # one time (1 == 1.0 is not)
            # each key's records at once, in order of first appearance (as Counter keeps them)
            self._add_runs((key, first, n) for key, n in Counter(keys).items())
        else:
            self._add_runs(zip(keys, times, repeat(1)))
        return True

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

    def held(self, key: Any) -> int:
        return sum(self.runs.get(key, [])[1::2])

    def flush(self) -> None:
        send = self.sink.send_partial
        for key, runs in self.runs.items():
            send(key, encode(runs), max(runs[::2]), wire.RECORDS_HEADERS, sum(runs[1::2]))


class FoldCombiner:
    """Before an aggregation that emits once per batch: per key, the fold of its values with the
    aggregation's own fold, and the latest data time."""

    partial = wire.FOLD

    def __init__(self, sink: PartialSink, fold: Fold, proc: Processor) -> None:
        self.sink, self.fold, self.proc = sink, fold, proc
        self.partials: dict[Any, list[Any]] = {}  # key -> [accumulator, latest time, records]

    def add(self, key: Any, value: Any, ts: int) -> bool:
        fold = self.fold
        partial = self.partials.get(key)
        try:
            x = fold.extract(value)
            if partial is None:
                self.partials[key] = [fold.add(fold.initial(), x), ts, 1]
                return True
            partial[0] = fold.add(partial[0], x)
        except Exception as exc:
            raise self.proc.ctx.record_error(self.proc.name, exc, value) from exc
        partial[2] += 1
        if ts > partial[1]:
            partial[1] = ts
        return True

    def add_chunk(self, chunk: Chunk) -> bool:
        if not self.fold.counts:  # user code: record by record, so one that raises says which
            return False
        keys, times = chunk.keys, chunk.times
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
                partials[key] = [n, ts, n]
                continue
            partial[0] += n
            partial[2] += n
            if ts > partial[1]:
                partial[1] = ts
        return True

    def held(self, key: Any) -> int:
        partial = self.partials.get(key)
        return 0 if partial is None else partial[2]

    def flush(self) -> None:
        send = self.sink.send_partial
        for key, (acc, ts, n) in self.partials.items():
            send(key, encode((acc, n)), ts, wire.FOLD_HEADERS, n)


class WindowCountCombiner:
    """Before a count over tumbling or sliding windows, on a framed topic. Each record still gets its
    source queue's watermark (the sink's); one late behind it goes on alone with its frame, as the
    plain shuffle sends every record (its late row needs its value and offset), and the others are
    counted per key and window start for the whole range, then sent at its end as one partial per
    key, before the watermark marker. The window count adds the counts up; where a partial's window
    already fired (its source was idle), it finds those records again
    (``RunMode.source_records``) and reports each late, as if it had come alone."""

    partial = wire.WINDOWS

    def __init__(self, sink: PartialSink, window: Window, watermark_before: int) -> None:
        self.sink, self.window = sink, window
        #: A tumbling window's size: each record is in the window starting at ``t - t % size``.
        self.size = window.size if isinstance(window, TumblingWindow) else None
        self.watermark_before = watermark_before
        self.counts: Counter[tuple[Any, Any]] = Counter()  # (key, window start) -> on-time records in it
        self.times: defaultdict[Any, list[Any]] = defaultdict(list)  # key -> its on-time records' data times

    def add(self, key: Any, value: Any, ts: int) -> bool:
        # (record by record only where a chunk fell back, or a range is re-executed): a chunk of one
        return not self._combine(Chunk([self.sink.ctx.at.offset], [key], [value], [ts]))

    def add_chunk(self, chunk: Chunk) -> bool:
        self._combine(chunk)
        return True

    def _combine(self, chunk: Chunk) -> int:
        """Each record's watermark; the late ones on alone with their frames (how many: returned),
        the others counted."""
        n = len(chunk.offsets)
        if not n:
            return 0
        sink = self.sink
        keys, times = chunk.keys, chunk.times
        marks = sink.marks(times)
        late = list(map(lt, times, marks))
        if True in late:
            at = list(compress(range(n), late))
            pick = [chunk.offsets[i] for i in at], [keys[i] for i in at], [chunk.values[i] for i in at], \
                [times[i] for i in at]
            sink.records_out += len(at)
            sink.send_frames(Chunk(*pick), [marks[i] for i in at])
            on_time = list(map(not_, late))
            keys, times = list(compress(keys, on_time)), list(compress(times, on_time))
        times_of = self.times
        for key, t in zip(keys, times):
            times_of[key].append(t)
        # counted in C, in order of first appearance (as ``add`` adds them)
        if self.size is not None:
            size = self.size
            self.counts.update(zip(keys, [t - t % size for t in times]))
        else:
            assign = self.window.assign
            self.counts.update((key, start) for key, t in zip(keys, times) for start, _end in assign(t))
        return n - len(keys)

    def held(self, key: Any) -> int:
        return len(self.times.get(key, ()))

    def flush(self) -> None:
        sink, ctx, times_of = self.sink, self.sink.ctx, self.times
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
            partial = wire.WindowPartial(starts, counts, times, sink.producer, ctx.at.start,
                                         ctx.at.end, self.watermark_before, sink.side)
            sink.send_partial(key, encode(tuple(partial)), max(times), wire.WINDOWS_HEADERS, len(times))


class CombineProcessor(Processor):
    """The ``COMBINE`` node: hands each record to its combiner and, at the end of the range, has it
    send one partial per key through the shuffle sink after it (its only child). Where its combiner
    does not apply to the job, it passes records on to the sink unchanged."""

    #: Whether nothing but pure operators stands between the source and this node (``alone``).
    combinable = False

    def __init__(self, name: str, fold: Fold, window: Window | None) -> None:
        super().__init__(name)
        self.fold, self.window = fold, window
        self.combiner: Combiner | None = None

    def alone(self) -> None:
        self.combinable = True

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        sink = self.children[0]
        assert getattr(sink, "takes_partials", False), f"{self.name} must feed a shuffle sink, not {sink.name}"
        self.sink = cast(PartialSink, sink)
        self.combiner = self._combiner(ctx, self.sink)

    def _combiner(self, ctx: Any, sink: PartialSink) -> Combiner | None:
        """The combiner for this job's settings, or None where combining does not apply."""
        settings: JobProperties = ctx.settings
        if not ctx.mode.combine:  # a range run again to find a partial's records: every record on its own
            return None
        if self.window is not None:
            from_source = ctx.time.watermarks is None
            if (self.fold.counts and self.combinable and from_source
                    and settings.time_type is not TimeType.PROCESSING_TIME):
                return WindowCountCombiner(sink, self.window, ctx.time.source_watermarks.get(sink.name, NO_WATERMARK))
            return None
        if settings.per_batch:
            return FoldCombiner(sink, self.fold, self)
        if self.fold.counts:
            return CountCombiner(sink)
        return None

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        combiner = self.combiner
        if combiner is None:
            self.forward(key, value, ts)
            return
        observer = self.ctx.mode.observer
        if observer is None:
            combiner.add(key, value, ts)
            return
        place = combiner.held(key)
        if combiner.add(key, value, ts):
            observer.combined(self.sink.topic, combiner.partial, key, ts, place)

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        if self.combiner is None:
            plan.send(self, chunk)
            self.records_in += len(chunk.offsets)
            return
        if self.combiner.add_chunk(chunk):
            self.records_in += len(chunk.offsets)
        else:
            plan.each(chunk, self.process)

    def held(self, key: Any) -> int | None:
        """How many of ``key``'s records this range's partial holds so far (None: not combining)."""
        return None if self.combiner is None else self.combiner.held(key)

    def flush(self) -> None:
        if self.combiner is not None:
            self.combiner.flush()


#: How a combine node is drawn: a funnel (many records in, one partial out).
COMBINE_STYLE = NodeStyle("invtrapezium", "#ffe8cc", "combine")


def _make_combine(name: str, params: Mapping[str, Any], settings: JobProperties,
                  sink_queues: Mapping[str, int]) -> Processor:
    return CombineProcessor(name, params["fold"], params.get("combine_window"))


#: Inserted by ``build(combine=True)`` before a shuffle sink (see the module docstring).
COMBINE = register(OperatorSpec("combine", COMBINE_STYLE, _make_combine, role=Role.INTERNAL))
