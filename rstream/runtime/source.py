"""The Spark streaming source: offsets are ``{"topic/queue": next offset}`` over every input queue
(source and shuffle topics alike), plus the job's batch counter; partitions are descriptors of
queue ranges, never records.

The batch counter (``BATCH_KEY``) goes up by one exactly when some queue's offset does (and for
the first batch, which Spark runs even without input), so it follows Spark's own batch id: Spark
runs a batch only when the offsets changed, writes them to its offset log first, and reruns an
unfinished batch with the logged offsets after a restart. Every
range a task processes therefore knows its batch, and the batch is committed with its writes.

``initialOffset``, ``latestOffset`` and ``partitions`` run in a Python process of their own that the
JVM starts; ``read`` runs in the Spark task and does the work (``rstream.runtime.shuffle_share``), yielding
one small metrics row per queue range.

Shuffle queues are drained in the same trigger: what a batch's source tasks wrote to them is counted
before the batch ends, instead of one whole trigger later. A shuffle topic that only source pipelines
write is run by the source job's own tasks, once all of the batch's source ranges are committed
(``rstream.runtime.shuffle_share.run_with_share``), a window or join topic but in the batch that the idle flush
of ``run_until_idle`` follows; what is left, and every other shuffle topic, the driver runs as a
second Spark job of the batch (``QueryDriver._run_shuffles``). Such a
range is committed with its tag like any other, and the tag is what says how far a shuffle queue is
done: the source plans a shuffle queue from ``max(its offset, its last commit)``, and its offset
moves only when the source plans it (for a tick sent while the job idles, say). A batch rerun after
a failure plans around what was already committed, as it does around its own tasks' commits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from rstream.broker.base import range_end
from rstream.runtime.planning import committed_end, plan_tasks, queue_key, split_queue_key

SCHEMA = "topic string, queue int, start long, end long, info string"


#: The offsets' entry holding the batch id of the batch that ends at them (-1: none yet).
BATCH_KEY = "batch"

#: How often a started job's idle ``latestOffset`` looks at the broker while it waits for input (s):
#: every ``WATCH_S`` within ``WATCH_SLOW_AFTER_S`` of the last input, then less often, the pause growing
#: with the idle time up to ``WATCH_MAX_S``. A look costs a broker little (the embedded one: a SQLite
#: read; RocketMQ: 3 requests, but its JVMs then spent half a core on 130 looks a second while
#: nothing came); a record after a long idle waits up to ``WATCH_MAX_S`` more to be seen.
WATCH_S = 0.005
WATCH_SLOW_AFTER_S = 1.0
WATCH_MAX_S = 0.04


def watch_pause(idle_s: float) -> float:
    """The idle watch's pause between two looks after ``idle_s`` seconds without input."""
    return min(WATCH_MAX_S, WATCH_S * max(1.0, idle_s / WATCH_SLOW_AFTER_S))


def queue_offsets(offsets: dict[str, int]) -> dict[str, int]:
    """The ``{"topic/queue": offset}`` entries of a source offset, without the batch counter."""
    return {k: v for k, v in offsets.items() if k != BATCH_KEY}


class RStreamDataSource(DataSource):
    """``spark.readStream.format("rstream")``: registered by ``rstream.runtime.session``."""

    @classmethod
    def name(cls) -> str:
        return "rstream"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return RStreamStreamReader(dict(self.options))


class RStreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        # option keys arrive lower-cased
        self.options = options
        self.source_topics: list[str] = json.loads(options["sourcetopics"])
        self.shuffle_topics: list[str] = json.loads(options["shuffletopics"])
        self.initial: dict[str, int] = json.loads(options["initialoffsets"])
        self.tasks = max(1, int(options.get("tasks", "2")))
        self.max_per_queue = max(1, int(options.get("maxrecordsperqueue", "1000000")))
        # an availableNow run's end: the source offsets the driver took when it started the query
        self.target: dict[str, int] | None = json.loads(options["target"]) if "target" in options else None
        # a started job: how long latestOffset waits for input before it says there is none (ms)
        self.wait_ms = int(options.get("waitms", "0"))
        self.job = options.get("job", "")
        # shuffle topics the source job's tasks may run themselves (``run_with_share``), and the
        # cores that can run a batch's tasks at once: with more tasks than that, some would wait
        self.shuffles_in_tasks: list[str] = json.loads(options.get("shufflesintasks", "[]"))
        # window and join topics they may run too; in the batch that reads the sources to the end of
        # an ``availableNow`` run of ``run_until_idle`` (``flushatend``), after the idle flush, which
        # they send themselves when every window and join topic is theirs (``flushintasks``), else the
        # driver, which then runs those topics in a job of its own
        self.framed_in_tasks: list[str] = json.loads(options.get("framedintasks", "[]"))
        self.flush_in_tasks: list[str] = json.loads(options.get("flushintasks", "[]"))
        self.flush_at_end = options.get("flushatend") == "1"
        self.slots = int(options.get("slots", "0"))
        self._target: dict[str, int] | None = None
        self._input_at = time.monotonic()  # when latestOffset last found input (``_await_input``'s pace)
        self._broker: Any = None

    @property
    def broker(self) -> Any:
        if self._broker is None:
            from rstream.runtime.config import load_blob

            self._broker = load_blob(self.options["brokersecret"])
        return self._broker

    def _ends(self, topics: Sequence[str]) -> dict[str, int]:
        out = {}
        for topic in topics:
            for q, end in enumerate(self.broker.end_offsets(topic)):
                out[queue_key(topic, q)] = end
        return out

    def initialOffset(self) -> dict[str, int]:
        return {**self.initial, BATCH_KEY: -1}

    def prepareForTriggerAvailableNow(self) -> None:
        # Sources stop at the driver's target (or at what exists now); shuffle topics are read to
        # their end, since all they get from now on comes from source records below this target (so
        # the run still ends). The driver sends the idle flush of ``run_until_idle`` itself, once its
        # batches read the sources up to this same target (``QueryDriver._run_shuffles``).
        self._target = self.target if self.target is not None else self._ends(self.source_topics)

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        start = start or {}
        batch = int(start.get(BATCH_KEY, -1))
        out = self._latest(start)
        if batch >= 0 and self.wait_ms > 0 and self._target is None and self._drained(start, out):
            out = self._await_input(start, out)
        # a batch only when offsets moved; but Spark runs its batch 0 as soon as the query starts, with
        # input or without (nothing is committed yet), so the counter's first batch is 0 either way
        drained = batch >= 0 and self._drained(start, out)
        if not drained:
            self._input_at = time.monotonic()
        out[BATCH_KEY] = batch if drained else batch + 1
        return out

    def _await_input(self, start: dict[str, int], out: dict[str, int]) -> dict[str, int]:
        """A started job with nothing to do: watch the broker for up to ``wait_ms`` and return as
        soon as input arrives, so it is planned at once rather than after Spark's next idle trigger
        (which would add half an idle interval to every record's latency, on average). A broker
        with a cheap change counter (``data_version``) is asked that; others are read again."""
        version = getattr(self.broker, "data_version", None)
        seen = version() if version is not None else None
        now = time.monotonic()
        deadline = now + self.wait_ms / 1000
        while now < deadline:
            time.sleep(watch_pause(now - self._input_at))
            now = time.monotonic()
            if version is not None:
                current = version()
                if current == seen:
                    continue
                seen = current
            out = self._latest(start)
            if not self._drained(start, out):
                break
        return out

    def _latest(self, start: dict[str, int]) -> dict[str, int]:
        out = {}
        for key, end in self._ends(self.source_topics).items():
            begin = start.get(key, self.initial.get(key, 0))
            if self._target is not None and key in self._target:
                end = min(end, self._target[key])
            out[key] = max(begin, min(end, begin + self.max_per_queue))
        for key, end in self._ends(self.shuffle_topics).items():
            # a shuffle queue the driver drained keeps its offset: no batch just to say so
            begin = start.get(key, self.initial.get(key, 0))
            done = self._committed(key, begin) if end > begin else begin
            out[key] = begin if end <= done else range_end(self.broker, *split_queue_key(key), done, end,
                                                           self.max_per_queue)
        return out

    def _committed(self, key: str, begin: int) -> int:
        """Where a shuffle queue's next range starts: its last commit's end, if that is past ``begin``."""
        topic, queue = split_queue_key(key)
        return max(begin, committed_end(self.broker, self.job, topic, queue, begin))

    def _drained(self, start: dict[str, int], latest: dict[str, int]) -> bool:
        return all(latest[key] <= start.get(key, self.initial.get(key, 0)) for key in queue_offsets(latest))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        batch = int(end.get(BATCH_KEY, -1))
        ranges = []
        for key, stop in queue_offsets(end).items():
            begin = start.get(key, self.initial.get(key, 0))
            if stop > begin and split_queue_key(key)[0] in self.shuffle_topics:
                begin = self._committed(key, begin)
            if stop > begin:
                topic, queue = split_queue_key(key)
                ranges.append([topic, queue, begin, stop, batch])
        groups = plan_tasks(ranges, self.tasks)
        last = self._last_of_run(end)
        shared = self.shuffles_in_tasks if last and not self.flush_in_tasks else \
            self.shuffles_in_tasks + self.framed_in_tasks
        if not shared or not groups or len(groups) > self.slots:
            return [InputPartition((group, None)) for group in groups]
        # every task runs its part of the shuffle side once the whole batch is committed (and, in the
        # last batch of ``run_until_idle``'s run, the idle flush is sent): where each of those queues
        # starts is fixed now (nothing else commits them while the batch runs)
        begins = {key: self._committed(key, stop) for key, stop in end.items()
                  if key != BATCH_KEY and split_queue_key(key)[0] in shared}
        return [InputPartition((group, {"index": i, "count": len(groups), "barrier": ranges, "begins": begins,
                                        "batch": batch, "max_per_queue": self.max_per_queue,
                                        "flush": self.flush_in_tasks if last else []}))
                for i, group in enumerate(groups)]

    def _last_of_run(self, end: dict[str, int]) -> bool:
        """Whether the batch that ends at ``end`` reads the sources up to an ``availableNow`` run's target
        that ends with the idle flush (``run_until_idle``)."""
        target = self._target
        return self.flush_at_end and target is not None and all(end.get(k, 0) >= v for k, v in target.items())

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, int, str]]:
        from rstream.runtime.shuffle_share import run_with_share

        ranges, share = partition.value
        yield from run_with_share(self.options["configsecret"], ranges, share)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the tagged appends are the commit; Spark calls this late, if at all."""
