"""The executor: the Spark source over the broker, the per-queue task, the job driver.

Its names load on first use, so importing a pyspark-free part (``rstream.runtime.task``,
``rstream.runtime.inprocess``) does not load Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rstream.settings import JobError, JobProperties

_LAZY = {
    "BatchProgress": "rstream.runtime.progress",
    "QueueProgress": "rstream.runtime.progress",
    "CheckpointMismatchError": "rstream.runtime.task",
    "JobTimeoutError": "rstream.runtime.job",
    "RocketMQStream": "rstream.runtime.job",
    "get_spark": "rstream.runtime.session",
    "stop_spark": "rstream.runtime.session",
}

if TYPE_CHECKING:
    from rstream.runtime.job import JobTimeoutError, RocketMQStream
    from rstream.runtime.progress import BatchProgress, QueueProgress
    from rstream.runtime.session import get_spark, stop_spark
    from rstream.runtime.task import CheckpointMismatchError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rstream.runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "BatchProgress",
    "CheckpointMismatchError",
    "JobError",
    "JobProperties",
    "JobTimeoutError",
    "QueueProgress",
    "RocketMQStream",
    "get_spark",
    "stop_spark",
]
