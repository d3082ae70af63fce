"""The per-queue task: what one Spark task does for each input queue range it is given.

Third build (the queue's processor chain), state load or replay, processing, one tagged append of
all outputs and the state changelog, then the local RocksDB write. The tag (job, topic, queue,
start offset) makes a retry or a rerun of the same range a no-op; Spark's offset log guarantees a
rerun asks for the same range.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import cloudpickle

from rstream.broker.base import Broker, CommitTag
from rstream.errors import RStreamError
from rstream.graph.topology import Topology
from rstream.processors.base import RecordError, StreamContext
from rstream.processors.sink import ShuffleSinkProcessor
from rstream.processors.watermarks import FIRE_ALL, OperatorWatermark, finite
from rstream.state.store import StateStore
from rstream.time.watermark import NO_WATERMARK

#: Data errors kept per queue and batch in the progress (all are counted).
MAX_ERRORS = 200


class CheckpointMismatchError(RStreamError):
    """Spark asked to process a range the broker says this job already went past."""


@dataclass
class TaskConfig:
    """Everything a task needs besides the range; pickled once per job into the source options."""

    job: str
    topology: Topology
    broker: Broker
    state_dir: str
    sink_queues: dict[str, int]
    skip_data_error: bool = True
    time_type: str = "event_time"
    allowed_lateness_ms: int = 2000
    idle_timeout_ms: int = 2000
    late_topic: str | None = None
    aggregate_emit: str = "record"
    #: Per framed shuffle topic, its producers (``topic/queue/shuffle sink``).
    producers: dict[str, list[str]] = field(default_factory=dict)


def dump_blob(obj: Any) -> str:
    return base64.b64encode(cloudpickle.dumps(obj)).decode()


def load_blob(blob: str) -> Any:
    return cloudpickle.loads(base64.b64decode(blob))


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


def state_folder(state_dir: str | Path, topic: str, queue: int) -> Path:
    """The local RocksDB folder of one input queue."""
    return Path(state_dir) / topic / str(queue)


def run_queue(cfg: TaskConfig, topic: str, queue: int, start: int, end: int) -> dict[str, Any]:
    """Process ``[start, end)`` of ``topic``/``queue``; returns the queue's metrics."""
    began = time.perf_counter()
    job, broker, topology = cfg.job, cfg.broker, cfg.topology
    info: dict[str, Any] = {
        "topic": topic, "queue": queue, "start": start, "end": end, "records_in": 0,
        "records_out": {}, "operators": {}, "replayed_keys": 0, "state_keys": None,
        "changed_keys": 0, "errors": [], "error_count": 0, "printed": [], "skipped": False,
    }
    done = broker.find_commit(job, topic, queue, start)
    if done is not None:
        if done.end_offset != end:
            raise CheckpointMismatchError(
                f"job {job!r} committed {topic}/{queue} offsets {start}..{done.end_offset}, but Spark asks "
                f"for {start}..{end}: the checkpoint folder was deleted or belongs to another run. Use a new "
                "job id, or reset the job (RocketMQStream.reset()) to start over."
            )
        info["skipped"] = True
        info["millis"] = (time.perf_counter() - began) * 1000
        return info
    last = broker.last_commit(job, topic, queue)
    committed = None if last is None else last.end_offset
    if committed is not None and committed > start:
        raise CheckpointMismatchError(
            f"job {job!r} already processed {topic}/{queue} up to offset {committed}, but Spark asks to "
            f"start at {start}: the checkpoint folder was deleted or belongs to another run. Use a new "
            "job id, or reset the job (RocketMQStream.reset()) to start over."
        )
    store: StateStore | None = None
    if topology.is_stateful(topic):
        store = StateStore(state_folder(cfg.state_dir, topic, queue), topology.state_topics[topic], queue).open()
    try:
        if store is not None and store.applied_offset != committed:
            info["replayed_keys"] = store.replay(broker, committed)
        ctx = StreamContext(
            job, topic, queue, cfg.skip_data_error, store, time_type=cfg.time_type,
            allowed_lateness_ms=cfg.allowed_lateness_ms, idle_timeout_ms=cfg.idle_timeout_ms,
            late_topic=cfg.late_topic, producers=cfg.producers,
            source_watermarks=_source_watermarks(last),
        )
        if topic in cfg.producers and store is not None:
            ctx.watermarks = OperatorWatermark(cfg.producers[topic], cfg.idle_timeout_ms, store, ctx.now_ms())
            current = ctx.watermarks.current(ctx.now_ms())
            ctx.emit_watermark = current if current < FIRE_ALL else NO_WATERMARK
        roots = topology.build_processors(topic, cfg.sink_queues, cfg.aggregate_emit)
        procs = [p for root in roots for p in root.walk()]
        for proc in procs:
            proc.open(ctx)
        receivers = [root.receive for root in roots]  # type: ignore[attr-defined]
        skip = cfg.skip_data_error
        errors = ctx.errors
        error_count = 0
        for rec in broker.read_records(topic, queue, start, end):
            ctx.offset = rec[0]
            ctx.headers = rec[5]
            for receive in receivers:
                try:
                    receive(*rec)
                except RecordError as err:
                    if not skip:
                        raise
                    error_count += 1
                    if len(errors) < MAX_ERRORS:
                        errors.append(err.as_row())
        if ctx.watermarks is not None:
            ctx.advance()  # idle producers may have stopped holding the watermark back
        for proc in procs:
            proc.flush()
        if ctx.watermarks is not None:
            now = ctx.now_ms()
            info["watermark"] = finite(ctx.watermarks.current(now, ctx.flushed))
            info["held_back_by"] = ctx.watermarks.holding_back(now, ctx.flushed)
            info["producers"] = ctx.watermarks.describe(now, ctx.flushed)
            ctx.watermarks.persist()
        records = {k: v for k, v in ctx.outputs.items() if v}
        if store is not None and store.changed_keys:
            info["changed_keys"] = store.changed_keys
            records[(store.state_topic, queue)] = store.changelog()
        meta = {"wm": {p.name: p.watermark for p in procs if isinstance(p, ShuffleSinkProcessor) and p.framed}}
        info["late"] = ctx.late_count
        written = broker.append(records, CommitTag(job, topic, queue, start, end, json.dumps(meta)))
        if store is not None:
            if written:
                store.commit(end)
            else:
                store.discard()  # another attempt committed this range first; replay next time
            info["state_keys"] = store.key_count
        out: dict[str, int] = {}
        for (t, _q), recs in records.items():
            if store is None or t != store.state_topic:
                markers = sum(1 for r in recs if r[4] == "WATERMARK") if t in cfg.producers else 0
                out[t] = out.get(t, 0) + len(recs) - markers
        info.update(
            records_in=roots[0].records_in if roots else 0, records_out=out, errors=errors,
            error_count=error_count, printed=ctx.printed, skipped=not written,
            operators={p.name: p.metrics() for p in procs},
        )
    finally:
        if store is not None:
            store.close()
    info["millis"] = (time.perf_counter() - began) * 1000
    return info


def _source_watermarks(last: CommitTag | None) -> dict[str, int]:
    """The source queue's watermark per shuffle sink, as the last committed batch left it."""
    if last is None or not last.meta:
        return {}
    return {name: int(wm) for name, wm in json.loads(last.meta).get("wm", {}).items()}


def run_partition(cfg_blob: str, ranges: list[list[Any]]) -> list[tuple[str, int, int, int, str]]:
    """Run the queue ranges of one Spark task in turn; one metrics row per range. A fatal error
    becomes a row carrying the pickled exception, and the ranges after it are left for the rerun."""
    cfg = config_from_blob(cfg_blob)
    rows = []
    for topic, queue, start, end in ranges:
        try:
            info = run_queue(cfg, topic, queue, start, end)
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
