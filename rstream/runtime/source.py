"""The Spark streaming source: offsets are ``{"topic/queue": next offset}`` over every input queue
(source and shuffle topics alike), plus the job's batch counter; partitions are descriptors of
queue ranges, never records.

The batch counter (``BATCH_KEY``) goes up by one exactly when some queue's offset does (and for
the first batch, which Spark runs even without input), so it follows Spark's own batch id: Spark
runs a batch only when the offsets changed, writes them to its offset log first, and reruns an
unfinished batch with the logged offsets after a restart. Every
range a task processes therefore knows its batch, and the batch is committed with its writes.

``initialOffset``, ``latestOffset`` and ``partitions`` run in a Python process of their own that the
JVM starts; ``read`` runs in the Spark task and does the work (``rstream.runtime.task``), yielding
one small metrics row per queue range.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

SCHEMA = "topic string, queue int, start long, end long, info string"


#: The offsets' entry holding the batch id of the batch that ends at them (-1: none yet).
BATCH_KEY = "batch"

#: How often a started job's idle ``latestOffset`` looks at the broker while it waits for input (s).
WATCH_S = 0.005


def queue_key(topic: str, queue: int) -> str:
    return f"{topic}/{queue}"


def split_queue_key(key: str) -> tuple[str, int]:
    topic, _, queue = key.rpartition("/")
    return topic, int(queue)


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
        self.framed_topics: list[str] = json.loads(options.get("framedtopics", "[]"))
        # "1": flush once everything is read; "2": as soon as the sources are (every window and join
        # topic is written by source pipelines only, so all they will get is in them by then)
        self.flush_at_end = options.get("flushatend") in ("1", "2")
        self.flush_early = options.get("flushatend") == "2"
        # a started job: how long latestOffset waits for input before it says there is none (ms)
        self.wait_ms = int(options.get("waitms", "0"))
        self._target: dict[str, int] | None = None
        self._broker: Any = None

    @property
    def broker(self) -> Any:
        if self._broker is None:
            from rstream.runtime.task import load_blob

            self._broker = load_blob(self.options["broker"])
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
        # Sources stop at what exists now; shuffle topics are read to their end, since all they get
        # from now on comes from source records below this target (so the run still ends).
        self._target = self._ends(self.source_topics)

    def latestOffset(self, start: dict[str, int] | None = None, limit: Any = None) -> dict[str, int]:
        start = start or {}
        batch = int(start.get(BATCH_KEY, -1))
        out = self._latest(start)
        if batch >= 0 and self.wait_ms > 0 and self._target is None and self._drained(start, out):
            out = self._await_input(start, out)
        if self.flush_at_end and self._target is not None and (
                self._drained(start, out) or (self.flush_early and self._sources_read(start))):
            # an availableNow run that is done: the input is idle now, so let the windows still
            # open fire (in this same query, instead of a second one just for the tick). With every
            # window topic fed by sources only, that is as soon as the sources are read: the ticks
            # then follow the last records of the batches before, and this batch takes both
            # (instead of one more batch just for the ticks)
            self.flush_at_end = False
            from rstream.processors.watermarks import send_ticks

            send_ticks(self.broker, self.framed_topics, flush=True)
            out = self._latest(start)
        # a batch only when offsets moved; but Spark runs its batch 0 as soon as the query starts, with
        # input or without (nothing is committed yet), so the counter's first batch is 0 either way
        out[BATCH_KEY] = batch if batch >= 0 and self._drained(start, out) else batch + 1
        return out

    def _await_input(self, start: dict[str, int], out: dict[str, int]) -> dict[str, int]:
        """A started job with nothing to do: watch the broker for up to ``wait_ms`` and return as
        soon as input arrives, so it is planned at once rather than after Spark's next idle trigger
        (which would add half an idle interval to every record's latency, on average). A broker
        with a cheap change counter (``data_version``) is asked that; others are read again."""
        version = getattr(self.broker, "data_version", None)
        seen = version() if version is not None else None
        deadline = time.monotonic() + self.wait_ms / 1000
        while time.monotonic() < deadline:
            time.sleep(WATCH_S)
            if version is not None:
                now = version()
                if now == seen:
                    continue
                seen = now
            out = self._latest(start)
            if not self._drained(start, out):
                break
        return out

    def _latest(self, start: dict[str, int]) -> dict[str, int]:
        out = {}
        for key, end in self._ends(self.source_topics + self.shuffle_topics).items():
            begin = start.get(key, self.initial.get(key, 0))
            if self._target is not None and key in self._target:
                end = min(end, self._target[key])
            out[key] = max(begin, min(end, begin + self.max_per_queue))
        return out

    def _sources_read(self, start: dict[str, int]) -> bool:
        """Whether the batches before the one planned from ``start`` read every source queue up to
        the ``availableNow`` target."""
        assert self._target is not None
        return all(start.get(key, self.initial.get(key, 0)) >= end for key, end in self._target.items())

    def _drained(self, start: dict[str, int], latest: dict[str, int]) -> bool:
        return all(latest[key] <= start.get(key, self.initial.get(key, 0)) for key in queue_offsets(latest))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        batch = int(end.get(BATCH_KEY, -1))
        ranges = []
        for key, stop in queue_offsets(end).items():
            begin = start.get(key, self.initial.get(key, 0))
            if stop > begin:
                topic, queue = split_queue_key(key)
                ranges.append([topic, queue, begin, stop, batch])
        return [InputPartition(group) for group in plan_tasks(ranges, self.tasks)]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, int, str]]:
        from rstream.runtime.task import run_partition

        yield from run_partition(self.options["config"], partition.value)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to do: the tagged appends are the commit; Spark calls this late, if at all."""


def plan_tasks(ranges: list[list[Any]], tasks: int) -> list[list[list[Any]]]:
    """Spread queue ranges over at most ``tasks`` Spark tasks, biggest first onto the least loaded,
    so one task per core runs several queues in turn."""
    bins: list[list[list[Any]]] = [[] for _ in range(min(tasks, len(ranges)))]
    loads = [0] * len(bins)
    for rng in sorted(ranges, key=lambda r: (-(r[3] - r[2]), r[0], r[1])):
        i = loads.index(min(loads))
        bins[i].append(rng)
        loads[i] += rng[3] - rng[2]
    return [b for b in bins if b]
