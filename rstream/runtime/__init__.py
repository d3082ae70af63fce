"""The executor: the Spark source over the broker, the per-queue task, the job driver.

Its names load on first use, so importing a pyspark-free part (``rstream.runtime.commit``,
``rstream.runtime.inprocess``) does not load Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rstream.lazy import lazy_getattr
from rstream.settings import JobError, JobProperties

#: The Spark-bound names, loaded on first use (``rstream.lazy``); ``rstream`` exports them too.
RUNTIME_NAMES = {
    "BatchProgress": "rstream.runtime.progress",
    "QueueProgress": "rstream.runtime.progress",
    "CheckpointMismatchError": "rstream.runtime.commit",
    "JobTimeoutError": "rstream.runtime.job",
    "RocketMQStream": "rstream.runtime.job",
    "get_spark": "rstream.runtime.session",
    "stop_spark": "rstream.runtime.session",
}
__getattr__ = lazy_getattr("rstream.runtime", RUNTIME_NAMES, globals())

if TYPE_CHECKING:
    from rstream.runtime.commit import CheckpointMismatchError
    from rstream.runtime.job import JobTimeoutError, RocketMQStream
    from rstream.runtime.progress import BatchProgress, QueueProgress
    from rstream.runtime.session import get_spark, stop_spark


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
