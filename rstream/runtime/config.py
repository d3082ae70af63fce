"""What every task of a job gets (``TaskConfig``), how it travels to the executors (a pickled
blob in the source's options, unpickled once per worker process), and where an executor keeps
a queue's local state (``state_folder``). No Spark here."""

from __future__ import annotations

import base64
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker
from rstream.graph.topology import Topology
from rstream.settings import DEFAULTS, JobProperties


@dataclass
class TaskConfig:
    """Everything a task needs besides the range; pickled once per job into the source options.
    ``settings`` is the job's own settings object, passed on whole to every processor."""

    job: str
    topology: Topology
    broker: Broker
    state_dir: str
    sink_queues: dict[str, int]
    settings: JobProperties = DEFAULTS
    late_topic: str | None = None
    #: Per framed shuffle topic, its producers (``topic/queue/shuffle sink``).
    producers: dict[str, list[str]] = field(default_factory=dict)
    #: The job's dead-letter topic: every record user code raised on (None: only counted).
    dlq_topic: str | None = None


def dump_blob(obj: Any) -> str:
    from pyspark import cloudpickle  # the pickler Spark ships; imported only where a blob is made

    return base64.b64encode(cloudpickle.dumps(obj)).decode()


def load_blob(blob: str) -> Any:
    import pickle  # cloudpickle's output is plain pickle data

    return pickle.loads(base64.b64decode(blob))


_CONFIGS: dict[str, TaskConfig] = {}


def config_from_blob(blob: str) -> TaskConfig:
    """The task config, unpickled once per worker process (workers are reused between batches)."""
    digest = hashlib.sha1(blob.encode()).hexdigest()
    cfg = _CONFIGS.get(digest)
    if cfg is None:
        cfg = load_blob(blob)
        _CONFIGS.clear()
        _CONFIGS[digest] = cfg
    return cfg


#: The executor name of work done outside any executor (local mode, or the driver replaying).
LOCAL_EXECUTOR = "local"


def executor_name() -> str:
    """Which Spark executor this Python worker serves: ``executor-<id>`` on a cluster (standalone, YARN,
    Kubernetes), ``local`` in local mode. Like a RocketMQ Streams instance, each executor keeps its own
    local state folders: a queue whose task moves to another executor finds no (or a stale) copy there
    and replays it from the state topic."""
    found = os.environ.get("SPARK_EXECUTOR_ID")
    if not found:
        for name in ("SPARK_LOG_URL_STDERR", "SPARK_LOG_URL_STDOUT"):
            match = re.search(r"[?&]executorId=([^&]+)", os.environ.get(name, ""))
            if match:
                found = match.group(1)
                break
    if not found and os.environ.get("CONTAINER_ID"):  # YARN
        found = os.environ["CONTAINER_ID"].rsplit("_", 1)[-1]
    return f"executor-{found}" if found and found != "driver" else LOCAL_EXECUTOR


def state_folder(state_dir: str | Path, topic: str, queue: int, executor: str = LOCAL_EXECUTOR) -> Path:
    """The local RocksDB folder of one input queue on one executor."""
    return Path(state_dir) / executor / topic / str(queue)

