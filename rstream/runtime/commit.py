"""The commit protocol of one queue range: check the range against the queue's commits (run it,
skip it, or refuse it), load or replay the queue's state, run it (``rstream.runtime.queue_run``),
then one tagged append of everything it wrote (outputs, late records, dead letters, the state
changelog, its progress) and the local state write. The tag (job, topic, queue, start offset)
makes a retry or a rerun of the same range a no-op; Spark's offset log guarantees a rerun asks for
the same range. ``run_partition`` runs a Spark task's ranges so, in turn.
"""

from __future__ import annotations

import gc
import json
import os
import time
import traceback
from typing import Any

from rstream.broker.base import Broker, CommitTag, read_blocks
from rstream.errors import RStreamError
from rstream.runtime.config import TaskConfig, config_from_blob, dump_blob, executor_name, state_folder
from rstream.runtime.queue_run import QueueRun
from rstream.settings import Guarantee
from rstream.state.store import StateStore


class CheckpointMismatchError(RStreamError):
    """Spark asked to process a range the broker says this job already went past."""



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
        sinks = [tq for tq in records if tq[0] in cfg.topology.sink_topics]
        if sinks and cfg.settings.processing_guarantee is Guarantee.AT_LEAST_ONCE:
            broker.append({tq: records.pop(tq) for tq in sinks})  # on their own; the commit follows
        if sinks:
            crash_if_asked(cfg, "before_commit")
        written = broker.append(records, CommitTag(job, topic, queue, start, end, run.meta(), batch,
                                                   json.dumps(info, default=str)))
        crash_if_asked(cfg, "after_commit")
        if store is not None:
            if written:
                store.commit(end)
            else:
                store.discard()  # another attempt committed this range first; replay next time
        info.update(skipped=not written, printed=run.ctx.out.printed)
        run.release()
        del records
    finally:
        if store is not None:
            store.close()
    info["millis"] = (time.perf_counter() - began) * 1000
    return info


#: Where a task may be made to die, for a lesson or a test (``RocketMQStream.crash_once(point)``): a
#: range with sink records, once they are written at least once (or, exactly once, before anything
#: is), before its commit; any range, right after its commit.
CRASH_POINTS = ("before_commit", "after_commit")


def crash_file(job_dir: str | os.PathLike[str], point: str) -> str:
    """The file that arms ``point`` once: the first task of the job that reaches it removes it and dies."""
    return os.path.join(job_dir, "crash-once", point)


def crash_if_asked(cfg: TaskConfig, point: str) -> None:
    """Die here, as a killed process does (no cleanup, no exception to report), if ``point`` is armed
    for this job; the task that removes the file is the only one that dies."""
    try:
        os.unlink(crash_file(os.path.dirname(cfg.state_dir), point))
    except FileNotFoundError:
        return
    os._exit(137)


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



def run_partition(cfg_blob: str, ranges: list[list[Any]]) -> list[tuple[str, int, int, int, str]]:
    """Run the queue ranges of one Spark task in turn; one metrics row per range. A fatal error
    becomes a row carrying the pickled exception, and the ranges after it are left for the rerun.

    So does a task config that does not load here (an ``EmbeddedBroker`` unpickled on another host
    refuses to): a Spark retry would fail alike, four times over, each in a new Python worker."""
    try:
        cfg = config_from_blob(cfg_blob)
    except Exception as exc:
        topic, queue, start, end, _batch = ranges[0] if ranges else ("", -1, 0, 0, -1)
        return [(topic, queue, start, end, _fatal(exc))]
    rows = []
    for topic, queue, start, end, batch in ranges:
        try:
            info = run_queue(cfg, topic, queue, start, end, batch)
        except Exception as exc:  # reported to the driver, which fails the batch
            rows.append((topic, queue, start, end, _fatal(exc)))
            break
        rows.append((topic, queue, start, end, json.dumps(info, default=str)))
    return rows


def _fatal(exc: Exception) -> str:
    """The metrics row of a range that failed: the pickled exception, which the driver raises."""
    try:
        pickled = dump_blob(exc)
    except Exception:
        pickled = dump_blob(RStreamError(f"{type(exc).__name__}: {exc}"))
    return json.dumps({"fatal": pickled, "message": f"{type(exc).__name__}: {exc}",
                       "traceback": traceback.format_exc(limit=8)}, default=str)
