"""What every part of a job shares, fixed when the job is made: its topology, settings, broker and
folders, and the names of its late-data and dead-letter topics. Each part of ``RocketMQStream``
(progress log, state history, query driver, tracer) gets it passed in; none holds the job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker
from rstream.broker.embedded import EmbeddedBroker
from rstream.graph.topology import Topology
from rstream.runtime.config import TaskConfig
from rstream.runtime.topics import dlq_topic_name, late_topic_name, task_config
from rstream.settings import JobProperties


@dataclass(frozen=True)
class JobCore:
    """A job's topology, settings (``properties``), broker and folder: plain values, no locks,
    threads or Spark objects. What travels to the executors is made from it (``task_config``)."""

    topology: Topology
    properties: JobProperties
    broker: Broker
    #: Everything the job keeps on disk: its checkpoint and its local state.
    job_dir: Path

    @classmethod
    def of(cls, topology: Topology, properties: Mapping[str, Any] | JobProperties | None = None,
           broker: Broker | None = None) -> JobCore:
        """The parts as ``RocketMQStream(topology, properties, broker)`` makes them: ``broker``
        defaults to an ``EmbeddedBroker`` in ``<data_dir>/broker``, the job's folder to
        ``<data_dir>/jobs/<job id>`` (``job_dir`` overrides it)."""
        props = JobProperties.of(properties)
        data_dir = Path(props.data_dir).absolute()
        return cls(topology, props, broker if broker is not None else EmbeddedBroker(data_dir / "broker"),
                   Path(props.job_dir or data_dir / "jobs" / topology.job_id).absolute())

    @property
    def job_id(self) -> str:
        return self.topology.job_id

    @property
    def data_dir(self) -> Path:
        return Path(self.properties.data_dir).absolute()

    @property
    def checkpoint_dir(self) -> Path:
        """Spark's checkpoint (offset log and commit log) of the job's query."""
        return self.job_dir / "checkpoint"

    @property
    def state_dir(self) -> Path:
        """The local state folders, one per executor and input queue."""
        return self.job_dir / "state"

    @property
    def late_topic(self) -> str:
        """The topic where this job's late records go: ``<job>-late``."""
        return late_topic_name(self.job_id)

    @property
    def dlq_topic(self) -> str:
        """The dead-letter topic (RocketMQ's DLQ): every record user code raised on, as it was read,
        with the error, operator, where it came from and the batch in its headers: ``<job>-dlq``."""
        return dlq_topic_name(self.job_id)

    def task_config(self) -> TaskConfig:
        """What every task of this job gets (creates the job's topics where missing)."""
        return task_config(self.topology, self.broker, self.properties, self.state_dir)
