"""``RocketMQStream``: runs a topology as one Spark Structured Streaming query.

A facade over parts that each own one concern and get what they need passed in: ``JobCore``
(``job_core``: topology, settings, broker, folders, topic names), ``ProgressLog``
(``job_progress``: progress, history, errors, late records, lag), ``StateHistory`` (``job_state``:
state at a batch, diffs, replay, reset), ``QueryDriver`` (``job_query``: the Spark query) and
``Tracer`` (``trace``); provisioning is in ``topics``. No part knows this class."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, CommitTag
from rstream.graph.topology import Topology
from rstream.runtime.commit import CRASH_POINTS, crash_file
from rstream.runtime.config import TaskConfig
from rstream.runtime.job_core import JobCore
from rstream.runtime.job_progress import ProgressLog
from rstream.runtime.job_query import JobTimeoutError, QueryDriver
from rstream.runtime.job_state import StateHistory
from rstream.runtime.progress import BatchProgress
from rstream.runtime.trace import Tracer
from rstream.settings import JobError, JobProperties

__all__ = ["JobError", "JobProperties", "JobTimeoutError", "RocketMQStream"]


class RocketMQStream:
    """Run ``topology`` on Spark: ``RocketMQStream(builder.build()).run_until_idle()``.

    ``broker`` defaults to an ``EmbeddedBroker`` in ``<data_dir>/broker``; ``spark`` to the active
    session or a new ``local[*]`` one. ``start()`` runs continuously (one micro-batch after the
    other while input comes; while none does, its source watches the broker and plans new input
    as soon as it arrives),
    ``run_until_idle()`` returns once every source and shuffle queue is drained, ``stop()`` stops.
    A restart with the same job folder goes on after the last committed batch: nothing is counted
    twice, nothing is lost.
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
        self._core = core = JobCore.of(topology, properties, broker)
        if spark is None:
            from rstream.runtime.session import get_spark

            spark = get_spark(tmp_dir=core.data_dir / "spark-tmp")
        else:
            from rstream.runtime.session import register

            register(spark)
        self._progress = progress_log = ProgressLog(core)
        self._driver = driver = QueryDriver(core, progress_log, spark)
        self._state = StateHistory(core, progress_log, is_running=lambda: driver.is_running)
        self._tracer = Tracer(core, progress_log)

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"RocketMQStream(job={self.job_id!r}, {state}, batches={len(self.progress)})"

    # -- the job's parts (JobCore) ----------------------------------------------------------------
    @property
    def topology(self) -> Topology:
        return self._core.topology

    @property
    def job_id(self) -> str:
        return self._core.job_id

    @property
    def properties(self) -> JobProperties:
        return self._core.properties

    @property
    def broker(self) -> Broker:
        return self._core.broker

    @property
    def job_dir(self) -> Path:
        return self._core.job_dir

    @property
    def checkpoint_dir(self) -> Path:
        return self._core.checkpoint_dir

    @property
    def state_dir(self) -> Path:
        return self._core.state_dir

    @property
    def spark(self) -> Any:
        return self._driver.spark

    @property
    def late_topic(self) -> str:
        """The topic where this job's late records go: ``<job>-late``."""
        return self._core.late_topic

    @property
    def dlq_topic(self) -> str:
        """The dead-letter topic (RocketMQ's DLQ): every record user code raised on, as it was read,
        with the error, operator, where it came from and the batch in its headers: ``<job>-dlq``."""
        return self._core.dlq_topic

    def task_config(self) -> TaskConfig:
        """What every task of this job gets (creates the job's topics where missing)."""
        return self._core.task_config()

    # -- progress (ProgressLog) -------------------------------------------------------------------
    @property
    def progress(self) -> list[BatchProgress]:
        """The progress of every batch this object ran or saw committed, oldest first. A queue's
        progress is committed with the queue's outputs, so it is never behind what a sink shows."""
        return self._progress.progress

    @property
    def last_progress(self) -> BatchProgress | None:
        return self._progress.last_progress

    def history(self) -> list[BatchProgress]:
        """Every committed batch of this job, oldest first, also those of earlier runs and job objects
        on the same broker (a restarted kernel sees them all). ``reset()`` forgets them."""
        return self._progress.history()

    @property
    def commit_seq(self) -> int:
        """Grows whenever a queue of this job commits a batch: a cheap "did anything change?" check."""
        return self._progress.commit_seq

    def on_progress(self, listener: Callable[[BatchProgress], None]) -> None:
        """Call ``listener(batch_progress)`` after each batch (on a Spark callback thread)."""
        self._progress.on_progress(listener)

    def operator_totals(self) -> dict[str, dict[str, int]]:
        """Per operator, its counters summed over every batch so far (``windows_open``, ``timers_pending``: as the latest
        batch of each queue left it). Feed it to ``topology.real_graph(counters=...)``."""
        return self._progress.operator_totals()

    def progress_df(self) -> Any:
        """Every batch's queues as one DataFrame."""
        return self._progress.progress_df()

    def errors(self) -> Any:
        """Every record skipped because user code raised on it (``skip_data_error``), read from the
        job's dead-letter topic (so it survives restarts): the batch, the operator that raised, where
        the record came from (topic, queue, offset), the error, the value it raised on, and the raw
        message body as it was read."""
        return self._progress.errors()

    def late_records(self) -> Any:
        """Every late record of this job (read from its late-data topic, so it survives restarts):
        operator, key, value, data time, the watermark it was judged by, how late, the reason,
        and where it came from (topic, queue, offset); ``cause`` is the reason coded (a ``LateCause`` value)."""
        return self._progress.late_records()

    def queue_tags(self, topic: str, queue: int) -> list[CommitTag]:
        """The commit tags of one input queue of this job, oldest range first."""
        return self._progress.queue_tags(topic, queue)

    def lag(self) -> Any:
        """Per input queue (sources, then shuffle topics): its end offset, the offset up to which this
        job has committed, and the records left to read (``lag``), as a DataFrame."""
        return self._progress.lag()

    # -- state (StateHistory) and traces (Tracer) -------------------------------------------------
    def state(self, operator: str | None = None, batch: int | None = None) -> Any:
        """The state as a DataFrame: one row per key, with its operator and queue.

        Without ``batch``: the local state stores (RocksDB, read-only, so it also works while the job
        runs). With ``batch=N`` (a ``BatchProgress.batch_id``): the state as it was right after batch N
        committed, read from the state topics, so it also works from a new job object after a restart
        or with the local state deleted. Raises ``StateError`` when compaction removed that past."""
        return self._state.state(operator, batch)

    def what_if(self, topology: Any = None, **properties: Any) -> Any:
        """Run the job's committed input again with other ``properties`` (``allowed_lateness_ms=500``,
        ``time_type=...``, ...) and/or another ``topology`` (a ``StreamBuilder`` or ``Topology`` built
        from the same source topics: another window, another function), in scratch storage, writing
        nothing to the broker; and the job as it is, the same way. Returns a ``WhatIf``: ``before``,
        ``after`` (sinks and late records per key), ``diff()`` (per key and window: values only in one
        run or different, records that became late or on time) and, in a notebook, the two runs'
        event-time pictures over the diff table (``rstream.runtime.what_if``)."""
        from rstream.runtime.what_if import what_if

        return what_if(self._core.topology, self._core.broker, self._core.properties, properties, topology,
                       work=self._core.job_dir)

    def query(self, operator: str, key: Any) -> Any:
        """The current value of ``key`` in ``operator``'s state, while the job runs or after it.

        ``operator`` is a stateful operator's name as ``job.state()`` and the topology show it
        (``"COUNT-4"``). Read from the local state stores (RocksDB, read-only) as the last committed
        batch left them, without stopping the job: Kafka Streams' interactive queries
        (``store.get(key)``) and Flink's queryable state are the precedents; RocketMQ Streams has none.
        A windowed operator answers ``{WindowKey(key, start, end): value}`` for the windows of ``key``
        still open, by start (a fired window's value is in the sink). None when the key has no state.

        >>> job.query("COUNT-4", "rose")
        2
        """
        return self._state.query(operator, key)

    def local_state_folders(self) -> Any:
        """Every local copy of a queue's state, on every executor that processed it: executor, topic,
        queue, the input offset it reflects (``applied_offset``), its keys, and whether it is the copy
        of the last committed batch (``fresh``). A queue whose task moved to another executor has a
        stale copy on the old one: the new one replayed it from the state topic."""
        return self._state.local_state_folders()

    def state_diff(self, from_batch: int, to_batch: int | None = None) -> Any:
        """What changed in the state between right after batch ``from_batch`` and right after batch
        ``to_batch`` (default: the latest committed batch): one row per key that differs, with
        ``change`` ``added``, ``changed`` or ``deleted`` and its value ``before`` and ``after``.
        ``state_diff(n - 1, n)`` is what batch n did to the state. Rows are sorted by operator, queue and
        the key's text."""
        return self._state.state_diff(from_batch, to_batch)

    def state_end(self, topic: str, queue: int, batch: int) -> int:
        """The offset of ``topic``'s state topic, queue ``queue``, right after batch ``batch``: its
        messages below it are the state then (0: no state yet)."""
        return self._state.state_end(topic, queue, batch)

    def replay_state(self, progress: bool = True,
                     on_queue: Callable[[dict[str, Any], int, int], None] | None = None) -> Any:
        """Bring every queue's local state up to its last committed batch now, replaying from the
        state topics where the local copy is missing or stale (tasks otherwise do it lazily, when a
        queue next gets records). Returns one row per queue: what was replayed.

        A replay longer than half a second shows a progress bar over the state-topic messages read
        (``progress=False``: none); ``on_queue(row, messages_done, messages_total)`` is called after
        each queue (a notebook view uses it)."""
        return self._state.replay_state(progress, on_queue)

    def delete_local_state(self) -> None:
        """Delete every local RocksDB folder of this job; the next batch replays them from the
        state topics (what losing an executor does)."""
        self._state.delete_local_state()

    def crash_once(self, point: str = "before_commit") -> None:
        """For a lesson or a test: the next task of this job that reaches ``point`` dies there, once,
        as a killed process does (no cleanup, nothing reported). ``"before_commit"``: a task with
        sink records to write, once they are written (``processing_guarantee="at_least_once"``) or
        before anything is (``"exactly_once"``: they go with the commit), before its commit.
        ``"after_commit"``: any task, once its commit is written and before Spark hears back.
        Spark then retries the task (on a cluster: ``spark.task.maxFailures``); in ``local`` mode
        the batch fails instead, and the job's next run starts it again from its checkpoint. The task
        finds the request in the job's folder, so it must be on the executors' disk (a local master,
        or a cluster on this machine)."""
        if point not in CRASH_POINTS:
            raise JobError(f"crash_once takes one of {list(CRASH_POINTS)}, not {point!r}")
        path = Path(crash_file(self.job_dir, point))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def reset(self) -> None:
        """Forget everything this job did: checkpoint, local state, commit tags, and its shuffle and
        state topics. Source and sink topics stay."""
        self._state.reset()

    def trace(self, topic: str, queue: int, offset: int) -> Any:
        """Where the record at ``topic``/``queue``/``offset`` (a source or shuffle topic of this job) went
        through the real topology: the shuffle records it became, the state it changed (before and
        after), every sink message, late record or dead letter it caused, and the window results it
        ended up in. A ``RecordTrace`` (``to_pandas()``; in a notebook, a table and the real topology
        with the path highlighted). Re-executes the committed ranges involved; writes nothing."""
        return self._tracer.trace(topic, queue, offset)

    def explain(self, topic: str, queue: int, offset: int) -> Any:
        """Why the sink record at ``topic``/``queue``/``offset`` is what it is: the operator result it is
        (an aggregation's update, a window's result, a join's pair, a process function's forward), the
        input records that went into it (each where it is in its source topic, with the operator's state
        before and after it), the records of that key and window that were late or dead letters
        instead, and for a window the watermark that fired it. An ``Explanation`` (``to_pandas()``; in a
        notebook, a table and the real topology with the path highlighted). Re-executes only the
        committed ranges that hold the key's records; writes nothing. Raises ``ExplainError`` for a
        record no range of this job wrote, or when compaction removed the state a range started from."""
        from rstream.runtime.explain import explain

        return explain(self._tracer, topic, queue, offset)

    # -- the query (QueryDriver) ------------------------------------------------------------------
    @property
    def is_running(self) -> bool:
        return self._driver.is_running

    def start(self) -> RocketMQStream:
        """Start processing continuously, in the background; returns at once."""
        self._driver.start()
        return self

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
        self._driver.run_until_idle(timeout, fire_idle, progress)
        return self

    def wait_for(self, condition: Callable[[RocketMQStream], bool], timeout: float = 120,
                 what: str = "the condition") -> RocketMQStream:
        """Wait until ``condition(job)`` holds (checked after every commit of the job, and a few times
        a second), so a notebook waits on the job's own state, never on the wall clock. Raises the
        job's error if it failed, ``JobTimeoutError`` naming ``what`` after ``timeout`` seconds."""
        self._driver.wait_for(lambda: condition(self), timeout, what)
        return self

    def tick(self, flush: bool = False) -> None:
        """Send an idle tick to every queue of the job's window and join topics, so their operators
        check idleness (with ``flush``: treat every source as idle now) even when no data comes.
        Never while a batch's Spark jobs run (it waits for them): a batch's source tasks plan the
        window queues' ranges they run from where those queues end, each on its own, so the ends
        must hold still (``rstream.runtime.shuffle_share.run_with_share``)."""
        self._driver.tick(flush)

    def stop(self) -> None:
        """Stop the query; a later start or run goes on from the last committed batch."""
        self._driver.stop()

    # -- internals that tests, the bench and the topic browser reach: each is its part's own --------
    @property
    def _query(self) -> Any:
        return self._driver._query

    @_query.setter
    def _query(self, query: Any) -> None:
        self._driver._query = query

    @property
    def _query_mode(self) -> tuple[bool, bool]:
        return self._driver._query_mode

    @_query_mode.setter
    def _query_mode(self, mode: tuple[bool, bool]) -> None:
        self._driver._query_mode = mode

    @property
    def _restarts(self) -> int:
        return self._driver._restarts

    @_restarts.setter
    def _restarts(self, restarts: int) -> None:
        self._driver._restarts = restarts

    @property
    def _ticker(self) -> Any:
        return self._driver._ticker

    @property
    def _batch_lock(self) -> Any:
        return self._driver._batch_lock

    @property
    def _pending_shuffles(self) -> Callable[..., list[list[Any]]]:
        return self._driver._pending_shuffles

    @_pending_shuffles.setter
    def _pending_shuffles(self, pending: Callable[..., list[list[Any]]]) -> None:
        vars(self._driver)["_pending_shuffles"] = pending  # over the method, for the driver's own calls

    def _check_failure(self) -> None:
        self._driver._check_failure()

    def _backlog(self) -> dict[tuple[str, int], tuple[int, int]]:
        return self._progress.backlog()
