"""A job's progress and what it reported, read from the broker: the commit tags (each queue's
progress, committed with its outputs), the dead-letter topic and the late-data topic, and how far
its input queues are read (lag)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

from rstream.broker.base import CommitTag, records_between
from rstream.processors.base import dead_letter_row
from rstream.runtime.job_core import JobCore
from rstream.runtime.progress import BatchProgress, QueueProgress

#: A commit sequence number no tag reaches.
NEVER = 2**62


class ProgressLog:
    """Progress per batch and operator, errors, late records and lag: all read from the broker, so a
    new job object (after a kernel restart) sees what earlier ones did. Owns what it has read of the
    job's commit tags (every batch of the job, also of earlier job objects and runs, and the batches
    this object ran or saw committed) and the job's progress listeners."""

    def __init__(self, core: JobCore) -> None:
        self.core = core
        self._lock = threading.RLock()
        self._seen_seq = 0
        self._tags: dict[tuple[str, int], list[CommitTag]] = {}
        self._queues: dict[int, list[QueueProgress]] = {}
        self._batches: dict[int, BatchProgress] = {}
        self._mine: set[int] = set()
        self._created_seq = NEVER
        self._sync_progress()
        self._created_seq = self._seen_seq
        self._listeners: list[Callable[[BatchProgress], None]] = []

    def _sync_progress(self) -> None:
        """Read the commit tags committed since the last call: each holds one queue's progress."""
        with self._lock:
            tags = self.core.broker.commits(self.core.job_id, self._seen_seq)
            changed: set[int] = set()
            for tag in tags:
                self._seen_seq = tag.seq
                self._tags.setdefault((tag.topic, tag.queue), []).append(tag)
                if tag.batch_id is None or not tag.info:
                    continue
                self._queues.setdefault(tag.batch_id, []).append(
                    QueueProgress.from_info(json.loads(tag.info), tag.committed_ms))
                changed.add(tag.batch_id)
                if tag.seq > self._created_seq:
                    self._mine.add(tag.batch_id)
            for batch_id in changed:
                self._batches[batch_id] = BatchProgress.of(batch_id, self._queues[batch_id])

    @property
    def progress(self) -> list[BatchProgress]:
        """The progress of every batch this object ran or saw committed, oldest first. A queue's
        progress is committed with the queue's outputs, so it is never behind what a sink shows."""
        with self._lock:
            self._sync_progress()
            return [self._batches[b] for b in sorted(self._mine) if b in self._batches]

    @property
    def last_progress(self) -> BatchProgress | None:
        progress = self.progress
        return progress[-1] if progress else None

    def history(self) -> list[BatchProgress]:
        """Every committed batch of this job, oldest first, also those of earlier runs and job objects
        on the same broker (a restarted kernel sees them all). ``reset()`` forgets them."""
        with self._lock:
            self._sync_progress()
            return [self._batches[b] for b in sorted(self._batches)]

    @property
    def commit_seq(self) -> int:
        """Grows whenever a queue of this job commits a batch: a cheap "did anything change?" check."""
        with self._lock:
            self._sync_progress()
            return self._seen_seq

    def on_progress(self, listener: Callable[[BatchProgress], None]) -> None:
        """Call ``listener(batch_progress)`` after each batch (on a Spark callback thread)."""
        self._listeners.append(listener)

    def operator_totals(self) -> dict[str, dict[str, int]]:
        """Per operator, its counters summed over every batch so far (``windows_open`` and ``timers_pending``:
        as the latest batch of each queue left them). Feed it to ``topology.real_graph(counters=...)``."""
        totals: dict[str, dict[str, int]] = {}
        open_now: dict[tuple[str, str, str, int], int] = {}
        for batch in self.progress:
            for q in batch.queues:
                for name, counters in q.operators.items():
                    acc = totals.setdefault(name, {})
                    for key, value in counters.items():
                        if key in ("windows_open", "timers_pending"):
                            open_now[(name, key, q.topic, q.queue)] = int(value)
                        elif isinstance(value, int) and not isinstance(value, bool) and key != "watermark" and key != "horizon":
                            acc[key] = acc.get(key, 0) + value
        for (name, key, _topic, _queue), n in open_now.items():
            totals[name][key] = totals[name].get(key, 0) + n
        return totals

    def progress_df(self) -> Any:
        """Every batch's queues as one DataFrame."""
        import pandas as pd

        frames = [p.to_pandas() for p in self.progress]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def errors(self) -> Any:
        """Every record skipped because user code raised on it (``skip_data_error``), read from the
        job's dead-letter topic (so it survives restarts): the batch, the operator that raised, where
        the record came from (topic, queue, offset), the error, the value it raised on, and the raw
        message body as it was read."""
        import pandas as pd

        cols = ["batch_id", "operator", "topic", "queue", "offset", "error", "value", "body"]
        broker, topic = self.core.broker, self.core.dlq_topic
        if not broker.has_topic(topic):
            return pd.DataFrame(columns=cols)
        rows = [dead_letter_row(m) for m in broker.read(topic)]
        return pd.DataFrame(rows, columns=cols)

    def late_records(self) -> Any:
        """Every late record of this job (read from its late-data topic, so it survives restarts):
        operator, key, value, data time, the watermark it was judged by, how late, the reason,
        and where it came from (topic, queue, offset); ``cause`` is the reason coded (a ``LateCause`` value)."""
        import pandas as pd

        cols = ["operator", "key", "value", "data_time", "watermark", "late_ms", "cause", "reason", "topic", "queue",
                "offset", "shuffle_topic", "shuffle_queue", "shuffle_offset"]
        broker, topic = self.core.broker, self.core.late_topic
        if not broker.has_topic(topic):
            return pd.DataFrame(columns=cols)
        rows = [json.loads(m.body) for m in broker.read(topic)]
        return pd.DataFrame(rows, columns=cols)

    def queue_tags(self, topic: str, queue: int) -> list[CommitTag]:
        """The commit tags of one input queue of this job, oldest range first."""
        with self._lock:
            self._sync_progress()
            return sorted(self._tags.get((topic, queue), []), key=lambda t: t.start_offset)

    def ran(self, batch_id: int) -> BatchProgress:
        """Note that this object ran batch ``batch_id`` (its queues committed it); its progress."""
        with self._lock:
            self._sync_progress()
            self._mine.add(batch_id)
            return self._batches.get(batch_id) or BatchProgress.of(batch_id, [])

    def notify(self, progress: BatchProgress) -> None:
        """Call every ``on_progress`` listener with a batch's progress."""
        for listener in list(self._listeners):
            try:
                listener(progress)
            except Exception as exc:  # a broken display must not stop the job
                print(f"rstream: progress listener {listener!r} failed: {exc}")

    def forget(self) -> None:
        """Forget every commit tag read so far (the job was reset)."""
        with self._lock:
            self._tags.clear()
            self._queues.clear()
            self._batches.clear()
            self._mine.clear()

    def lag(self) -> Any:
        """Per input queue (sources, then shuffle topics): its end offset, the offset up to which this
        job has committed, and the records left to read (``lag``), as a DataFrame. ``lag`` counts records,
        also on a packed shuffle topic (``pack_shuffle`` on RocketMQ), whose offsets skip. On a broker that
        names its queues (RocketMQ: ``broker-b:1``, broker name and queue id), that name too (``broker_queue``)."""
        import pandas as pd

        named = getattr(self.core.broker, "queue_label", None)  # RocketMQ's name of a queue: ``broker-b:1``
        columns = ["topic", "queue", *(["broker_queue"] if named else []), "end_offset", "committed_offset", "lag"]
        rows = [{"topic": t, "queue": q, **({"broker_queue": named(t, q)} if named else {}), "end_offset": end,
                 "committed_offset": done, "lag": self.records((t, q), done, end)}
                for (t, q), (end, done) in self.backlog().items()]
        return pd.DataFrame(rows, columns=columns)

    def records(self, queue: tuple[str, int], start: int, end: int) -> int:
        """The records an input queue holds at offsets ``[start, end)`` (``records_between``)."""
        return records_between(self.core.broker, queue[0], queue[1], start, end)

    def backlog(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per input queue: (broker end offset, committed offset)."""
        with self._lock:
            self._sync_progress()
            committed = {key: max(t.end_offset for t in tags) for key, tags in self._tags.items() if tags}
        out = {}
        broker = self.core.broker
        for topic in self.core.topology.input_topics:
            if not broker.has_topic(topic):
                continue
            for q, end in enumerate(broker.end_offsets(topic)):
                out[(topic, q)] = (end, min(committed.get((topic, q), 0), end))
        return out
