"""What every part of a job shares: its topology, settings, broker and folders, the names of its
late-data and dead-letter topics, and the progress it has read (``RocketMQStream`` is built on it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, CommitTag
from rstream.graph.topology import Topology
from rstream.runtime.config import TaskConfig
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.runtime.topics import dlq_topic_name, late_topic_name, task_config
from rstream.settings import JobError, JobProperties

#: A commit sequence number no tag reaches.
NEVER = 2**62


class JobTimeoutError(JobError, TimeoutError):
    """``run_until_idle`` ran out of time."""


class JobCore:
    """The job's parts, set by ``RocketMQStream.__init__``; each layer above adds one concern."""

    topology: Topology
    job_id: str
    properties: JobProperties
    broker: Broker
    job_dir: Path
    checkpoint_dir: Path
    state_dir: Path
    spark: Any
    _query: Any
    _lock: threading.RLock
    _batch_lock: threading.RLock  # held while a batch's Spark jobs run (see QueryDriver.tick)
    _seen_seq: int
    _tags: dict[tuple[str, int], list[CommitTag]]
    _state_cache: dict[tuple[str, int, int, int], dict[bytes, tuple[str, Any, Any]]]
    _queues: dict[int, list[QueueProgress]]
    _batches: dict[int, BatchProgress]
    _mine: set[int]
    _created_seq: int
    _listeners: list[Callable[[BatchProgress], None]]
    _failure: BaseException | None
    _printed: list[str]
    _open_windows: dict[tuple[str, int], int]
    _last_input_ms: int
    _ticker: threading.Thread | None
    _ticker_stop: threading.Event
    _restarts: int
    _query_mode: tuple[bool, bool]
    _task_blob: str
    _query_initial: dict[str, int]
    _flush_target: dict[str, int] | None

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

    @property
    def is_running(self) -> bool:
        return self._query is not None and bool(self._query.isActive)
