"""rstream: RocketMQ Streams (RIP-58) in Python, executed on PySpark, made for notebooks.

    from rstream import StreamBuilder, RocketMQStream, EmbeddedBroker, TextDeserializer
"""

from typing import TYPE_CHECKING, Any

from rstream.broker import (
    Broker,
    BrokerError,
    BrokerPathError,
    EmbeddedBroker,
    InvalidTopicNameError,
    Message,
    UnknownTopicError,
)
from rstream.dsl import DslError, GroupedStream, JoinedStream, RStream, StreamBuilder, WindowStream
from rstream.errors import RStreamError
from rstream.graph import Topology
from rstream.processors import Accumulator, ProcessingError, RecordError, UnhashableKeyError
from rstream.serde import (
    JsonDeserializer,
    JsonSerializer,
    RawDeserializer,
    RawSerializer,
    SerdeError,
    TextDeserializer,
    TextSerializer,
)
from rstream.settings import JobError, JobProperties
from rstream.state import StateError, StateStore
from rstream.time import SessionWindow, SlidingWindow, Time, TimeType, TumblingWindow, WindowError, WindowKey

__version__ = "0.1.0"

#: Names that need Spark to run: loaded when first used, so ``import rstream`` (and the DSL, the
#: broker, the processors and their tests) never loads pyspark.
_LAZY = {
    "BatchProgress": "rstream.runtime.progress",
    "QueueProgress": "rstream.runtime.progress",
    "CheckpointMismatchError": "rstream.runtime.task",
    "JobTimeoutError": "rstream.runtime.job",
    "RocketMQStream": "rstream.runtime.job",
    "get_spark": "rstream.runtime.session",
    "stop_spark": "rstream.runtime.session",
    "RecordTrace": "rstream.runtime.trace",
    "TraceError": "rstream.runtime.trace",
}

if TYPE_CHECKING:
    from rstream.runtime.job import JobTimeoutError, RocketMQStream
    from rstream.runtime.progress import BatchProgress, QueueProgress
    from rstream.runtime.session import get_spark, stop_spark
    from rstream.runtime.task import CheckpointMismatchError
    from rstream.runtime.trace import RecordTrace, TraceError


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rstream' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "Accumulator",
    "BatchProgress",
    "Broker",
    "BrokerError",
    "BrokerPathError",
    "CheckpointMismatchError",
    "DslError",
    "EmbeddedBroker",
    "GroupedStream",
    "InvalidTopicNameError",
    "JobError",
    "JobProperties",
    "JobTimeoutError",
    "JsonDeserializer",
    "JsonSerializer",
    "Message",
    "ProcessingError",
    "QueueProgress",
    "RStream",
    "RStreamError",
    "RawDeserializer",
    "RawSerializer",
    "RecordError",
    "RocketMQStream",
    "SessionWindow",
    "SlidingWindow",
    "SerdeError",
    "StateError",
    "StateStore",
    "StreamBuilder",
    "TextDeserializer",
    "TextSerializer",
    "Time",
    "TimeType",
    "Topology",
    "TumblingWindow",
    "UnhashableKeyError",
    "UnknownTopicError",
    "WindowError",
    "WindowKey",
    "WindowStream",
    "JoinedStream",
    "get_spark",
    "stop_spark",
    "RecordTrace",
    "TraceError",
    "__version__",
]
