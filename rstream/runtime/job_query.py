"""Driving a job's Spark query: starting it (continuously or until idle), the idle ticker, the batch
callback, waiting, stopping."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from rstream import progressbar
from rstream.processors import rewrites
from rstream.progressbar import NoBar, progress_bar, set_total
from rstream.runtime.config import dump_blob, load_blob
from rstream.runtime.job_core import JobCore
from rstream.runtime.job_progress import ProgressLog
from rstream.runtime.planning import (
    committed_end,
    plan_tasks,
    queue_key,
    shuffle_positions,
    shuffle_ranges,
    split_queue_key,
)
from rstream.runtime.shuffle_share import run_groups
from rstream.runtime.warm_up import await_warm_up, warming_up
from rstream.settings import ConsumeFrom, JobError
from rstream.shuffle.wire import flush_tag, send_ticks


class JobTimeoutError(JobError, TimeoutError):
    """``run_until_idle`` ran out of time."""


#: What Spark says when a Python process it started for a query (its streaming-source planner, or a
#: task's worker) did not connect back within Spark's fixed 10 s, or when the driver's Python could
#: not connect to the local socket its JVM opened to hand over a ``collect()``'s rows (seen once in
#: CI inside ``foreachBatch``: connection refused), as happens on a machine under heavy load. It says
#: nothing about the job, and the batch committed nothing, so the query is restarted from its checkpoint.
_WORKER_START_FAILURES = (
    "Python worker failed to connect back",
    "Timed out while waiting for the Python worker to connect back",
    "CANNOT_OPEN_SOCKET",
)

#: Restarts after such a failure, per job object, before the failure is raised.
MAX_RESTARTS = 2


#: Spark's pause after a trigger that found no new data (a SQL property read when a query is made).
POLLING_DELAY = "spark.sql.streaming.pollingDelay"

#: A started job's pollingDelay: the source itself waited trigger_interval_ms for input already.
IDLE_PAUSE_MS = 10

#: Spark's status message while a micro-batch runs (``StreamingQuery.status``).
_PROCESSING = "Processing new data"


_CONF_LOCK = threading.Lock()


@contextmanager
def _session_conf(spark: Any, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` on the session while the block runs, then as it was (one block at
    a time: two jobs starting at once on two threads must not restore each other's value)."""
    with _CONF_LOCK:
        before = spark.conf.get(key, None)
        spark.conf.set(key, value)
        try:
            yield
        finally:
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


class _OnBatch:
    """What Spark calls for each batch of one query. py4j keeps what it was handed until the JVM
    collects its proxy, which may be never: this lets go of the job once its query has ended
    (``release``), so a finished job's broker connections and state stores close with the job."""

    __slots__ = ("driver",)

    def __init__(self, driver: QueryDriver) -> None:
        self.driver: QueryDriver | None = driver

    def __call__(self, df: Any, batch_id: int) -> None:
        driver = self.driver
        if driver is None:
            raise JobError(f"batch {batch_id} came after its query ended")
        driver._on_batch(df, batch_id)

    def release(self) -> None:
        self.driver = None


class QueryDriver:
    """One Spark Structured Streaming query per run of the job; the work is in its tasks. Reads the
    job's parts (``core``) and its progress (``progress_log``: what its commits say); owns the
    query, the idle ticker and what the batch callback saw (printed lines, open windows, the last
    input, a task's failure)."""

    def __init__(self, core: JobCore, progress_log: ProgressLog, spark: Any) -> None:
        self.core = core
        self.progress_log = progress_log
        self.spark = spark
        self._query: Any = None
        self._on_batch_call: _OnBatch | None = None  # what the current query calls
        self._lock = threading.RLock()
        self._batch_lock = threading.RLock()  # held while a batch's Spark jobs run (see ``tick``)
        self._failure: BaseException | None = None
        self._printed: list[str] = []
        self._open_windows: dict[tuple[str, int], int] = {}
        self._last_input_ms = 0
        self._ticker: threading.Thread | None = None
        self._ticker_stop = threading.Event()
        self._restarts = 0  # queries restarted after Spark's Python process failed to start
        self._query_mode = (False, False)  # the last query's (available_now, flush_at_end)
        self._task_blob = ""  # the pickled task config of the current query (its shuffle-side jobs use it)
        self._query_initial: dict[str, int] = {}  # the current query's initial offsets
        self._flush_target: dict[str, int] | None = None  # an availableNow run's target, until it flushed

    @property
    def is_running(self) -> bool:
        return self._query is not None and bool(self._query.isActive)

    def _initial_offsets(self) -> dict[str, int]:
        """Where a new checkpoint starts: sources at their start or end (``consume_from``), shuffle
        queues where the job's commits left them (a shuffle topic has no other writer)."""
        out = {}
        for topic in self.core.topology.source_topics:
            ends = self.core.broker.end_offsets(topic)
            from_first = self.core.properties.consume_from is ConsumeFrom.FIRST
            for q, end in enumerate(ends):
                out[queue_key(topic, q)] = 0 if from_first else end
        out.update(shuffle_positions(self.core.broker, self.core.job_id, list(self.core.topology.shuffle_topics)))
        return out

    def _checkpoint_initial(self, fresh: dict[str, int]) -> dict[str, int]:
        """The initial offsets the job's checkpoint started from: ``fresh`` (and kept next to it) when
        the checkpoint is new, else those it was given. Spark uses them only for a new checkpoint; the
        driver also needs them later, as the offset of a source queue that never had a commit (with
        ``consume_from="last"``, where the queue's end was when the job first started)."""
        kept = self.core.job_dir / "initial-offsets.json"
        if (self.core.checkpoint_dir / "offsets").is_dir() and kept.exists():
            return {**fresh, **json.loads(kept.read_text())}
        kept.write_text(json.dumps(fresh))
        return fresh

    def _source_options(self) -> dict[str, str]:
        topology, props = self.core.topology, self.core.properties
        cfg = self.core.task_config()
        tasks = props.tasks or self.spark.sparkContext.defaultParallelism
        # the shuffle side in the source tasks: the topology's rewrite, unless the job property turns it off
        share = props.shuffle_in_source_job and rewrites.SHUFFLE_IN_SOURCE.name in topology.optimizations
        return {
            "job": self.core.job_id,
            # the task config and the broker carry a broker's credentials (RocketMQ with ACL): option names
            # with "secret" in them, which Spark redacts wherever it shows a query's plan (its UI, explain())
            "configSecret": dump_blob(cfg),
            "brokerSecret": dump_blob(self.core.broker),
            "sourceTopics": json.dumps(topology.source_topics),
            "shuffleTopics": json.dumps(list(topology.shuffle_topics)),
            "initialOffsets": json.dumps(self._initial_offsets()),
            "tasks": str(tasks),
            "maxRecordsPerQueue": str(props.max_records_per_queue),
            "shufflesInTasks": json.dumps(topology.shuffles_after_sources if share else []),
            "framedInTasks": json.dumps(topology.framed_after_sources if share else []),
            # the tasks send run_until_idle's idle flush when every window and join topic is theirs
            "flushInTasks": json.dumps(topology.framed_topics if share and topology.framed_by_sources else []),
            "slots": str(self.spark.sparkContext.defaultParallelism),
        }

    def _start_query(self, available_now: bool, flush_at_end: bool = False) -> Any:
        await_warm_up()  # a new session's warm-up: this query then starts warm
        self.core.job_dir.mkdir(parents=True, exist_ok=True)
        self._failure = None
        options = self._source_options()
        self._task_blob = options["configSecret"]
        self._query_initial = self._checkpoint_initial(json.loads(options["initialOffsets"]))
        options["initialOffsets"] = json.dumps(self._query_initial)
        self._flush_target = None
        if available_now:
            target = {queue_key(t, q): end for t in self.core.topology.source_topics
                      for q, end in enumerate(self.core.broker.end_offsets(t))}
            options["target"] = json.dumps(target)
            if flush_at_end:
                # the idle flush goes out once the batches read the sources up to the target (the
                # driver's shuffle side sends it and runs what it fires in the same batch); at once
                # if there is nothing to read, when the query may run no batch at all
                if self._sources_read(target) and not self._pending_shuffles():
                    self.tick(flush=True)
                else:
                    self._flush_target = target
                    options["flushAtEnd"] = "1"  # the last batch's tasks send it, or leave its windows to the driver
        if not available_now:
            options["waitMs"] = str(self.core.properties.trigger_interval_ms)
        df = self.spark.readStream.format("rstream").options(**options).load()
        self._release_batch_call()  # the last query has ended (one query per checkpoint at a time)
        self._on_batch_call = _OnBatch(self)
        writer = (
            df.writeStream.foreachBatch(self._on_batch_call)
            .option("checkpointLocation", str(self.core.checkpoint_dir))
            .queryName(f"rstream-{self.core.job_id}")
        )
        if available_now:
            self._query = writer.trigger(availableNow=True).start()
        else:
            # A batch right after a batch with data (a source batch writes the shuffle queues the next
            # one reads: waiting for the next interval would add up to a whole interval per shuffle).
            # While there is none, the source's latestOffset watches the broker for up to
            # trigger_interval_ms (waitMs) and returns as soon as input comes; after a trigger that
            # found nothing, Spark pauses pollingDelay (read when the query is made) before the next.
            with _session_conf(self.spark, POLLING_DELAY, f"{IDLE_PAUSE_MS}ms"):
                self._query = writer.trigger(processingTime="0 seconds").start()
        self._query_mode = (available_now, flush_at_end)
        return self._query

    def start(self) -> None:
        """Start processing continuously, in the background; returns at once."""
        if self.is_running:
            return
        query = self._start_query(available_now=False)
        if self.core.topology.framed_topics:
            self._ticker_stop = threading.Event()
            self._ticker = threading.Thread(target=self._tick_while_running, args=(query, self._ticker_stop),
                                            name=f"rstream-ticker-{self.core.job_id}", daemon=True)
            self._ticker.start()

    def _tick_while_running(self, query: Any, stop: threading.Event) -> None:
        """While windows are open and no input came for half the idle timeout, send idle ticks, so
        the operators notice idleness and a quiet stream's last windows fire. Ends when ``stop()``
        says so, or when the query ended otherwise (``stop_spark()`` stops queries itself)."""
        period = max(self.core.properties.idle_timeout_ms / 2, 100) / 1000
        while not stop.wait(period):
            try:
                if not query.isActive:
                    return
            except Exception:  # the session and its JVM are gone: nothing left to tick
                return
            with self._lock:  # the batch callback updates both on another thread
                open_now = sum(self._open_windows.values())
                quiet_ms = time.time_ns() // 1_000_000 - self._last_input_ms
            if open_now and quiet_ms >= self.core.properties.idle_timeout_ms / 2:
                try:
                    self.tick()
                except Exception as exc:  # the broker went away: the query will fail and say why
                    print(f"rstream: idle tick failed: {exc}")
                    return

    def run_until_idle(self, timeout: float | None = 600, fire_idle: bool = True,
                       progress: bool = True) -> None:
        """``RocketMQStream.run_until_idle`` (its docstring says what a user sees): drain every input
        and shuffle queue, then, with ``fire_idle`` and windows or joins, send the idle flush."""
        deadline = None if timeout is None else time.monotonic() + timeout
        flush = fire_idle and bool(self.core.topology.framed_topics)
        with progress_bar(None, f"{self.core.job_id}: run until idle", enabled=progress) as bar:
            watch = _BacklogBar(self.core, self.progress_log, bar)
            watch.update(final=True)  # what is left before the first batch: a run may end within 0.25 s
            waited = _await_warm_up(bar, deadline)
            if waited is not None:
                watch.note = f" (after {waited:.0f} s of Spark warm-up)"
            if self.is_running:
                self._drain(deadline, timeout, watch=watch)
                if flush:
                    self.tick(flush=True)
                    self._drain(deadline, timeout, watch=watch)
            else:  # the source sends the flush tick itself
                self._drain(deadline, timeout, flush_at_end=flush, watch=watch)
            watch.update(final=True)

    def wait_for(self, condition: Callable[[], bool], timeout: float = 120, what: str = "the condition") -> None:
        """Wait until ``condition()`` holds (checked a few times a second). Raises the job's error if
        it failed, ``JobTimeoutError`` naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            self._check_failure()
            if time.monotonic() > deadline:
                raise JobTimeoutError(f"job {self.core.job_id!r}: {what} did not hold within {timeout} s")
            time.sleep(0.1)

    def tick(self, flush: bool = False) -> None:
        """Send an idle tick to every queue of the job's window and join topics, so their operators
        check idleness (with ``flush``: treat every source as idle now) even when no data comes.
        Never while a batch's Spark jobs run (it waits for them): a batch's source tasks plan the
        window queues' ranges they run from where those queues end, each on its own, so the ends
        must hold still (``rstream.runtime.shuffle_share.run_with_share``)."""
        with self._batch_lock:
            send_ticks(self.core.broker, self.core.topology.framed_topics, flush)

    def _drain(self, deadline: float | None, timeout: float | None, flush_at_end: bool = False,
               watch: _BacklogBar | None = None) -> None:
        if self.is_running:
            while not self._drained():
                self._check_failure()
                if deadline is not None and time.monotonic() > deadline:
                    raise JobTimeoutError(f"job {self.core.job_id!r} was not idle after {timeout} s")
                if watch is not None:
                    watch.update()
                time.sleep(0.05)
        else:
            self._start_query(available_now=True, flush_at_end=flush_at_end)
            while self._await_run(deadline, timeout, watch):
                pass
        self._check_failure()
        self._flush_printed()

    def _await_run(self, deadline: float | None, timeout: float | None, watch: _BacklogBar | None) -> bool:
        """Wait until the ``availableNow`` query ends; True if it was then restarted (wait again)."""
        query = self._query
        while True:
            step = 0.25 if deadline is None else min(0.25, max(deadline - time.monotonic(), 0.0))
            try:
                if query.awaitTermination(max(step, 0.01)):
                    # True as soon as the query's state says terminated, which Spark sets before it takes the
                    # query off ``spark.streams.active``: wait for that too (no timeout: it follows at once),
                    # so a query started next with the same checkpoint never finds this one still active
                    query.awaitTermination()
                    break
            except Exception:  # it failed (``_check_failure`` says how)
                break
            if deadline is not None and time.monotonic() > deadline:
                query.stop()
                self._release_batch_call()
                raise JobTimeoutError(f"job {self.core.job_id!r} was not idle after {timeout} s; it was stopped")
            if watch is not None:
                watch.update()
        self._release_batch_call(query)
        return self._restarted(query)

    def stop(self) -> None:
        """Stop the query; a later start or run goes on from the last committed batch."""
        if self._ticker is not None:  # first, so it never asks a JVM that a notebook stops next
            self._ticker_stop.set()
            self._ticker.join(timeout=30)
            self._ticker = None
        if self._query is not None:
            self._query.stop()
        self._release_batch_call()
        self._flush_printed()

    def _release_batch_call(self, ended: Any = None) -> None:
        """Let go of what the current query calls; with ``ended``, only if that query is no longer active."""
        if ended is not None:
            try:
                if ended is not self._query or ended.isActive:
                    return
            except Exception:  # its JVM is gone: it runs no batch any more
                pass
        if self._on_batch_call is not None:
            self._on_batch_call.release()
            self._on_batch_call = None

    def _drained(self) -> bool:
        progress = self._query.lastProgress if self._query is not None else None
        if not progress or not progress.get("sources"):
            return False
        end = progress["sources"][0].get("endOffset")
        if isinstance(end, str):
            end = json.loads(end)
        if not end:
            return False
        for topic in self.core.topology.source_topics:
            for q, broker_end in enumerate(self.core.broker.end_offsets(topic)):
                if int(end.get(queue_key(topic, q), -1)) < broker_end:
                    return False
        if self._pending_shuffles():
            return False  # the driver drains shuffle queues (``_run_shuffles``): their commits say how far
        # the last finished trigger read everything there is; a trigger still active may be the source
        # waiting for input (a started job's latestOffset), which is idle, not a batch in flight
        return self._query.status.get("message") != _PROCESSING

    def _check_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure
        query = self._query
        if query is None or query.isActive:
            return
        self._release_batch_call(query)
        if self._restarted(query):
            return
        exc = query.exception()
        if exc is not None:
            raise JobError(f"job {self.core.job_id!r} failed: {exc}")

    def _restarted(self, query: Any) -> bool:
        """If ``query`` (this job's current one) died because a Python process Spark started for it did
        not connect back in time, start it again from its checkpoint, in the same mode (at most
        ``MAX_RESTARTS`` times per job object), and say so."""
        if query is not self._query or query.isActive or self._restarts >= MAX_RESTARTS:
            return False
        exc = query.exception()
        if exc is None or not any(text in str(exc) for text in _WORKER_START_FAILURES):
            return False
        self._restarts += 1
        print(f"rstream: job {self.core.job_id!r}: Spark's Python and JVM did not connect in time "
              f"(a busy machine); restarting the query from its checkpoint ({self._restarts} of {MAX_RESTARTS})")
        available_now, flush_at_end = self._query_mode
        if available_now:
            self._start_query(available_now=True, flush_at_end=flush_at_end)
        else:
            self._query = None
            self.start()
        return True

    def _on_batch(self, df: Any, batch_id: int) -> None:
        with self._batch_lock:  # no idle tick from another thread while the batch's jobs run
            infos = [json.loads(row["info"]) for row in df.collect()]
            self._raise_fatal(infos, batch_id)
            if self.core.topology.shuffle_topics:
                infos += self._run_shuffles(batch_id)
        printed = [line for info in infos for line in info.get("printed", [])]
        progress = self.progress_log.ran(batch_id)
        with self._lock:
            self._printed.extend(printed)
            for q in progress.queues:
                if q.topic in self.core.topology.source_topics and q.records_in:
                    self._last_input_ms = time.time_ns() // 1_000_000
                if q.topic in self.core.topology.framed_topics:
                    # timers and held records too: ticks fire them, and take what an idle stream holds
                    self._open_windows[(q.topic, q.queue)] = sum(
                        op.windows_open + op.timers_pending + op.held for op in q.operators.values())
        self.progress_log.notify(progress)

    def _raise_fatal(self, infos: list[dict[str, Any]], batch_id: int) -> None:
        """Fail the batch if a task reported a fatal error (its exception is what the job raises)."""
        fatal = next((info for info in infos if "fatal" in info), None)
        if fatal is None:
            return
        try:
            self._failure = load_blob(fatal["fatal"])
        except Exception:
            self._failure = JobError(fatal["message"])
        raise JobError(f"batch {batch_id} of job {self.core.job_id!r} failed: {fatal['message']}")

    def _run_shuffles(self, batch_id: int) -> list[dict[str, Any]]:
        """The shuffle side of batch ``batch_id``, in the same trigger: what its source tasks (or the
        shuffle ranges before) wrote to shuffle queues and did not run themselves (see
        ``rstream.runtime.shuffle_share.run_with_share``), run as one more Spark job of the batch, until
        no shuffle queue has anything uncommitted (a chain of shuffles takes one job per step; after
        one job per shuffle topic and one more, what is left is the next batch's).
        Returns the ranges' metrics. Its ranges are tagged with this batch, so a rerun of the batch
        plans around them (``rstream.runtime.source``).

        The idle flush of ``run_until_idle`` goes out here, once the sources are read up to the run's
        target, unless that batch's source tasks sent it (``flush_tag``): at once if every window and
        join topic is fed by sources only (the ticks then follow their last records), else once the
        shuffle queues are drained."""
        tasks = self.core.properties.tasks or self.spark.sparkContext.defaultParallelism
        infos: list[dict[str, Any]] = []
        # one job per step of the longest chain of shuffles, and one for the flush: what is left after
        # that (an idle tick a started job's ticker sent meanwhile) is the next batch's, so a batch ends
        for _step in range(len(self.core.topology.shuffle_topics) + 1):
            ranges = self._flush_if_due(self._pending_shuffles(batch_id), batch_id)
            if not ranges:
                return infos
            # an RDD job: about 80 ms less per job than a SQL one (mapInArrow) on this machine; its Python
            # workers come from a daemon and pool of their own, which a local session warms up at start
            groups = plan_tasks(ranges, tasks)
            rdd = self.spark.sparkContext.parallelize(groups, len(groups))
            new = [json.loads(row[4]) for row in rdd.mapPartitions(partial(run_groups, self._task_blob)).collect()]
            self._raise_fatal(new, batch_id)
            infos += new
        self._flush_if_due(self._pending_shuffles(batch_id), batch_id)  # its ticks are the next batch's
        return infos

    def _flush_if_due(self, ranges: list[list[Any]], batch_id: int) -> list[list[Any]]:
        """Send ``run_until_idle``'s idle flush if it is due now (see ``_run_shuffles``); the shuffle
        ranges pending after it."""
        if (self._flush_target is None or not (self.core.topology.framed_by_sources or not ranges)
                or not self._sources_read(self._flush_target)):
            return ranges
        self._flush_target = None
        with self._batch_lock:  # (its own: held by this batch) nothing is sent if the tasks sent it
            send_ticks(self.core.broker, self.core.topology.framed_topics, flush=True,
                       once=flush_tag(self.core.job_id, batch_id))
        return self._pending_shuffles(batch_id)

    def _pending_shuffles(self, batch_id: int = -1) -> list[list[Any]]:
        """The uncommitted ranges of the shuffle queues, at most ``max_records_per_queue`` each."""
        return shuffle_ranges(self.core.broker, self.core.job_id, list(self.core.topology.shuffle_topics),
                              self.core.properties.max_records_per_queue, batch_id)

    def _sources_read(self, target: dict[str, int]) -> bool:
        """Whether every source queue is committed up to ``target`` (an availableNow run's end)."""
        broker, job = self.core.broker, self.core.job_id
        return all(committed_end(broker, job, *split_queue_key(key), self._query_initial.get(key, 0)) >= end
                   for key, end in target.items())

    def _flush_printed(self) -> None:
        with self._lock:
            lines, self._printed = self._printed, []
        for line in lines:
            print(line)


#: What a run's bar says while a new session's warm-up holds its first query back.
WARM_UP_NOTE = "waiting for the new Spark session's warm-up (once per session)"


def _await_warm_up(bar: Any, deadline: float | None) -> float | None:
    """Wait for a new session's warm-up before a run's first query (it would wait anyway, see
    ``await_warm_up``), saying so on the bar once the wait is long enough to show one: otherwise it
    sits at 0 % for seconds with no reason given. Once a wait the bar showed is over, the bar's clock
    starts again, so its time and rate count the run's work only (not "00:11, 1.78 records/s" for 20
    records that took a second); returns how long that wait was (s), for the bar to name it after what
    is left (its description stays the run's own), else None."""
    began = time.monotonic()
    noted = False
    while warming_up() and (deadline is None or time.monotonic() < deadline):
        await_warm_up(timeout=0.25)
        if warming_up() and not noted and time.monotonic() - began >= progressbar.DELAY_S:
            bar.set_postfix_str(WARM_UP_NOTE)
            noted = True
    if noted and not warming_up():
        bar.reset(total=bar.total)
        return time.monotonic() - began
    return None


class _BacklogBar:
    """Feeds a progress bar with a job's backlog: records committed since the bar began, out of
    those plus the records still left, and the queues with the most left."""

    def __init__(self, core: JobCore, progress_log: ProgressLog, bar: Any) -> None:
        self.core, self.progress_log, self.bar = core, progress_log, bar
        self.start = {k: done for k, (_end, done) in progress_log.backlog().items()}
        self.shown = 0.0
        #: said after what is left, e.g. how long the run waited for the session's warm-up
        self.note = ""

    def update(self, final: bool = False) -> None:
        if isinstance(self.bar, NoBar) or (not final and time.monotonic() - self.shown < 0.2):
            return
        self.shown = time.monotonic()
        backlog = self.progress_log.backlog()
        records = self.progress_log.records  # not offsets: a packed shuffle topic's skip
        done = sum(records(k, self.start.get(k, 0), committed) for k, (_end, committed) in backlog.items())
        left = {k: records(k, committed, end) for k, (end, committed) in backlog.items() if end > committed}
        set_total(self.bar, done + sum(left.values()))
        self.bar.n = done
        top = sorted(left.items(), key=lambda kv: -kv[1])[:3]
        self.bar.set_postfix_str("left: " + (", ".join(f"{self._short(t)}/{q} {n}" for (t, q), n in top) or "none")
                                 + (f" (+{len(left) - 3} queues)" if len(left) > 3 else "") + self.note)

    def _short(self, topic: str) -> str:
        """``COUNT-4 shuffle`` for ``<job>-ROCKETMQ-COUNT-4-shuffleTopic``: bars are one line."""
        if topic in self.core.topology.shuffle_topics:
            return topic.removeprefix(f"{self.core.job_id}-ROCKETMQ-").removesuffix("-shuffleTopic") + " shuffle"
        return topic
