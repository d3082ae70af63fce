"""``RocketMQStream``: runs a topology as one Spark Structured Streaming query."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, CommitTag
from rstream.broker.embedded import EmbeddedBroker
from rstream.errors import RStreamError
from rstream.graph.topology import Topology
from rstream.processors.base import dead_letter_row
from rstream.processors.watermarks import tick_records
from rstream.progressbar import NoBar, progress_bar
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.runtime.source import queue_key
from rstream.runtime.task import TaskConfig, dump_blob, load_blob, state_folder
from rstream.state.store import StateError, StateStore, decode_state_message, is_bookkeeping
from rstream.time.watermark import TimeType

#: A commit sequence number no tag reaches.
NEVER = 2**62


class JobError(RStreamError):
    """The job cannot start or failed while running."""


class JobTimeoutError(JobError, TimeoutError):
    """``run_until_idle`` ran out of time."""


@dataclass(frozen=True)
class JobProperties:
    """Job settings; pass them as a dict to ``RocketMQStream(properties=...)``.

    - ``data_dir``: where the default broker and job folders live (``rstream-data``).
    - ``job_dir``: the job's folder: Spark checkpoint and local state (``<data_dir>/jobs/<job id>``).
    - ``consume_from``: ``"first"`` (default: a notebook produces, then runs) or ``"last"`` offset.
    - ``skip_data_error``: report a record whose deserializer, function or serializer raises,
      and go on (default True); False stops the job with that error.
    - ``trigger_interval_ms``: micro-batch interval of ``start()`` (200).
    - ``tasks``: Spark tasks per batch (default: Spark's default parallelism, one per core).
    - ``max_records_per_queue``: records per queue and batch at most (1 000 000).
    - ``sink_queues``: queues of a sink topic that does not exist yet (4).
    - ``time_type``: where data time comes from: ``event_time`` (``select_timestamp``, else the
      born time), ``born_time``, ``broker_time`` or ``processing_time``.
    - ``allowed_lateness_ms``: watermark = max(watermark, data time - this) per source queue (2000).
    - ``idle_timeout_ms``: a source queue without data for this long (processing time) stops
      holding windows back; when all are idle, open windows fire (2000).
    - ``aggregate_emit``: ``"record"`` (default, as RocketMQ Streams: every input record emits its
      key's updated result) or ``"batch"`` (each key's result once per micro-batch; count, sum,
      min and max then combine values before the shuffle, as Spark does; far faster, fewer updates).
    """

    data_dir: str = "rstream-data"
    job_dir: str | None = None
    consume_from: str = "first"
    skip_data_error: bool = True
    trigger_interval_ms: int = 200
    tasks: int | None = None
    max_records_per_queue: int = 1_000_000
    sink_queues: int = 4
    time_type: str = "event_time"
    allowed_lateness_ms: int = 2000
    idle_timeout_ms: int = 2000
    aggregate_emit: str = "record"

    @classmethod
    def of(cls, props: Mapping[str, Any] | JobProperties | None) -> JobProperties:
        if props is None:
            return cls()
        if isinstance(props, JobProperties):
            return props
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(props) - known)
        if unknown:
            raise JobError(f"unknown job properties {unknown}; known ones are {sorted(known)}")
        made = cls(**dict(props))
        if made.consume_from not in ("first", "last"):
            raise JobError(f"consume_from must be 'first' or 'last', got {made.consume_from!r}")
        if made.aggregate_emit not in ("record", "batch"):
            raise JobError(f"aggregate_emit must be 'record' or 'batch', got {made.aggregate_emit!r}")
        types = [t.value for t in TimeType]
        if made.time_type not in types:
            raise JobError(f"time_type must be one of {types}, got {made.time_type!r}")
        for name in ("allowed_lateness_ms", "idle_timeout_ms"):
            if int(getattr(made, name)) < 0:
                raise JobError(f"{name} must not be negative, got {getattr(made, name)!r}")
        for name in ("trigger_interval_ms", "max_records_per_queue", "sink_queues"):
            if int(getattr(made, name)) < 1:
                raise JobError(f"{name} must be at least 1, got {getattr(made, name)!r}")
        return made


class RocketMQStream:
    """Run ``topology`` on Spark: ``RocketMQStream(builder.build()).run_until_idle()``.

    ``broker`` defaults to an ``EmbeddedBroker`` in ``<data_dir>/broker``; ``spark`` to the active
    session or a new ``local[*]`` one. ``start()`` runs continuously (a micro-batch every
    ``trigger_interval_ms``), ``run_until_idle()`` returns once every source and shuffle queue is
    drained, ``stop()`` stops. A restart with the same job folder goes on after the last committed
    batch: nothing is counted twice, nothing is lost.
    """

    def __init__(
        self,
        topology: Topology,
        properties: Mapping[str, Any] | JobProperties | None = None,
        broker: Broker | None = None,
        spark: Any = None,
    ) -> None:
        if not isinstance(topology, Topology):
            raise JobError(f"RocketMQStream needs a Topology (builder.build()), got {type(topology).__name__}")
        self.topology = topology
        self.job_id = topology.job_id
        self.properties = JobProperties.of(properties)
        data_dir = Path(self.properties.data_dir).absolute()
        self.broker: Broker = broker if broker is not None else EmbeddedBroker(data_dir / "broker")
        self.job_dir = Path(self.properties.job_dir or data_dir / "jobs" / self.job_id).absolute()
        self.checkpoint_dir = self.job_dir / "checkpoint"
        self.state_dir = self.job_dir / "state"
        if spark is None:
            from rstream.runtime.session import get_spark

            spark = get_spark(tmp_dir=data_dir / "spark-tmp")
        else:
            from rstream.runtime.session import register

            register(spark)
        self.spark = spark
        self._query: Any = None
        self._lock = threading.RLock()
        # progress, read from the commit tags: every batch of the job (also of earlier job objects
        # and runs), and the batches this object ran or saw committed
        self._seen_seq = 0
        self._tags: dict[tuple[str, int], list[CommitTag]] = {}
        self._state_cache: dict[tuple[str, int, int, int], dict[bytes, tuple[str, Any, Any]]] = {}
        self._queues: dict[int, list[QueueProgress]] = {}
        self._batches: dict[int, BatchProgress] = {}
        self._mine: set[int] = set()
        self._created_seq = NEVER
        self._sync_progress()
        self._created_seq = self._seen_seq
        self._listeners: list[Callable[[BatchProgress], None]] = []
        self._failure: BaseException | None = None
        self._printed: list[str] = []
        self._open_windows: dict[tuple[str, int], int] = {}
        self._last_input_ms = 0
        self._ticker: threading.Thread | None = None

    # -- topics and options -------------------------------------------------------------------
    def _prepare_topics(self) -> dict[str, int]:
        topo, broker = self.topology, self.broker
        for topic in topo.source_topics:
            broker.topic(topic)  # raises UnknownTopicError with a hint
        for shuffle, queues in topo.shuffle_topics.items():
            broker.create_topic(shuffle, queues=queues)
        for input_topic, state_topic in topo.state_topics.items():
            broker.create_topic(state_topic, queues=broker.topic(input_topic).queues, compact=True)
        sink_queues = {}
        for topic in topo.sink_topics:
            if not broker.has_topic(topic):
                broker.create_topic(topic, queues=self.properties.sink_queues)
            sink_queues[topic] = broker.topic(topic).queues
        if topo.framed_topics:
            broker.create_topic(self.late_topic, queues=1)
        broker.create_topic(self.dlq_topic, queues=1)
        return sink_queues

    @property
    def late_topic(self) -> str:
        """The topic where this job's late records go: ``<job>-late``."""
        return f"{self.job_id}-late"

    @property
    def dlq_topic(self) -> str:
        """The dead-letter topic (RocketMQ's DLQ): every record user code raised on, as it was read,
        with the error, operator, where it came from and the batch in its headers: ``<job>-dlq``."""
        return f"{self.job_id}-dlq"

    def _producers(self) -> dict[str, list[str]]:
        counts = {t: self.broker.topic(t).queues for t in self.topology.input_topics}
        return {t: self.topology.producers(t, counts) for t in self.topology.framed_topics}

    def _initial_offsets(self) -> dict[str, int]:
        out = {}
        for topic in self.topology.input_topics:
            ends = self.broker.end_offsets(topic)
            from_first = topic in self.topology.source_topics and self.properties.consume_from == "first"
            for q, end in enumerate(ends):
                out[queue_key(topic, q)] = 0 if from_first else end
        return out

    def task_config(self) -> TaskConfig:
        """What every task of this job gets (creates the job's topics where missing)."""
        sink_queues = self._prepare_topics()
        return TaskConfig(
            job=self.job_id, topology=self.topology, broker=self.broker, state_dir=str(self.state_dir),
            sink_queues=sink_queues, skip_data_error=self.properties.skip_data_error,
            time_type=self.properties.time_type, allowed_lateness_ms=self.properties.allowed_lateness_ms,
            idle_timeout_ms=self.properties.idle_timeout_ms, aggregate_emit=self.properties.aggregate_emit,
            late_topic=self.late_topic if self.topology.framed_topics else None, producers=self._producers(),
            dlq_topic=self.dlq_topic,
        )

    def _source_options(self) -> dict[str, str]:
        cfg = self.task_config()
        tasks = self.properties.tasks or self.spark.sparkContext.defaultParallelism
        return {
            "config": dump_blob(cfg),
            "broker": dump_blob(self.broker),
            "sourceTopics": json.dumps(self.topology.source_topics),
            "shuffleTopics": json.dumps(list(self.topology.shuffle_topics)),
            "framedTopics": json.dumps(self.topology.framed_topics),
            "initialOffsets": json.dumps(self._initial_offsets()),
            "tasks": str(tasks),
            "maxRecordsPerQueue": str(self.properties.max_records_per_queue),
        }

    # -- running ------------------------------------------------------------------------------
    def _start_query(self, available_now: bool, flush_at_end: bool = False) -> Any:
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self._failure = None
        options = self._source_options()
        if flush_at_end:
            options["flushAtEnd"] = "1"
        df = self.spark.readStream.format("rstream").options(**options).load()
        writer = (
            df.writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self.checkpoint_dir))
            .queryName(f"rstream-{self.job_id}")
        )
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{self.properties.trigger_interval_ms} milliseconds")
        self._query = writer.start()
        return self._query

    @property
    def is_running(self) -> bool:
        return self._query is not None and bool(self._query.isActive)

    def start(self) -> RocketMQStream:
        """Start processing continuously, in the background; returns at once."""
        if self.is_running:
            return self
        query = self._start_query(available_now=False)
        if self.topology.framed_topics:
            self._ticker = threading.Thread(target=self._tick_while_running, args=(query,),
                                            name=f"rstream-ticker-{self.job_id}", daemon=True)
            self._ticker.start()
        return self

    def _tick_while_running(self, query: Any) -> None:
        """While windows are open and no input came for half the idle timeout, send idle ticks, so
        the operators notice idleness and a quiet stream's last windows fire."""
        period = max(self.properties.idle_timeout_ms / 2, 100) / 1000
        while query.isActive:
            time.sleep(period)
            quiet_ms = time.time_ns() // 1_000_000 - self._last_input_ms
            if sum(self._open_windows.values()) and quiet_ms >= self.properties.idle_timeout_ms / 2:
                try:
                    self.tick()
                except Exception as exc:  # the broker went away: the query will fail and say why
                    print(f"rstream: idle tick failed: {exc}")
                    return

    def run_until_idle(self, timeout: float | None = 600, fire_idle: bool = True,
                       progress: bool = True) -> RocketMQStream:
        """Process until every input and shuffle queue is drained, then return (the query started
        by ``start()`` keeps running; otherwise the run stops by itself). Raises the job's error
        if it failed, ``JobTimeoutError`` after ``timeout`` seconds.

        With windows or joins and ``fire_idle`` (the default), the input is then treated as idle,
        as it would be after ``idle_timeout_ms``: the windows still open fire, and records that
        arrive later for them are late (reason: their source was idle).

        A run longer than half a second shows a progress bar: records processed, and the queues
        with the most records left (``progress=False``: none)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        flush = fire_idle and bool(self.topology.framed_topics)
        with progress_bar(None, f"{self.job_id}: run until idle", enabled=progress) as bar:
            watch = _BacklogBar(self, bar)
            if self.is_running:
                self._drain(deadline, timeout, watch=watch)
                if flush:
                    self.tick(flush=True)
                    self._drain(deadline, timeout, watch=watch)
            else:  # the source sends the flush tick itself
                self._drain(deadline, timeout, flush_at_end=flush, watch=watch)
            watch.update(final=True)
        return self

    def lag(self) -> Any:
        """Per input queue (sources, then shuffle topics): its end offset, the offset up to which this
        job has committed, and the records left to read (``lag``), as a DataFrame."""
        import pandas as pd

        rows = [{"topic": t, "queue": q, "end_offset": end, "committed_offset": done, "lag": end - done}
                for (t, q), (end, done) in self._backlog().items()]
        return pd.DataFrame(rows, columns=["topic", "queue", "end_offset", "committed_offset", "lag"])

    def _backlog(self) -> dict[tuple[str, int], tuple[int, int]]:
        """Per input queue: (broker end offset, committed offset)."""
        with self._lock:
            self._sync_progress()
            committed = {key: max(t.end_offset for t in tags) for key, tags in self._tags.items() if tags}
        out = {}
        for topic in self.topology.input_topics:
            if not self.broker.has_topic(topic):
                continue
            for q, end in enumerate(self.broker.end_offsets(topic)):
                out[(topic, q)] = (end, min(committed.get((topic, q), 0), end))
        return out

    def wait_for(self, condition: Callable[[RocketMQStream], bool], timeout: float = 120,
                 what: str = "the condition") -> RocketMQStream:
        """Wait until ``condition(job)`` holds (checked after every commit of the job, and a few times
        a second), so a notebook waits on the job's own state, never on the wall clock. Raises the
        job's error if it failed, ``JobTimeoutError`` naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition(self):
            self._check_failure()
            if time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.job_id!r}: {what} did not hold within {timeout} s")
            time.sleep(0.1)
        return self

    def tick(self, flush: bool = False) -> None:
        """Send an idle tick to every queue of the job's window and join topics, so their operators
        check idleness (with ``flush``: treat every source as idle now) even when no data comes."""
        queues = {t: self.broker.topic(t).queues for t in self.topology.framed_topics}
        self.broker.append(tick_records(queues, time.time_ns() // 1_000_000, flush))

    def _drain(self, deadline: float | None, timeout: float | None, flush_at_end: bool = False,
               watch: _BacklogBar | None = None) -> None:
        if self.is_running:
            while not self._drained():
                self._check_failure()
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeoutError(f"job {self.job_id!r} was not idle after {timeout} s")
                if watch is not None:
                    watch.update()
                time.sleep(0.05)
        else:
            query = self._start_query(available_now=True, flush_at_end=flush_at_end)
            while True:
                step = 0.25 if deadline is None else min(0.25, max(deadline - time.monotonic(), 0.0))
                try:
                    finished = query.awaitTermination(max(step, 0.01))
                except Exception:
                    finished = True
                if finished:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    query.stop()
                    raise JobTimeoutError(f"job {self.job_id!r} was not idle after {timeout} s; it was stopped")
                if watch is not None:
                    watch.update()
        self._check_failure()
        self._flush_printed()

    def stop(self) -> None:
        """Stop the query; a later start or run goes on from the last committed batch."""
        if self._query is not None:
            self._query.stop()
        self._flush_printed()

    def _drained(self) -> bool:
        progress = self._query.lastProgress if self._query is not None else None
        if not progress or not progress.get("sources"):
            return False
        end = progress["sources"][0].get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        if not end:
            return False
        for topic in self.topology.input_topics:
            for q, broker_end in enumerate(self.broker.end_offsets(topic)):
                if int(end.get(queue_key(topic, q), -1)) < broker_end:
                    return False
        return not self._query.status.get("isTriggerActive", False)

    def _check_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        query = self._query
        if query is None or query.isActive:
            return
        exc = query.exception()
        if exc is not None:
            raise JobError(f"job {self.job_id!r} failed: {exc}")

    def _on_batch(self, df: Any, batch_id: int) -> None:
        printed: list[str] = []
        fatal: dict[str, Any] | None = None
        for row in df.collect():
            info = json.loads(row["info"])
            if "fatal" in info:
                fatal = fatal or info
            else:
                printed.extend(info.get("printed", []))
        if fatal is not None:
            try:
                self._failure = load_blob(fatal["fatal"])
            except Exception:
                self._failure = JobError(fatal["message"])
            raise JobError(f"batch {batch_id} of job {self.job_id!r} failed: {fatal['message']}")
        with self._lock:
            self._sync_progress()
            self._mine.add(batch_id)
            progress = self._batches.get(batch_id) or BatchProgress.of(batch_id, [])
            self._printed.extend(printed)
            for q in progress.queues:
                if q.topic in self.topology.source_topics and q.records_in:
                    self._last_input_ms = time.time_ns() // 1_000_000
                if q.topic in self.topology.framed_topics:
                    self._open_windows[(q.topic, q.queue)] = sum(
                        int(op.get("windows_open", 0)) for op in q.operators.values())
        for listener in list(self._listeners):
            try:
                listener(progress)
            except Exception as exc:  # a broken display must not stop the job
                print(f"rstream: progress listener {listener!r} failed: {exc}")

    def _flush_printed(self) -> None:
        with self._lock:
            lines, self._printed = self._printed, []
        for line in lines:
            print(line)

    # -- progress -----------------------------------------------------------------------------
    def _sync_progress(self) -> None:
        """Read the commit tags committed since the last call: each holds one queue's progress."""
        with self._lock:
            tags = self.broker.commits(self.job_id, self._seen_seq)
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
        """Per operator, its counters summed over every batch so far (``windows_open``: as the latest
        batch of each queue left it). Feed it to ``topology.real_graph(counters=...)``."""
        totals: dict[str, dict[str, int]] = {}
        open_now: dict[tuple[str, str, int], int] = {}
        for batch in self.progress:
            for q in batch.queues:
                for name, counters in q.operators.items():
                    acc = totals.setdefault(name, {})
                    for key, value in counters.items():
                        if key == "windows_open":
                            open_now[(name, q.topic, q.queue)] = int(value)
                        elif isinstance(value, int) and not isinstance(value, bool) and key != "watermark" and key != "horizon":
                            acc[key] = acc.get(key, 0) + value
        for (name, _topic, _queue), n in open_now.items():
            totals[name]["windows_open"] = totals[name].get("windows_open", 0) + n
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
        if not self.broker.has_topic(self.dlq_topic):
            return pd.DataFrame(columns=cols)
        rows = [dead_letter_row(m) for m in self.broker.read(self.dlq_topic)]
        return pd.DataFrame(rows, columns=cols)

    def late_records(self) -> Any:
        """Every late record of this job (read from its late-data topic, so it survives restarts):
        operator, key, value, data time, the watermark it was judged by, how late, the reason,
        and where it came from (topic, queue, offset)."""
        import pandas as pd

        cols = ["operator", "key", "value", "data_time", "watermark", "late_ms", "reason", "topic", "queue",
                "offset", "shuffle_topic", "shuffle_queue", "shuffle_offset"]
        if not self.broker.has_topic(self.late_topic):
            return pd.DataFrame(columns=cols)
        rows = [json.loads(m.body) for m in self.broker.read(self.late_topic)]
        return pd.DataFrame(rows, columns=cols)

    # -- state --------------------------------------------------------------------------------
    def state(self, operator: str | None = None, batch: int | None = None) -> Any:
        """The state as a DataFrame: one row per key, with its operator and queue.

        Without ``batch``: the local state stores (RocksDB, read-only, so it also works while the job
        runs). With ``batch=N`` (a ``BatchProgress.batch_id``): the state as it was right after batch N
        committed, read from the state topics, so it also works from a new job object after a restart
        or with the local state deleted. Raises ``StateError`` when compaction removed that past."""
        import pandas as pd

        rows = []
        if batch is None:
            for topic in self.topology.state_topics:
                for q in range(self.broker.topic(topic).queues):
                    store = self._local_store(topic, q)
                    if store is None:
                        continue
                    try:
                        rows += [{"operator": op, "queue": q, "key": key, "value": value}
                                 for op, key, value in store.items(operator) if not is_bookkeeping(op, key)]
                    finally:
                        store.close()
        else:
            rows = [{"operator": op, "queue": q, "key": key, "value": value}
                    for (q, _kb), (op, key, value) in self._state_at(batch).items()
                    if operator is None or op == operator]
        return pd.DataFrame(rows, columns=["operator", "queue", "key", "value"])

    def local_state_folders(self) -> Any:
        """Every local copy of a queue's state, on every executor that processed it: executor, topic,
        queue, the input offset it reflects (``applied_offset``), its keys, and whether it is the copy
        of the last committed batch (``fresh``). A queue whose task moved to another executor has a
        stale copy on the old one: the new one replayed it from the state topic."""
        import pandas as pd

        rows = []
        for topic, state_topic in self.topology.state_topics.items():
            for folder in sorted(self.state_dir.glob(f"*/{topic}/*")):
                if not (folder / "CURRENT").exists() or not folder.name.isdigit():
                    continue
                q = int(folder.name)
                last = self.broker.last_commit(self.job_id, topic, q)
                store = StateStore(folder, state_topic, q).open(read_only=True)
                try:
                    rows.append({"executor": folder.parent.parent.name, "topic": topic, "queue": q,
                                 "applied_offset": store.applied_offset, "state_keys": store.key_count,
                                 "fresh": last is not None and store.applied_offset == last.end_offset})
                finally:
                    store.close()
        return pd.DataFrame(rows, columns=["executor", "topic", "queue", "applied_offset", "state_keys", "fresh"])

    def _local_store(self, topic: str, queue: int) -> StateStore | None:
        """The local copy of a queue's state to read (opened read-only): the one that reflects the last
        committed batch, else the most advanced one; None when no executor has one."""
        last = self.broker.last_commit(self.job_id, topic, queue)
        best: tuple[int, StateStore] | None = None
        for folder in sorted(self.state_dir.glob(f"*/{topic}/{queue}")):
            if not (folder / "CURRENT").exists():
                continue
            store = StateStore(folder, self.topology.state_topics[topic], queue).open(read_only=True)
            applied = store.applied_offset if store.applied_offset is not None else -1
            rank = 2**62 if last is not None and applied == last.end_offset else applied
            if best is None or rank > best[0]:
                if best is not None:
                    best[1].close()
                best = (rank, store)
            else:
                store.close()
        return None if best is None else best[1]

    def state_diff(self, from_batch: int, to_batch: int | None = None) -> Any:
        """What changed in the state between right after batch ``from_batch`` and right after batch
        ``to_batch`` (default: the latest committed batch): one row per key that differs, with
        ``change`` ``added``, ``changed`` or ``deleted`` and its value ``before`` and ``after``.
        ``state_diff(n - 1, n)`` is what batch n did to the state. Rows are sorted by operator, queue and
        the key's text."""
        import pandas as pd

        if to_batch is None:
            history = self.history()
            if not history:
                raise JobError(f"job {self.job_id!r} has not committed a batch yet")
            to_batch = history[-1].batch_id
        before, after = self._state_at(from_batch), self._state_at(to_batch)
        rows = []
        def order(ident: tuple[int, bytes]) -> tuple[str, int, str]:
            op, key, _value = before.get(ident) or after[ident]
            return op, ident[0], str(key)

        for ident in sorted(before.keys() | after.keys(), key=order):
            old, new = before.get(ident), after.get(ident)
            if old is not None and new is not None and old[2] == new[2]:
                continue
            change = "added" if old is None else "deleted" if new is None else "changed"
            op, key, _ = new if new is not None else old  # type: ignore[misc]
            rows.append({"operator": op, "queue": ident[0], "key": key, "change": change,
                         "before": None if old is None else old[2], "after": None if new is None else new[2]})
        # object columns: a missing side stays None (pandas would turn it into NaN next to numbers)
        return pd.DataFrame(rows, columns=["operator", "queue", "key", "change", "before", "after"], dtype=object)

    def queue_tags(self, topic: str, queue: int) -> list[CommitTag]:
        """The commit tags of one input queue of this job, oldest range first."""
        with self._lock:
            self._sync_progress()
            return sorted(self._tags.get((topic, queue), []), key=lambda t: t.start_offset)

    def trace(self, topic: str, queue: int, offset: int) -> Any:
        """Where the record at ``topic``/``queue``/``offset`` (a source or shuffle topic of this job) went
        through the real topology: the shuffle records it became, the state it changed (before and
        after), every sink message, late record or dead letter it caused, and the window results it
        ended up in. A ``RecordTrace`` (``to_pandas()``; in a notebook, a table and the real topology
        with the path highlighted). Re-executes the committed ranges involved; writes nothing."""
        from rstream.runtime.trace import trace

        return trace(self, topic, queue, offset)

    def state_end(self, topic: str, queue: int, batch: int) -> int:
        """The offset of ``topic``'s state topic, queue ``queue``, right after batch ``batch``: its
        messages below it are the state then (0: no state yet)."""
        state_topic = self.topology.state_topics[topic]
        with self._lock:
            self._sync_progress()
            tags = list(self._tags.get((topic, queue), []))
        end = 0
        for tag in tags:
            rng = tag.output_range(state_topic, queue)
            if rng is not None and tag.batch_id is not None and tag.batch_id <= batch:
                end = max(end, rng[1])
        return end

    def _state_at(self, batch: int) -> dict[tuple[int, bytes], tuple[str, Any, Any]]:
        """Per (queue, state key bytes): ``(operator, key, value)`` right after batch ``batch``."""
        history = [p.batch_id for p in self.history()]
        if not isinstance(batch, int) or isinstance(batch, bool):
            raise JobError(f"batch must be a batch id (an int), got {batch!r}")
        if batch >= 0 and batch not in history:
            known = f"batches {history[0]}..{history[-1]}" if history else "no batch yet"
            raise JobError(f"job {self.job_id!r} has no committed batch {batch}; it has {known}")
        out: dict[tuple[int, bytes], tuple[str, Any, Any]] = {}
        for topic, state_topic in self.topology.state_topics.items():
            if not self.broker.has_topic(state_topic):
                continue
            for q in range(self.broker.topic(state_topic).queues):
                end = self.state_end(topic, q, batch) if batch >= 0 else 0
                for kb, entry in self._state_topic_at(topic, state_topic, q, end, batch).items():
                    out[(q, kb)] = entry
        return out

    def _state_topic_at(self, topic: str, state_topic: str, queue: int, end: int,
                        batch: int) -> dict[bytes, tuple[str, Any, Any]]:
        if end == 0:
            return {}
        compacted = self.broker.compacted_below(state_topic, queue)
        if end < compacted:
            readable = [b.batch_id for b in self.history() if self.state_end(topic, queue, b.batch_id) >= compacted]
            since = f"batch {readable[0]} on" if readable else "no batch"
            raise StateError(
                f"the state after batch {batch} is gone: {state_topic} queue {queue} was compacted up to offset "
                f"{compacted}, which keeps only each key's latest value; its state can be read from {since}")
        cache_key = (state_topic, queue, end, compacted)
        with self._lock:
            cached = self._state_cache.get(cache_key)
        if cached is not None:
            return cached
        entries: dict[bytes, tuple[str, Any, Any]] = {}
        for rec in self.broker.read_latest(state_topic, queue, end).values():
            decoded = decode_state_message(rec[1], rec[3])
            if decoded is not None:
                entries[decoded[0]] = decoded[1:]
        with self._lock:
            if len(self._state_cache) > 256:
                self._state_cache.clear()
            self._state_cache[cache_key] = entries
        return entries

    def replay_state(self, progress: bool = True,
                     on_queue: Callable[[dict[str, Any], int, int], None] | None = None) -> Any:
        """Bring every queue's local state up to its last committed batch now, replaying from the
        state topics where the local copy is missing or stale (tasks otherwise do it lazily, when a
        queue next gets records). Returns one row per queue: what was replayed.

        A replay longer than half a second shows a progress bar over the state-topic messages read
        (``progress=False``: none); ``on_queue(row, messages_done, messages_total)`` is called after
        each queue (a notebook view uses it)."""
        import pandas as pd

        if self.is_running:
            raise JobError("stop the job before replaying its state here (its tasks hold the stores)")
        queues = [(topic, state_topic, q) for topic, state_topic in self.topology.state_topics.items()
                  if self.broker.has_topic(topic) for q in range(self.broker.topic(topic).queues)]
        sizes = {}
        for topic, state_topic, q in queues:
            sizes[(topic, q)] = self.broker.end_offsets(state_topic)[q] if self.broker.has_topic(state_topic) else 0
        total, done = sum(sizes.values()), 0
        rows = []
        with progress_bar(total, f"{self.job_id}: replay state", unit="messages", enabled=progress) as bar:
            for topic, state_topic, q in queues:
                last = self.broker.last_commit(self.job_id, topic, q)
                committed = None if last is None else last.end_offset
                store = StateStore(state_folder(self.state_dir, topic, q), state_topic, q).open()
                try:
                    stale = store.applied_offset != committed
                    replayed = store.replay(self.broker, committed) if stale else 0
                    row = {"topic": topic, "queue": q, "committed_offset": committed, "replayed": stale,
                           "replayed_keys": replayed, "state_keys": store.key_count}
                finally:
                    store.close()
                rows.append(row)
                done += sizes[(topic, q)]
                bar.update(sizes[(topic, q)])
                bar.set_postfix_str(f"{topic}/{q}: {replayed} keys")
                if on_queue is not None:
                    on_queue(row, done, total)
        return pd.DataFrame(rows, columns=["topic", "queue", "committed_offset", "replayed", "replayed_keys", "state_keys"])

    def delete_local_state(self) -> None:
        """Delete every local RocksDB folder of this job; the next batch replays them from the
        state topics (what losing an executor does)."""
        if self.is_running:
            raise JobError("stop the job before deleting its local state")
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def reset(self) -> None:
        """Forget everything this job did: checkpoint, local state, commit tags, and its shuffle and
        state topics. Source and sink topics stay."""
        if self.is_running:
            raise JobError("stop the job before resetting it")
        shutil.rmtree(self.job_dir, ignore_errors=True)
        delete_commits = getattr(self.broker, "delete_commits", None)
        if delete_commits is not None:
            delete_commits(self.job_id)
        for topic in [*self.topology.shuffle_topics, *self.topology.state_topics.values(), self.late_topic,
                      self.dlq_topic]:
            if self.broker.has_topic(topic):
                self.broker.delete_topic(topic)
        with self._lock:
            self._tags.clear()
            self._state_cache.clear()
            self._queues.clear()
            self._batches.clear()
            self._mine.clear()

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"RocketMQStream(job={self.job_id!r}, {state}, batches={len(self.progress)})"


class _BacklogBar:
    """Feeds a progress bar with a job's backlog: records committed since the bar began, out of
    those plus the records still left, and the queues with the most left."""

    def __init__(self, job: RocketMQStream, bar: Any) -> None:
        self.job, self.bar = job, bar
        self.start = {k: done for k, (_end, done) in job._backlog().items()}
        self.shown = 0.0

    def update(self, final: bool = False) -> None:
        if isinstance(self.bar, NoBar) or (not final and time.monotonic() - self.shown < 0.2):
            return
        self.shown = time.monotonic()
        backlog = self.job._backlog()
        done = sum(committed - self.start.get(k, 0) for k, (_end, committed) in backlog.items())
        left = {k: end - committed for k, (end, committed) in backlog.items() if end > committed}
        self.bar.total = done + sum(left.values())
        self.bar.n = done
        top = sorted(left.items(), key=lambda kv: -kv[1])[:3]
        self.bar.set_postfix_str("left: " + (", ".join(f"{self._short(t)}/{q} {n}" for (t, q), n in top) or "none")
                                 + (f" (+{len(left) - 3} queues)" if len(left) > 3 else ""))

    def _short(self, topic: str) -> str:
        """``COUNT-4 shuffle`` for ``<job>-ROCKETMQ-COUNT-4-shuffleTopic``: bars are one line."""
        if topic in self.job.topology.shuffle_topics:
            return topic.removeprefix(f"{self.job.job_id}-ROCKETMQ-").removesuffix("-shuffleTopic") + " shuffle"
        return topic
