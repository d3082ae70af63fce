"""One queue range run through its processor chain: the third build (the queue's processors, made
from the topology's factories), the records fed in blocks and chunks, the end of the batch, and
what the range writes and reports. Nothing here commits: ``rstream.runtime.commit`` appends what
a run made under the range's tag; ``rstream.runtime.trace`` re-executes a committed range.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import compress
from typing import Any

from rstream.broker.base import CommitTag, ReadRecord, RecordBlock, blocks_of, read_blocks
from rstream.processors.base import (
    END_OF_BATCH,
    CountsByWindow,
    EventTime,
    Observer,
    Outputs,
    Position,
    Processor,
    RecordError,
    RunMode,
    SourceRecord,
    StreamContext,
)
from rstream.processors.chunk import CHUNK_RECORDS, MIN_CHUNK_RECORDS, ChunkedPipeline
from rstream.processors.rewrites import CHUNKS
from rstream.processors.watermarks import FIRE_ALL, OperatorWatermark, finite
from rstream.runtime.config import TaskConfig
from rstream.shuffle import wire
from rstream.state.store import StateStore
from rstream.time.watermark import NO_WATERMARK


class QueueRun:
    """One queue range of one batch: the third build (the queue's processor chain), its state
    store and context; ``feed`` the records, then ``finish`` for the batch's writes and metrics.

    ``run_queue`` commits what a run writes; ``rstream.runtime.trace`` re-executes a committed
    range with a scratch ``store``, a fixed clock (``now_ms``) and no commit, to see what each
    record did (``chunked=False``: record by record, through the processors' own ``process``)."""

    def __init__(self, cfg: TaskConfig, topic: str, queue: int, start: int, end: int, batch: int,
                 store: StateStore | None, last: CommitTag | None, now_ms: int | None = None,
                 make_output: Callable[[str, int], list[Any]] | None = None, caught_up: bool = True,
                 chunked: bool = True, only: str | None = None,
                 source_watermarks: dict[str, int] | None = None, combine: bool = True,
                 observer: Observer | None = None) -> None:
        self.cfg, self.topic, self.queue, self.start, self.end, self.batch = cfg, topic, queue, start, end, batch
        self.store = store
        chunked = chunked and CHUNKS.name in cfg.topology.optimizations
        self.ctx = ctx = StreamContext(
            Position(cfg.job, topic, queue, batch, start, end, caught_up), cfg.settings, store,
            EventTime(now_ms, producers=cfg.producers,
                      source_watermarks=_source_watermarks(last) if source_watermarks is None else source_watermarks),
            Outputs(cfg.late_topic, cfg.dlq_topic, make_output),
            RunMode(chunked, cfg.topology.optimizations, combine, observer, self.source_records),
        )
        self._found: dict[tuple[str, int], dict[Any, list[SourceRecord]]] = {}
        self.now_ms = ctx.now_ms()
        if topic in cfg.producers and store is not None:
            ctx.time.watermarks = OperatorWatermark(cfg.producers[topic], cfg.settings.idle_timeout_ms, store,
                                               self.now_ms, framed_topics=cfg.producers)
            current = ctx.time.watermarks.current(ctx.idle_clock())
            ctx.time.emit_watermark = current if current < FIRE_ALL else NO_WATERMARK
        self.roots = cfg.topology.build_processors(topic, cfg.sink_queues, cfg.settings)
        if only is not None:  # the pipeline of processor ``only`` alone
            self.roots = [root for root in self.roots if any(p.name == only for p in root.walk())]
        # each once: a union's node (and what follows it) may be reached from several roots (one topic
        # read by two sources)
        self.procs = list({id(p): p for root in self.roots for p in root.walk()}.values())
        for proc in _alone(self.roots):
            proc.alone()
        for proc in self.procs:
            proc.open(ctx)
        self.receivers = [root.receive for root in self.roots]
        self.plan = None
        if chunked and len(self.roots) == 1:
            self.plan = ChunkedPipeline.of(self.roots[0], ctx, self._failed)

    def feed(self, records: Iterable[ReadRecord]) -> None:
        """Process records ``(offset, key, body, born, store time, headers)`` in offset order (see
        ``feed_blocks``)."""
        if self.plan is None:
            self._feed_each(records)
            return
        self.feed_blocks(blocks_of(records, CHUNK_RECORDS))

    def feed_blocks(self, blocks: Iterable[RecordBlock]) -> None:
        """Process blocks of records in offset order. A record user code raised on goes to the
        dead-letter topic (or stops the run when ``skip_data_error`` is off). In chunks where the
        pipeline allows (``rstream.processors.chunk``): at most ``CHUNK_RECORDS`` of a block at once,
        and fewer for a while after a chunk in which something raised."""
        plan = self.plan
        if plan is None:
            for block in blocks:
                self._feed_each(block.rows())
            return
        framed = getattr(self.roots[0], "framed", False)
        size = CHUNK_RECORDS
        for block in blocks:
            at, n = 0, len(block)
            while at < n:
                part = block if at == 0 and size >= n else block[at:at + size]
                at += len(part)
                ran = True
                # a framed topic's control records (watermark markers, idle ticks) go record by record
                for data, run in _split_controls(part) if framed else ((True, part),):
                    if not data:
                        self._feed_each(run.rows())
                    elif not plan.run(run):  # something raised: record by record
                        self._feed_each(run.rows())
                        ran = False
                size = min(CHUNK_RECORDS, size * 2) if ran else max(MIN_CHUNK_RECORDS, size // 4)

    def _feed_each(self, records: Iterable[ReadRecord]) -> None:
        ctx, receivers = self.ctx, self.receivers
        if len(receivers) == 1:  # the common case, one pipeline reads this topic: no inner loop
            receive = receivers[0]
            for rec in records:
                ctx.at.offset = rec[0]
                try:
                    receive(*rec)
                except RecordError as err:
                    self._failed(err, rec)
            return
        for rec in records:
            ctx.at.offset = rec[0]
            for receive in receivers:
                try:
                    receive(*rec)
                except RecordError as err:
                    self._failed(err, rec)

    def _failed(self, err: RecordError, rec: ReadRecord) -> None:
        """User code raised on ``rec``: a dead letter, or the end of the run (``skip_data_error`` off)."""
        if not self.cfg.settings.skip_data_error:
            raise err
        self.ctx.dead_letter(err, rec[1], rec[2], rec[3])

    @contextmanager
    def _results_at_end(self) -> Iterator[None]:
        """While the batch ends, user code that raises on one result (a serializer on a per-batch
        count, a function after a window fired now) sends that result to the dead-letter topic and
        the others go on, as a record does during the batch; its error's offset is ``END_OF_BATCH``."""
        ctx, saved = self.ctx, [(proc, proc.forward) for proc in self.procs]

        def guarded(forward: Callable[[Any, Any, int], None]) -> Callable[[Any, Any, int], None]:
            def emit(key: Any, value: Any, ts: int) -> None:
                try:
                    forward(key, value, ts)
                except RecordError as err:
                    if not self.cfg.settings.skip_data_error:
                        raise
                    ctx.dead_letter(err, None, b"", ts)
            return emit

        ctx.at.offset = END_OF_BATCH
        for proc, forward in saved:
            proc.forward = guarded(forward)
        try:
            yield
        finally:
            for proc, forward in saved:
                proc.forward = forward

    def finish(self) -> tuple[dict[tuple[str, int], list[Any]], dict[str, Any]]:
        """End the batch: fire what is due, flush every processor, stage the state changes.
        Returns the records to append (per topic and queue, changelog included) and the metrics."""
        cfg, ctx, store = self.cfg, self.ctx, self.store
        with self._results_at_end():
            if ctx.time.watermarks is not None:
                ctx.advance(at_end=True)  # idle producers may have stopped holding the watermark back
            for proc in self.procs:
                proc.flush()
        info: dict[str, Any] = {
            "topic": self.topic, "queue": self.queue, "start": self.start, "end": self.end, "batch": self.batch,
            "now_ms": self.now_ms, "caught_up": ctx.at.caught_up, "replayed_keys": 0, "state_keys": None,
            "changed_keys": 0,
        }
        if ctx.time.watermarks is not None:
            now = ctx.idle_clock(at_end=True)
            info["watermark"] = finite(ctx.time.watermarks.current(now, ctx.time.flushed))
            info["held_back_by"] = ctx.time.watermarks.holding_back(now, ctx.time.flushed)
            info["producers"] = ctx.time.watermarks.describe(now, ctx.time.flushed)
            ctx.time.watermarks.persist()
        records = {k: v for k, v in ctx.out.collected.items() if v}
        if store is not None and store.changed_keys:
            info["changed_keys"] = store.changed_keys
            records[(store.state_topic, self.queue)] = store.changelog()
        written: dict[str, int] = {}  # records out: the input records each writer's outputs stand for
        for proc in self.procs:
            for t, n in proc.written().items():
                written[t] = written.get(t, 0) + n
        out = {t: written.get(t, 0) for (t, _q) in records
               if t not in (cfg.dlq_topic, cfg.late_topic) and (store is None or t != store.state_topic)}
        info.update(
            records_in=self.roots[0].records_in if self.roots else 0, records_out=out, late=ctx.out.late_count,
            error_count=ctx.out.error_count, operators={p.name: p.metrics().to_dict() for p in self.procs},
        )
        return records, info

    def source_records(self, partial: CountsByWindow) -> dict[Any, list[SourceRecord]]:
        """The on-time records ``partial`` counted and the others of its source range that came to
        this queue, per key, in order, as its shuffle sink saw them: the range run again through its
        pipeline alone, windows not combined, nothing written (the records it would have shuffled
        one by one, with their watermarks). Once per range and run; for a window count whose window
        already fired (``WindowAggregateProcessor.take_partial``)."""
        found = self._found.get((partial.producer, partial.source_start))
        if found is not None:
            return found
        cfg = self.cfg
        topic, queue, sink = _split_producer(partial.producer)
        again = QueueRun(cfg, topic, queue, partial.source_start, partial.source_end, self.batch, None, None,
                         make_output=lambda _topic, _queue: [], only=sink, source_watermarks={sink: partial.watermark},
                         combine=False)
        again.feed_blocks(read_blocks(cfg.broker, topic, queue, partial.source_start, partial.source_end))
        found = wire.on_time_by_key(again.ctx.out.collected.get((self.topic, self.queue), ()), partial.producer)
        self._found[(partial.producer, partial.source_start)] = found
        return found

    def release(self) -> None:
        """Let go of the batch's outputs once they are appended, and of everything else the run made;
        nothing may use the run afterwards. The context, the processors and the plan refer to each
        other, so what they hold would otherwise wait for Python's cycle collector, which then walks
        all of it again: every record of the outputs (0.15 s per 250 K records, between two queues),
        and a shuffle sink's cache of its keys (12 ms per 60 K objects, after each word count
        range). The lists are emptied in place: processors (a shuffle sink's queues) hold them too."""
        for records in self.ctx.out.collected.values():
            records.clear()
        for proc in self.procs:
            vars(proc).clear()
        vars(self.ctx).clear()
        vars(self).clear()

    def meta(self) -> str:
        """What the next batch of this queue needs back: each framed shuffle sink's source watermark."""
        carried = ((p.name, p.carried_watermark()) for p in self.procs)
        return json.dumps({"wm": {name: wm for name, wm in carried if wm is not None}})


def _split_producer(producer: str) -> tuple[str, int, str]:
    """``topic/queue/shuffle sink`` as its parts (a topic's name may hold ``/``)."""
    rest, _, sink = producer.rpartition("/")
    topic, _, queue = rest.rpartition("/")
    return topic, int(queue), sink


def _alone(roots: list[Processor]) -> list[Processor]:
    """The processors whose values no one else holds: each root's first processors while every one
    above them is pure and has only them as its child. A fan-out hands one value to several branches,
    where one could change it; a stateful operator may hand on a value it goes on changing (an
    accumulator)."""
    procs = {id(p): p for root in roots for p in root.walk()}.values()
    fed = Counter(id(child) for proc in procs for child in proc.children)  # parent edges per processor
    alone = []
    for root in roots:
        proc = root
        while True:
            alone.append(proc)
            if len(proc.children) != 1 or (proc is not root and not proc.pure):
                break
            proc = proc.children[0]
            if fed[id(proc)] > 1:  # a union's node: it also holds what its other parents hand it
                break
    return alone


def _split_controls(part: RecordBlock) -> Iterator[tuple[bool, RecordBlock]]:
    """``(True, data records)`` and ``(False, control records)`` of a framed topic's block, each a
    run of consecutive records, in order: control records (markers, ticks, a window count's
    partials) carry headers, data records none."""
    controls = list(compress(range(len(part)), part.headers))
    done = k = 0
    while k < len(controls):
        first = last = controls[k]
        k += 1
        while k < len(controls) and controls[k] == last + 1:
            last = controls[k]
            k += 1
        if first > done:
            yield True, part[done:first]
        yield False, part[first:last + 1]
        done = last + 1
    if done < len(part):
        yield True, part[done:] if done else part



def _source_watermarks(last: CommitTag | None) -> dict[str, int]:
    """The source queue's watermark per shuffle sink, as the last committed batch left it."""
    if last is None or not last.meta:
        return {}
    return {name: int(wm) for name, wm in json.loads(last.meta).get("wm", {}).items()}

