"""Windowed aggregations: count, sum, min, max, avg and aggregate over tumbling, sliding and session
windows, fired once when the operator watermark reaches the window's end.

A record is *late* at a window operator when its data time is below the watermark it carried from
its source queue (so the decision does not depend on batching or shuffling), or when its window
already fired because its source was idle. Late records do not enter a result; they go to the
job's late-data topic with the reason.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from itertools import compress, repeat
from operator import le, lt, not_, or_
from typing import TYPE_CHECKING, Any

from rstream.processors.base import Frame, LateCause, Processor, StreamContext, _short_repr
from rstream.processors.chunk import Chunk, ChunkedPipeline, pure_path
from rstream.processors.fold import Fold
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.rewrites import FIRE_TO_SINK
from rstream.processors.spec import WINDOW_STYLE, OperatorSpec, Role, register
from rstream.processors.timed import MAX_PENDING, WindowedOperator
from rstream.processors.watermarks import finite
from rstream.serde.codec import PICKLE_MARK, encode
from rstream.state.store import MISSING, timer_key
from rstream.time.watermark import NO_WATERMARK
from rstream.time.windows import (
    SessionWindow,
    TumblingWindow,
    Window,
    WindowEmit,
    WindowError,
    WindowKey,
    WindowResult,
)

if TYPE_CHECKING:
    from rstream.processors.base import CountsByWindow
    from rstream.settings import JobProperties

class WindowAggregateProcessor(WindowedOperator):
    """One windowed aggregation on one shuffle queue, folding with ``fold``. The aggregation's spec
    (``rstream.processors.aggregate``) has it made by ``WINDOW``'s, without naming this class."""

    window: Window  # (never None here)

    def __init__(self, name: str, window: Window, fold: Fold, emit: WindowEmit = WindowEmit.FINAL) -> None:
        super().__init__(name, window)
        self.fold = fold
        self.session = isinstance(window, SessionWindow)
        #: ``emit="early"``: every result is a ``WindowResult``; the windows a batch changed and left open
        #: emit one early at its end (``flush``)
        self.early = emit == WindowEmit.EARLY
        self.early_emitted = 0

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        # this batch's accumulators of fixed windows, staged in the store at flush (sessions, which
        # merge, go straight to the store)
        self.cache: dict[tuple[Any, int, int], Any] = {}
        # fixed windows opened in this batch, each with its key's bytes (``encode``); and by end, those
        # bytes with what ``timers_due`` would list for it. Their timers stay here until ``flush``
        # stages those still open in the store, so one that also fires in the batch costs the store
        # nothing, and no timer key is made for it: a window's timer key is its end then
        # ``encode((key, start))``, and the start is the same for every window of one end, so windows
        # are in timer-key order when in the order of their ends, then of their keys' bytes
        # (marshal's bytes of a value are never the start of another's, and those of a tuple are its
        # items' one after the other). A key marshal cannot write (pickled) makes no such promise:
        # with one, ``_with_fresh`` makes every timer key
        self.fresh: dict[tuple[Any, int, int], bytes] = {}
        self.fresh_ends: dict[int, dict[bytes, tuple[int, tuple[Any, int]]]] = {}
        self._key_bytes: dict[Any, bytes] = {}
        self._pickled_keys = False
        # whether the store holds any window of this operator from an earlier batch: without one, a
        # window not in ``cache`` is new, and the store is not asked (a window's state and its timer
        # are staged together and deleted together)
        self.committed_windows = self.store.has_timers(self.name)
        # ``emit="early"``: the sessions this batch made or grew (fixed windows it changed are ``cache``'s)
        self.touched_sessions: dict[tuple[Any, int, int], None] = {}
        self.early_emitted = 0

    def flush(self) -> None:
        if self.early:
            self._emit_early()
        put, name, stage_timer = self.store.put, self.name, self.store.stage_timer
        for key, start, end in self.fresh:
            stage_timer(timer_key(name, end, (key, start)))
        for wk, acc in self.cache.items():
            put(name, wk, acc)
        # their timers and counts are staged now: a window that fires later deletes them
        self.fresh, self.fresh_ends = {}, {}
        super().flush()

    def staged(self) -> list[tuple[Any, Any]]:
        """``(window key, accumulator)`` held in memory that ``flush`` will put in the store."""
        return list(self.cache.items())

    def _emit_early(self) -> None:
        """At the end of the batch (after what it fired): the current value of every window it
        changed that is still open, as ``WindowResult(value, final=False)``, in the order the batch
        first changed them. A session merged into another in the batch emits as the merged one."""
        result, forward = self.fold.result, self.forward
        if self.session:
            store, name = self.store, self.name
            changed = [(wk, store.get(name, wk)) for wk in self.touched_sessions]
            changed = [(wk, acc) for wk, acc in changed if acc is not MISSING]  # (merged or fired since)
        else:
            changed = list(self.cache.items())
        for (key, start, end), acc in changed:
            self.early_emitted += 1
            forward(WindowKey(key, start, end), WindowResult(result(acc), False), end - 1)

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        ctx = self.ctx
        carried = ctx.at.frame.watermark
        if ts < carried:
            self._late_behind(key, value, ts, carried)
            return
        try:
            x = self.fold.extract(value)
        except Exception as exc:
            raise ctx.record_error(self.name, exc, value) from exc
        if self.session:
            self._add_to_session(key, value, x, ts)
            return
        store, name, fold, cache = self.store, self.name, self.fold, self.cache
        for start, end in self.window.assign(ts):
            if end <= self.horizon:
                self._late_fired(key, value, ts, start, end)
                continue
            wk = (key, start, end)
            acc = cache.get(wk, MISSING)
            if acc is MISSING:
                if self.committed_windows:
                    acc = store.get(name, wk)
                if acc is MISSING:
                    acc = fold.initial()
                    self._open(wk)
            try:
                cache[wk] = fold.add(acc, x)
            except Exception as exc:
                raise ctx.record_error(name, exc, value) from exc

    @property
    def takes_frames(self) -> bool:
        """Whether ``take_chunk`` takes a framed chunk: a count over fixed windows (it cannot raise)."""
        return not self.session and self.fold.counts

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        """A framed chunk's records, straight from the shuffle source (``takes_frames``): what
        ``process`` does record by record, with each window's count added up once per chunk. Late
        records are reported in their order, each with its own offset and frame."""
        if isinstance(self.window, TumblingWindow):
            added = self._tumbling_counts(chunk, plan.root)
        else:
            added = self._window_counts(chunk, plan.root)
        self.records_in += len(chunk.offsets)
        self._add_counts(added.items())

    def take_partial(self, key: Any, partial: CountsByWindow) -> None:
        """A source range's on-time records of ``key``, counted per window before the shuffle
        (``rstream.shuffle.combine.WindowCountCombiner``): each window's count added at once, as
        ``take_chunk`` adds a chunk's. Where a window already fired, its records are found again
        and each reported late, as it would have been alone."""
        self.records_in += len(partial.times)
        size, horizon = self.window.size, self.horizon
        counts = [((key, start, start + size), n) for start, n in zip(partial.starts, partial.counts)]
        fired = [wk[1] for wk, _n in counts if wk[2] <= horizon]
        self._add_counts([c for c in counts if c[0][2] > horizon] if fired else counts)
        if fired:
            self._late_in_partial(key, partial, fired)

    def _add_counts(self, counts: Iterable[tuple[tuple[Any, int, int], int]]) -> None:
        """Add ``n`` records to window ``wk``'s count, for each ``(wk, n)`` (a window count's fast paths)."""
        store, name, cache, committed, open_window = self.store, self.name, self.cache, self.committed_windows, self._open
        for wk, n in counts:
            acc = cache.get(wk, MISSING)
            if acc is MISSING:
                if committed:
                    acc = store.get(name, wk)
                if acc is MISSING:
                    acc = 0
                    open_window(wk)
            cache[wk] = acc + n

    def _late_in_partial(self, key: Any, partial: CountsByWindow, fired: list[Any]) -> None:
        """Report late the records ``partial`` counted in the windows starting at ``fired`` (each
        already fired): found again by the task (``RunMode.source_records``), in their order,
        each with its own source offset and watermark. Records that running the range again did not
        give back (a function before the shuffle that is not deterministic) are still reported, by
        their window, so none is lost."""
        ctx = self.ctx
        assert ctx is not None and ctx.mode.source_records is not None
        counted = dict(zip(partial.starts, partial.counts))
        left = {start: counted[start] for start in fired}
        frame = ctx.at.frame
        try:
            for offset, value, ts, mark in ctx.mode.source_records(partial).get(key, ()):
                for start, end in self.window.assign(ts):
                    if left.get(start):
                        left[start] -= 1
                        ctx.at.frame = Frame(mark, partial.producer, offset, partial.side)
                        self._late_fired(key, value, ts, start, end)
            ctx.at.frame = Frame(partial.watermark, partial.producer, -1, partial.side)
            for start, missing in left.items():
                end = start + self.window.size
                for _ in range(missing):
                    self._late(key, None, start, self.horizon, LateCause.WINDOW_FIRED,
                               f"its window [{start},{end}) already fired: its source queue was idle (running "
                               f"{partial.producer} offsets {partial.source_start}..{partial.source_end} again did "
                               "not give this record back: a function before the shuffle is not deterministic)")
        finally:
            ctx.at.frame = frame

    def _open(self, wk: tuple[Any, int, int]) -> None:
        """A new fixed window: its timer, kept in ``fresh`` until ``flush``."""
        key, start, end = wk
        kb = self._key_bytes.get(key)
        if kb is None:
            kb = self._key_bytes[key] = encode(key)
            if kb[0] == PICKLE_MARK:
                self._pickled_keys = True
        self.fresh[wk] = kb
        at = self.fresh_ends.get(end)
        if at is None:
            at = self.fresh_ends[end] = {}
        at[kb] = (end, (key, start))

    def _with_fresh(self, stored: list[tuple[int, Any]], watermark: int | None) -> list[tuple[int, Any]]:
        """The store's timers ``stored`` (due at ``watermark``; None: all) and the fresh windows' due
        with them, in the store's order (by timer key): what the store would answer had the fresh
        timers been staged in it. By end, then by the key's bytes within an end (see ``open``); by
        whole timer keys where a key was pickled."""
        ends = [end for end in self.fresh_ends if watermark is None or end <= watermark]
        if not ends:
            return stored
        by_end: dict[int, dict[bytes, tuple[int, tuple[Any, int]]]] = {}
        key_bytes = self._key_bytes
        for end, payload in stored:
            kb = key_bytes.get(payload[0]) or encode(payload[0])
            if kb[0] == PICKLE_MARK:
                self._pickled_keys = True
                break
            at = by_end.get(end)
            if at is None:
                at = by_end[end] = {}
            at[kb] = (end, payload)
        if self._pickled_keys:
            name = self.name
            found = {timer_key(name, end, payload): (end, payload) for end, payload in stored}
            for end in ends:
                found.update((timer_key(name, end, payload), (end, payload)) for end, payload in self.fresh_ends[end].values())
            return list(map(found.__getitem__, sorted(found)))
        for end in ends:
            at = by_end.get(end)
            if at is None:
                by_end[end] = self.fresh_ends[end]  # only read here
            else:
                at.update(self.fresh_ends[end])
        due: list[tuple[int, Any]] = []
        for end in sorted(by_end):
            at = by_end[end]
            due += map(at.__getitem__, sorted(at))
        return due

    def _late_behind(self, key: Any, value: Any, ts: int, carried: int) -> None:
        self._late(key, value, ts, carried, LateCause.BEHIND_WATERMARK,
                   f"data time {ts} is behind its source queue's watermark {carried}")

    def _late_fired(self, key: Any, value: Any, ts: int, start: int, end: int) -> None:
        self._late(key, value, ts, self.horizon, LateCause.WINDOW_FIRED,
                   f"its window [{start},{end}) already fired: its source queue was idle")

    def _at(self, root: Any, chunk: Chunk, i: int) -> tuple[Any, Any, int]:
        """The ``i``-th record of a framed chunk, with the context's offset and frame set to it."""
        self.ctx.at.offset, self.ctx.at.frame = chunk.offsets[i], root.frame_at(i)
        return chunk.keys[i], chunk.values[i], chunk.times[i]

    def _window_counts(self, chunk: Chunk, root: Any) -> dict[tuple[Any, int, int], int]:
        """Per window key, the chunk's records in it (in order of first appearance); late ones reported."""
        marks, horizon, assign = root.fields[1], self.horizon, self.window.assign
        added: dict[tuple[Any, int, int], int] = {}
        get = added.get
        for i, (key, ts) in enumerate(zip(chunk.keys, chunk.times)):
            carried = marks[i]
            if ts < carried:
                self._late_behind(*self._at(root, chunk, i), carried)
                continue
            for start, end in assign(ts):
                if end <= horizon:
                    self._late_fired(*self._at(root, chunk, i), start, end)
                    continue
                wk = (key, start, end)
                added[wk] = get(wk, 0) + 1
        return added

    def _tumbling_counts(self, chunk: Chunk, root: Any) -> dict[tuple[Any, int, int], int]:
        """``_window_counts`` for tumbling windows (one per record), over whole lists: which records
        are late, then one ``Counter`` of (key, window start) over the others."""
        keys, times, size, horizon = chunk.keys, chunk.times, self.window.size, self.horizon
        starts = [t - t % size for t in times]
        carried = root.fields[1]
        behind = list(map(lt, times, carried))
        late = behind
        if min(starts) <= horizon - size:  # some window already fired (its end is at or before the horizon)
            late = list(map(or_, behind, map(le, starts, repeat(horizon - size))))
        if any(late):
            for i in compress(range(len(late)), late):
                if behind[i]:
                    self._late_behind(*self._at(root, chunk, i), carried[i])
                else:
                    self._late_fired(*self._at(root, chunk, i), starts[i], starts[i] + size)
            on_time = list(map(not_, late))
            keys, starts = list(compress(keys, on_time)), list(compress(starts, on_time))
        return {(key, start, start + size): n for (key, start), n in Counter(zip(keys, starts)).items()}

    def _add_to_session(self, key: Any, value: Any, x: Any, ts: int) -> None:
        window = self.window
        assert isinstance(window, SessionWindow)
        gap = window.gap
        if ts + gap <= self.horizon:
            self._late(key, value, ts, self.horizon, LateCause.SESSION_FIRED, "its session already fired: its source queue was idle")
            return
        store, name, fold = self.store, self.name, self.fold
        index = ("sessions", key)
        sessions = store.get(name, index)
        sessions = [] if sessions is MISSING else sessions
        start, end = ts, ts + gap
        try:
            acc = fold.add(fold.initial(), x)
            keep = []
            for s, e in sessions:
                if s < end and start < e:  # [ts, ts + gap) bridges into this session: merge it
                    acc = fold.merge(store.get(name, (key, s, e)), acc)
                    store.delete(name, (key, s, e))
                    store.cancel_timer(name, e, (key, s))
                    start, end = min(start, s), max(end, e)
                else:
                    keep.append((s, e))
        except WindowError:
            raise
        except Exception as exc:
            raise self.ctx.record_error(name, exc, value) from exc
        keep.append((start, end))
        store.put(name, index, sorted(keep))
        store.put(name, (key, start, end), acc)
        store.set_timer(name, end, (key, start))
        if self.early:
            self.touched_sessions[(key, start, end)] = None

    def on_watermark(self, watermark: int) -> None:
        """Fire every window whose end the watermark reached, earliest first, then delete its state."""
        store, name = self.store, self.name
        due = store.timers_due(name, watermark)
        if self.fresh_ends:
            due = self._with_fresh(due, watermark)
        if due and not self.session and self._fire_to_sink(due):
            self._fired_up_to(watermark, due[-1][0])
            return
        last_end = NO_WATERMARK
        for end, (key, start) in due:
            wk = (key, start, end)
            acc = self.cache.pop(wk, MISSING)
            if acc is MISSING:
                acc = store.get(name, wk)
            self._forget(wk)
            if self.session:
                index = ("sessions", key)
                left = [se for se in store.get(name, index) if tuple(se) != (start, end)]
                if left:
                    store.put(name, index, left)
                else:
                    store.delete(name, index)
            self.fired += 1
            last_end = max(last_end, end)
            if acc is not MISSING:
                value = self.fold.result(acc)
                self.forward(WindowKey(key, start, end), WindowResult(value, True) if self.early else value, end - 1)
        self._fired_up_to(watermark, last_end)

    def _forget(self, wk: tuple[Any, int, int]) -> None:
        """Stage the delete of a fired window's state and timer (for one opened in this batch,
        drop its timer: its count never left ``cache``, and nothing of it reaches the state topic)."""
        kb = self.fresh.pop(wk, None)
        if kb is not None:  # never staged: nothing to undo in the store
            at = self.fresh_ends[wk[2]]
            del at[kb]
            if not at:
                del self.fresh_ends[wk[2]]
            return
        key, start, end = wk
        self.store.delete(self.name, wk)
        self.store.cancel_timer(self.name, end, (key, start))

    def _forget_all(self, wks: list[tuple[Any, int, int]]) -> None:
        """``_forget`` for every window due at a watermark (all the fresh ones of their ends)."""
        fresh = self.fresh
        kept = list(map(fresh.pop, wks, repeat(None)))
        for end in {wk[2] for wk in wks}:
            self.fresh_ends.pop(end, None)  # each of its fresh windows was due with it
        if None in kept:  # windows from earlier batches: their state and timer are in the store
            store, name = self.store, self.name
            for wk, kb in zip(wks, kept):
                if kb is None:
                    key, start, end = wk
                    store.delete(name, wk)
                    store.cancel_timer(name, end, (key, start))

    def _sink_after(self) -> tuple[list[Processor], Any] | None:
        """The pure stages after this operator and the writer they end in (``writes_chunks``: a
        sink), when its results go
        nowhere else (no fan-out, nothing wrapping ``forward``), for ``_fire_to_sink``. While the
        batch ends, ``QueueRun._results_at_end`` wraps ``forward`` (a dead letter per result that
        raises), so windows fired then go one by one."""
        kids = self.result_children
        if (not self.ctx.mode.chunked or FIRE_TO_SINK.name not in self.ctx.mode.rewrites or len(kids) != 1
                or self.forward != kids[0].process):
            return None
        if len(kids) == len(self.children):
            stages, sink = pure_path(self)
        elif kids[0].pure:
            more, sink = pure_path(kids[0])
            stages = [kids[0], *more]
        else:
            stages, sink = [], kids[0]
        return (stages, sink) if sink is not None and sink.writes_chunks else None

    def _fire_to_sink(self, due: list[tuple[int, Any]]) -> bool:
        """``on_watermark`` for the due windows at once, when their results go through pure stages
        to a sink: the results as one chunk, serialized in one call. False, having changed
        nothing, where that cannot be done (another path, or anything raised): the caller then fires
        them one by one, which reports what raised as it always did."""
        path = self._sink_after()
        if path is None:
            return False
        stages, sink = path
        store, name, cache = self.store, self.name, self.cache
        inputs: list[Chunk] = []
        try:  # over whole lists: the windows' keys, their accumulators (in memory, else stored), results
            wks = [(key, start, end) for end, (key, start) in due]
            accs = list(map(cache.get, wks, repeat(MISSING)))
            for i in [i for i, acc in enumerate(accs) if acc is MISSING]:
                accs[i] = store.get(name, wks[i])
            held = wks
            if any(acc is MISSING for acc in accs):  # a timer whose window holds nothing: no result
                held = [wk for wk, acc in zip(wks, accs) if acc is not MISSING]
                accs = [acc for acc in accs if acc is not MISSING]
            keys = list(map(tuple.__new__, repeat(WindowKey), held))
            values = accs if self.fold.result_is_acc else list(map(self.fold.result, accs))
            if self.early:
                values = list(map(WindowResult, values, repeat(True)))
            times = [end - 1 for _key, _start, end in held]
            chunk = Chunk([self.ctx.at.offset] * len(keys), keys, values, times)
            for stage in stages:
                inputs.append(chunk)
                chunk = stage.chunk(chunk)
        except Exception:
            return False
        bodies = sink.bodies(chunk)
        if bodies is None:
            return False
        for wk in wks:
            cache.pop(wk, None)
        self._forget_all(wks)
        self.fired += len(due)
        for stage, given in zip(stages, inputs):
            stage.records_in += len(given.offsets)
        sink.append(chunk, bodies)
        return True

    def pending(self) -> list[tuple[int, Any]]:
        return self._with_fresh(self.store.timers(self.name), None)

    def metrics(self) -> OperatorMetrics:
        pending = self.pending()
        early = {"emitted": self.early_emitted} if self.early else {}  # early results
        return OperatorMetrics.of(
            records_in=self.records_in, late=self.late, windows_fired=self.fired, windows_open=len(pending),
            watermark=finite(self.watermark),
            pending=[(_short_repr(key), start, end) for end, (key, start) in pending[:MAX_PENDING]], **early)


def _make_windowed(name: str, params: Mapping[str, Any], settings: JobProperties,
                   sink_queues: Mapping[str, int]) -> Processor:
    """The processor of an aggregation over a window: ``params`` are the aggregation node's (its
    ``window`` and ``emit``, put there by the second build) and the ``fold`` it folds with."""
    return WindowAggregateProcessor(name, params["window"], params["fold"], params.get("emit", WindowEmit.FINAL))


#: ``window(w)``: no real node of its own; the aggregation after it carries ``w``, and its spec asks
#: this one to make its processor (``make``: a ``WindowAggregateProcessor`` over the aggregation's fold).
WINDOW = register(OperatorSpec("window", WINDOW_STYLE, _make_windowed, role=Role.WINDOW))
