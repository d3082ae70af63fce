"""``RocketMQStream``: runs a topology as one Spark Structured Streaming query.

A thin facade over one layer per concern: ``job_core`` (parts and topics), ``job_progress``
(progress, errors, late records), ``job_state`` (state, diffs, traces, replay), ``job_query``
(the Spark query); provisioning is in ``topics``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker, CommitTag
from rstream.broker.embedded import EmbeddedBroker
from rstream.graph.topology import Topology
from rstream.runtime.job_core import NEVER, JobTimeoutError
from rstream.runtime.job_query import QueryDriver
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.settings import JobError, JobProperties

__all__ = ["JobError", "JobProperties", "JobTimeoutError", "RocketMQStream"]


class RocketMQStream(QueryDriver):
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
        self._batch_lock = threading.RLock()
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
        self._ticker_stop = threading.Event()
        self._restarts = 0  # queries restarted after Spark's Python process failed to start
        self._query_mode = (False, False)  # the last query's (available_now, flush_at_end)
        self._task_blob = ""  # the pickled task config of the current query (its shuffle-side jobs use it)
        self._query_initial: dict[str, int] = {}  # the current query's initial offsets
        self._flush_target: dict[str, int] | None = None  # an availableNow run's target, until it flushed

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"RocketMQStream(job={self.job_id!r}, {state}, batches={len(self.progress)})"
