"""The executor: the Spark source over the broker, the per-queue task, the job driver."""

from rstream.runtime.job import JobError, JobProperties, JobTimeoutError, RocketMQStream
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.runtime.session import get_spark, stop_spark
from rstream.runtime.task import CheckpointMismatchError

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
