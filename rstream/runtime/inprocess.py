"""Run a job's per-queue tasks in this process, without Spark: the same tasks, commit tags, state
stores and topics as ``RocketMQStream``, driven by a loop instead of a streaming query.

For tests of operators against a plain Python reference, and for profiling a task; a notebook runs
its jobs on Spark. Each round is one batch: every input queue (sources, then shuffle topics) that has
records past its last commit is processed up to its current end, in order; ``run_until_idle`` goes on
until no queue has anything left and then, as Spark's ``run_until_idle`` does, sends an idle flush
to the window and join topics so their last windows fire.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, range_end
from rstream.graph.topology import Topology
from rstream.runtime.commit import run_queue
from rstream.runtime.config import TaskConfig
from rstream.runtime.topics import task_config
from rstream.settings import ConsumeFrom, JobProperties
from rstream.shuffle.wire import send_ticks


class InProcessJob:
    """``InProcessJob(builder.build(), broker, job_dir).run_until_idle()``: the job's results land in
    its sink topics and its state in ``<job_dir>/state``, exactly as on Spark."""

    def __init__(self, topology: Topology, broker: Broker, job_dir: str | Path,
                 properties: Mapping[str, Any] | JobProperties | None = None) -> None:
        self.topology = topology
        self.broker = broker
        self.settings = JobProperties.of(properties)
        self.job_dir = Path(job_dir)
        self.cfg: TaskConfig = task_config(topology, broker, self.settings, self.job_dir / "state")
        self._start: dict[tuple[str, int], int] = {}
        for topic in topology.input_topics:
            from_end = topic in topology.source_topics and self.settings.consume_from is ConsumeFrom.LAST
            for queue, end in enumerate(broker.end_offsets(topic)):
                last = broker.last_commit(topology.job_id, topic, queue)
                self._start[(topic, queue)] = last.end_offset if last else (end if from_end else 0)
        done = [broker.last_commit(topology.job_id, t, q) for t, q in self._start]
        self.batch_id = max((c.batch_id for c in done if c is not None and c.batch_id is not None), default=-1)
        #: The metrics of every queue range this object ran, in order (what a Spark task reports).
        self.infos: list[dict[str, Any]] = []

    def run_batch(self) -> list[dict[str, Any]]:
        """One batch: every input queue with new records, up to its end now (at most
        ``max_records_per_queue``). Returns the ranges' metrics; none when nothing was new."""
        ranges = []
        for topic in self.topology.input_topics:
            for queue, end in enumerate(self.broker.end_offsets(topic)):
                start = self._start[(topic, queue)]
                end = range_end(self.broker, topic, queue, start, end, self.settings.max_records_per_queue)
                if end > start:
                    ranges.append((topic, queue, start, end))
        if not ranges:
            return []
        self.batch_id += 1
        infos = []
        for topic, queue, start, end in ranges:
            infos.append(run_queue(self.cfg, topic, queue, start, end, self.batch_id))
            self._start[(topic, queue)] = end
        self.infos += infos
        return infos

    def tick(self, flush: bool = False) -> None:
        """An idle tick on every window and join topic; ``flush`` declares every source idle."""
        send_ticks(self.broker, self.topology.framed_topics, flush)

    def run_until_idle(self, fire_idle: bool = True, max_batches: int = 10_000) -> int:
        """Run batches until no input queue has anything left; with ``fire_idle`` then flush the
        window and join topics (every source idle) and run what that fires. Returns the batches run."""
        ran = 0
        flushed = not fire_idle or not self.topology.framed_topics
        while ran < max_batches:
            if self.run_batch():
                ran += 1
                continue
            if flushed:
                return ran
            self.tick(flush=True)
            flushed = True
        raise RuntimeError(f"job {self.topology.job_id!r} still had input after {max_batches} batches")

    def query(self, operator: str, key: Any) -> Any:
        """``RocketMQStream.query``: ``key``'s value in ``operator``'s state (open windows, if windowed)."""
        from rstream.runtime.job_state import query_state

        return query_state(self.topology, self.broker, self.job_dir / "state", operator, key)

    def trace(self, topic: str, queue: int, offset: int) -> Any:
        """``RocketMQStream.trace``: where the input record at ``topic``/``queue``/``offset`` went."""
        return self._tracer().trace(topic, queue, offset)

    def explain(self, topic: str, queue: int, offset: int) -> Any:
        """``RocketMQStream.explain``: the input records behind the sink record at ``topic``/``queue``/``offset``."""
        from rstream.runtime.explain import explain

        return explain(self._tracer(), topic, queue, offset)

    def _tracer(self) -> Any:
        from rstream.runtime.job_core import JobCore
        from rstream.runtime.job_progress import ProgressLog
        from rstream.runtime.trace import Tracer

        core = JobCore(self.topology, self.settings, self.broker, self.job_dir)
        return Tracer(core, ProgressLog(core))

    @property
    def printed(self) -> list[str]:
        """The lines ``print()`` operators printed, in the order their ranges ran."""
        return [line for info in self.infos for line in info.get("printed", [])]


def run_in_process(topology: Topology, inputs: Mapping[str, Iterable[Any]],
                   properties: Mapping[str, Any] | None = None) -> dict[str, list[str]]:
    """Run ``topology`` once over ``inputs`` in this process (no Spark), on an embedded broker in a
    temporary folder that is deleted afterwards: a quick look at what a job does, and how the DSL's
    examples run. Each topic of ``inputs`` gets one queue holding its records in the order given (a
    ``str`` or ``bytes`` as it is, anything else as JSON); the job runs until idle, ending with the
    idle flush (``run_until_idle``). Returns every sink topic's messages as text, in the order they
    were written (a sink topic the job creates gets one queue, ``sink_queues=1``, unless
    ``properties`` say otherwise)."""
    from rstream.broker.embedded import EmbeddedBroker

    props = {"sink_queues": 1, **(properties or {})}
    with tempfile.TemporaryDirectory(prefix="rstream-example-") as tmp:
        broker = EmbeddedBroker(Path(tmp) / "broker")
        for topic, records in inputs.items():
            broker.create_topic(topic, queues=1)
            bodies = [r if isinstance(r, (str, bytes)) else json.dumps(r) for r in records]
            if bodies:
                broker.send_batch(topic, bodies)
        job = InProcessJob(topology, broker, Path(tmp) / "job", props)
        job.run_until_idle()
        out = {}
        for topic in topology.sink_topics:
            messages = broker.read(topic) if broker.has_topic(topic) else []
            out[topic] = [m.body.decode("utf-8", "replace") for m in sorted(messages, key=lambda m: (m.queue_id, m.offset))]
    return out
