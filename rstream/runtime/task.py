"""The per-queue task: what one Spark task does for each input queue range it is given.

Third build (the queue's processor chain), state load or replay, processing, one tagged append of
all outputs and the state changelog, then the local RocksDB write. The tag (job, topic, queue,
start offset) makes a retry or a rerun of the same range a no-op; Spark's offset log guarantees a
rerun asks for the same range.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import json
import os
import re
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, CommitTag, ReadRecord, RecordBlock, blocks_of, read_blocks
from rstream.errors import RStreamError
from rstream.graph.topology import Topology
from rstream.processors.base import (
    END_OF_BATCH,
    Observer,
    Processor,
    RecordError,
    SourceRecord,
    StreamContext,
)
from rstream.processors.chunk import CHUNK_RECORDS, MIN_CHUNK_RECORDS, ChunkedPipeline
from rstream.processors.watermarks import FIRE_ALL, OperatorWatermark, finite
from rstream.settings import DEFAULTS, JobProperties
from rstream.shuffle import wire
from rstream.shuffle.wire import WindowPartial, flush_tag, send_ticks
from rstream.state.store import StateStore
from rstream.time.watermark import NO_WATERMARK


class CheckpointMismatchError(RStreamError):
    """Spark asked to process a range the broker says this job already went past."""


@dataclass
class TaskConfig:
    """Everything a task needs besides the range; pickled once per job into the source options.
    ``settings`` is the job's own settings object, passed on whole to every processor."""

    job: str
    topology: Topology
    broker: Broker
    state_dir: str
    sink_queues: dict[str, int]
    settings: JobProperties = DEFAULTS
    late_topic: str | None = None
    #: Per framed shuffle topic, its producers (``topic/queue/shuffle sink``).
    producers: dict[str, list[str]] = field(default_factory=dict)
    #: The job's dead-letter topic: every record user code raised on (None: only counted).
    dlq_topic: str | None = None


def dump_blob(obj: Any) -> str:
    from pyspark import cloudpickle  # the pickler Spark ships; imported only where a blob is made

    return base64.b64encode(cloudpickle.dumps(obj)).decode()


def load_blob(blob: str) -> Any:
    import pickle  # cloudpickle's output is plain pickle data

    return pickle.loads(base64.b64decode(blob))


_CONFIGS: dict[str, TaskConfig] = {}


def config_from_blob(blob: str) -> TaskConfig:
    """The task config, unpickled once per worker process (workers are reused between batches)."""
    digest = hashlib.sha1(blob.encode()).hexdigest()
    cfg = _CONFIGS.get(digest)
    if cfg is None:
        cfg = load_blob(blob)
        _CONFIGS.clear()
        _CONFIGS[digest] = cfg
    return cfg


#: The executor name of work done outside any executor (local mode, or the driver replaying).
LOCAL_EXECUTOR = "local"


def executor_name() -> str:
    """Which Spark executor this Python worker serves: ``executor-<id>`` on a cluster (standalone, YARN,
    Kubernetes), ``local`` in local mode. Like a RocketMQ Streams instance, each executor keeps its own
    local state folders: a queue whose task moves to another executor finds no (or a stale) copy there
    and replays it from the state topic."""
    found = os.environ.get("SPARK_EXECUTOR_ID")
    if not found:
        for name in ("SPARK_LOG_URL_STDERR", "SPARK_LOG_URL_STDOUT"):
            match = re.search(r"[?&]executorId=([^&]+)", os.environ.get(name, ""))
            if match:
                found = match.group(1)
                break
    if not found and os.environ.get("CONTAINER_ID"):  # YARN
        found = os.environ["CONTAINER_ID"].rsplit("_", 1)[-1]
    return f"executor-{found}" if found and found != "driver" else LOCAL_EXECUTOR


def state_folder(state_dir: str | Path, topic: str, queue: int, executor: str = LOCAL_EXECUTOR) -> Path:
    """The local RocksDB folder of one input queue on one executor."""
    return Path(state_dir) / executor / topic / str(queue)


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
        self.ctx = ctx = StreamContext(
            cfg.job, topic, queue, cfg.settings, store, late_topic=cfg.late_topic, producers=cfg.producers,
            source_watermarks=_source_watermarks(last) if source_watermarks is None else source_watermarks,
            batch_id=batch, dlq_topic=cfg.dlq_topic, fixed_now_ms=now_ms, make_output=make_output,
            caught_up=caught_up, chunked=chunked, range_start=start, range_end=end, source_records=self.source_records,
            combine=combine, observer=observer,
        )
        self._found: dict[tuple[str, int], dict[Any, list[SourceRecord]]] = {}
        self.now_ms = ctx.now_ms()
        if topic in cfg.producers and store is not None:
            ctx.watermarks = OperatorWatermark(cfg.producers[topic], cfg.settings.idle_timeout_ms, store,
                                               ctx.now_ms())
            current = ctx.watermarks.current(ctx.idle_clock())
            ctx.emit_watermark = current if current < FIRE_ALL else NO_WATERMARK
        self.roots = cfg.topology.build_processors(topic, cfg.sink_queues, cfg.settings)
        if only is not None:  # the pipeline of processor ``only`` alone
            self.roots = [root for root in self.roots if any(p.name == only for p in root.walk())]
        self.procs = [p for root in self.roots for p in root.walk()]
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
                ctx.offset = rec[0]
                try:
                    receive(*rec)
                except RecordError as err:
                    self._failed(err, rec)
            return
        for rec in records:
            ctx.offset = rec[0]
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

        ctx.offset = END_OF_BATCH
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
            if ctx.watermarks is not None:
                ctx.advance(at_end=True)  # idle producers may have stopped holding the watermark back
            for proc in self.procs:
                proc.flush()
        info: dict[str, Any] = {
            "topic": self.topic, "queue": self.queue, "start": self.start, "end": self.end, "batch": self.batch,
            "now_ms": self.now_ms, "caught_up": ctx.caught_up, "replayed_keys": 0, "state_keys": None,
            "changed_keys": 0,
        }
        if ctx.watermarks is not None:
            now = ctx.idle_clock(at_end=True)
            info["watermark"] = finite(ctx.watermarks.current(now, ctx.flushed))
            info["held_back_by"] = ctx.watermarks.holding_back(now, ctx.flushed)
            info["producers"] = ctx.watermarks.describe(now, ctx.flushed)
            ctx.watermarks.persist()
        records = {k: v for k, v in ctx.outputs.items() if v}
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
            records_in=self.roots[0].records_in if self.roots else 0, records_out=out, late=ctx.late_count,
            error_count=ctx.error_count, operators={p.name: p.metrics().to_dict() for p in self.procs},
        )
        return records, info

    def source_records(self, partial: WindowPartial) -> dict[Any, list[SourceRecord]]:
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
        found = {}
        for kb, body, ts, headers, _tags in again.ctx.outputs.get((self.topic, self.queue), ()):
            record = wire.decode(kb, body, headers, framed=True)
            if not isinstance(record, wire.FramedRecord):
                continue
            if record.producer == partial.producer and ts >= record.watermark:  # on time (a late one came alone)
                found.setdefault(record.key, []).append((record.source_offset, record.value, ts, record.watermark))
        self._found[(partial.producer, partial.source_start)] = found
        return found

    def release(self) -> None:
        """Let go of the batch's outputs once they are appended, and of everything else the run made;
        nothing may use the run afterwards. The context, the processors and the plan refer to each
        other, so what they hold would otherwise wait for Python's cycle collector, which then walks
        all of it again: every record of the outputs (0.15 s per 250 K records, between two queues),
        and a shuffle sink's cache of its keys (12 ms per 60 K objects, after each word count
        range). The lists are emptied in place: processors (a shuffle sink's queues) hold them too."""
        for records in self.ctx.outputs.values():
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
    alone = []
    for root in roots:
        proc = root
        while True:
            alone.append(proc)
            if len(proc.children) != 1 or (proc is not root and not proc.pure):
                break
            proc = proc.children[0]
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


def run_queue(cfg: TaskConfig, topic: str, queue: int, start: int, end: int, batch: int = -1) -> dict[str, Any]:
    """Process ``[start, end)`` of ``topic``/``queue`` as part of ``batch``; returns the queue's metrics.

    Everything the range writes (outputs, late records, dead letters, the state changelog) and the
    range's tag with the batch id and these metrics go to the broker in one transaction.

    Python's cycle collector is off while it runs: the batch's outputs are a million live tuples at
    times, which every collection would walk again (a third of the word count's time), and none of
    them is garbage before the append. Cycles made meanwhile are collected after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_queue(cfg, topic, queue, start, end, batch)
    finally:
        if enabled:
            gc.enable()


#: How long a task waits for another process that holds its queue's state store: another attempt of
#: the same range (the driver's shuffle job next to a source task's share, a speculative or retried
#: task), which commits it or fails within a range's time; the tag then says whether to run it (s).
STORE_WAIT_S = 300.0


def _run_queue(cfg: TaskConfig, topic: str, queue: int, start: int, end: int, batch: int) -> dict[str, Any]:
    began = time.perf_counter()
    job, broker, topology = cfg.job, cfg.broker, cfg.topology
    last = _last_commit(broker, job, topic, queue, start, end)
    if last is _DONE:
        return _skipped(topic, queue, start, end, batch, began)
    store: StateStore | None = None
    executor = executor_name()
    if topology.is_stateful(topic):
        store = StateStore(state_folder(cfg.state_dir, topic, queue, executor), topology.state_topics[topic],
                           queue).open(wait_s=STORE_WAIT_S)
    try:
        if store is not None and store.was_held:  # the attempt that held it may have committed the range
            last = _last_commit(broker, job, topic, queue, start, end)
            if last is _DONE:
                return _skipped(topic, queue, start, end, batch, began)
        committed = None if last is None else last.end_offset
        replayed = 0
        if store is not None and store.applied_offset != committed:
            replayed = store.replay(broker, committed)
        # a range short of the queue's end is catching up: its backlog must not look like silence, here
        # (a window or join queue) or downstream (a source queue's markers say it is behind)
        caught_up = end >= broker.end_offsets(topic)[queue]
        run = QueueRun(cfg, topic, queue, start, end, batch, store, last, caught_up=caught_up)
        run.feed_blocks(read_blocks(broker, topic, queue, start, end))
        records, info = run.finish()
        info.update(replayed_keys=replayed, executor=executor, pid=os.getpid())
        if store is not None:
            info["state_keys"] = store.prepare()
        info["millis"] = (time.perf_counter() - began) * 1000
        written = broker.append(records, CommitTag(job, topic, queue, start, end, run.meta(), batch,
                                                   json.dumps(info, default=str)))
        if store is not None:
            if written:
                store.commit(end)
            else:
                store.discard()  # another attempt committed this range first; replay next time
        info.update(skipped=not written, printed=run.ctx.printed)
        run.release()
        del records
    finally:
        if store is not None:
            store.close()
    info["millis"] = (time.perf_counter() - began) * 1000
    return info


def _skipped(topic: str, queue: int, start: int, end: int, batch: int, began: float) -> dict[str, Any]:
    """The metrics of a range another attempt committed first."""
    return {"topic": topic, "queue": queue, "start": start, "end": end, "batch": batch, "skipped": True,
            "printed": [], "millis": (time.perf_counter() - began) * 1000}


#: ``_last_commit``'s answer for a range already committed (as asked: this attempt skips it).
_DONE: Any = object()


def _last_commit(broker: Broker, job: str, topic: str, queue: int, start: int, end: int) -> Any:
    """The queue's last commit tag (None: none yet) when the range ``start..end`` is the next one to
    run; ``_DONE`` when it is committed already. Raises when the commits disagree with the range."""
    done = broker.find_commit(job, topic, queue, start)
    if done is not None:
        if done.end_offset != end:
            raise CheckpointMismatchError(
                f"job {job!r} committed {topic}/{queue} offsets {start}..{done.end_offset}, but Spark asks "
                f"for {start}..{end}: the checkpoint folder was deleted or belongs to another run. Use a new "
                "job id, or reset the job (RocketMQStream.reset()) to start over."
            )
        return _DONE
    last = broker.last_commit(job, topic, queue)
    committed = None if last is None else last.end_offset
    if committed is not None and committed > start:
        raise CheckpointMismatchError(
            f"job {job!r} already processed {topic}/{queue} up to offset {committed}, but Spark asks to "
            f"start at {start}: the checkpoint folder was deleted or belongs to another run. Use a new "
            "job id, or reset the job (RocketMQStream.reset()) to start over."
        )
    return last


def _source_watermarks(last: CommitTag | None) -> dict[str, int]:
    """The source queue's watermark per shuffle sink, as the last committed batch left it."""
    if last is None or not last.meta:
        return {}
    return {name: int(wm) for name, wm in json.loads(last.meta).get("wm", {}).items()}


def run_groups(cfg_blob: str, groups: Iterable[list[list[Any]]]) -> Iterator[tuple[str, int, int, int, str]]:
    """A Spark task of the driver's shuffle-side job (an RDD job over the range groups): the queue
    ranges of the groups of its partition, in turn; one metrics row per range."""
    for ranges in groups:
        yield from run_partition(cfg_blob, ranges)


#: How long a source-job task waits for the batch's other source ranges before it leaves its share of
#: the shuffle side to the driver's job: twice its own ranges' time, within these bounds (s). The
#: least is for a task with little to do next to one with much (queues of unequal input); only a
#: failed task (whose batch fails anyway) or a task with no free core keeps its partners waiting.
SHARE_WAIT_S = (1.0, 10.0)

#: How often the wait looks at the broker (s).
SHARE_POLL_S = 0.002


def run_with_share(cfg_blob: str, ranges: list[list[Any]], share: dict[str, Any] | None,
                   ) -> list[tuple[str, int, int, int, str]]:
    """A task of a batch's source job: its queue ranges (``run_partition``), then, with a ``share``
    (``RStreamStreamReader.partitions``), its part of the batch's shuffle side. Once every range of
    the batch is committed, the shuffle queues ``share["begins"]`` names hold all the batch gives
    them: every task plans their ranges alike, from those begins and the queues' ends, spreads them
    over ``share["count"]`` bins as the driver would (``plan_tasks``) and runs bin ``share["index"]``.
    In the last batch of ``run_until_idle``'s run, ``share["flush"]`` names the window and join topics
    that get the run's idle flush first: the first task there sends it (``flush_tag``: once), so
    every task plans with it. That saves the batch a second Spark job (the driver's,
    ``QueryDriver._run_shuffles``), which still runs what is left: all of it when a task gave up
    waiting (a source range not committed within ``SHARE_WAIT_S``: its task failed, or found no
    free core; the driver then sends the flush if no task did), and what came after the tasks
    planned (a started job's idle ticks). A range a task ran is committed with its tag like any
    other, so none runs twice."""
    began = time.perf_counter()
    rows = run_partition(cfg_blob, ranges)
    if share is None or any("fatal" in json.loads(row[4]) for row in rows):
        return rows
    cfg = config_from_blob(cfg_blob)
    low, high = SHARE_WAIT_S
    try:
        if not _committed_all(cfg.broker, cfg.job, share["barrier"],
                              min(high, max(low, 2 * (time.perf_counter() - began)))):
            return rows
        if share.get("flush"):  # the last batch of run_until_idle's run: its idle flush, sent once
            send_ticks(cfg.broker, share["flush"], flush=True, once=flush_tag(cfg.job, share["batch"]))
        mine = share_ranges(cfg.broker, share)
    except Exception:  # the broker could not say: the driver's job runs the shuffle side, and reports
        return rows
    return rows + run_partition(cfg_blob, mine)


def _committed_all(broker: Broker, job: str, ranges: list[list[Any]], wait_s: float) -> bool:
    """Whether every range ``[topic, queue, start, end, batch]`` gets committed within ``wait_s``."""
    from rstream.runtime.source import committed_end

    deadline = time.monotonic() + wait_s
    version = getattr(broker, "data_version", None)
    seen = None
    pending = list(ranges)
    while True:
        now = version() if version is not None else None
        if now is None or now != seen:  # a broker that says nothing changed need not be read again
            seen = now
            pending = [r for r in pending if committed_end(broker, job, r[0], r[1], r[2]) < r[3]]
            if not pending:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(SHARE_POLL_S)


def share_ranges(broker: Broker, share: dict[str, Any]) -> list[list[Any]]:
    """The shuffle ranges of bin ``share["index"]`` of the batch's shuffle side, as every task of the
    batch plans them once the batch's source ranges are committed (see ``run_with_share``): each
    queue from its begin to its end now, in ranges of at most ``share["max_per_queue"]`` records,
    all in one bin and in order; the bins are planned from the queues' whole spans."""
    from rstream.runtime.source import plan_tasks, split_queue_key

    ends: dict[str, list[int]] = {}
    spans = []
    for key, begin in sorted(share["begins"].items()):
        topic, queue = split_queue_key(key)
        if topic not in ends:
            ends[topic] = broker.end_offsets(topic)
        if ends[topic][queue] > begin:
            spans.append([topic, queue, begin, ends[topic][queue], share["batch"]])
    bins = plan_tasks(spans, share["count"])
    step = share["max_per_queue"]
    mine = bins[share["index"]] if share["index"] < len(bins) else []
    return [[topic, queue, lo, min(lo + step, end), batch]
            for topic, queue, begin, end, batch in mine for lo in range(begin, end, step)]


def run_partition(cfg_blob: str, ranges: list[list[Any]]) -> list[tuple[str, int, int, int, str]]:
    """Run the queue ranges of one Spark task in turn; one metrics row per range. A fatal error
    becomes a row carrying the pickled exception, and the ranges after it are left for the rerun."""
    cfg = config_from_blob(cfg_blob)
    rows = []
    for topic, queue, start, end, batch in ranges:
        try:
            info = run_queue(cfg, topic, queue, start, end, batch)
        except Exception as exc:  # reported to the driver, which fails the batch
            try:
                pickled = dump_blob(exc)
            except Exception:
                pickled = dump_blob(RStreamError(f"{type(exc).__name__}: {exc}"))
            info = {"fatal": pickled, "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=8)}
            rows.append((topic, queue, start, end, json.dumps(info, default=str)))
            break
        rows.append((topic, queue, start, end, json.dumps(info, default=str)))
    return rows
