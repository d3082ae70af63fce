"""rstream: RocketMQ Streams (RIP-58) in Python, executed on PySpark, made for notebooks.

    from rstream import StreamBuilder, RocketMQStream, EmbeddedBroker, TextDeserializer
"""

from typing import TYPE_CHECKING

from rstream.broker import (
    Broker,
    BrokerError,
    BrokerPathError,
    EmbeddedBroker,
    InvalidTopicNameError,
    Message,
    UnknownTopicError,
)
from rstream.errors import RStreamError
from rstream.lazy import lazy_getattr
from rstream.runtime import RUNTIME_NAMES
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
from rstream.time import (
    SessionWindow,
    SlidingWindow,
    Time,
    TimeType,
    TumblingWindow,
    WindowError,
    WindowKey,
    WindowResult,
)

__version__ = "0.1.0"

#: Names loaded on first use (``rstream.lazy``): those that need Spark to run, and the DSL, the
#: topology, the processors and the state store, so a process that only needs the broker and the
#: Spark source (the planner process Spark starts for every streaming query) does not load them.
_LAZY = {
    **RUNTIME_NAMES, "RecordTrace": "rstream.runtime.trace", "TraceError": "rstream.runtime.trace",
    "Explanation": "rstream.runtime.explain", "ExplainError": "rstream.runtime.explain",
    "WhatIf": "rstream.runtime.what_if", "WhatIfError": "rstream.runtime.what_if",
    **dict.fromkeys(["DslError", "GroupedStream", "JoinedStream", "JoinResultStream", "RStream", "RTable", "StreamBuilder",
                     "TableJoinedStream", "WindowResultStream", "WindowStream"], "rstream.dsl"),
    "Topology": "rstream.graph",
    **dict.fromkeys(["Accumulator", "KeyedProcessFunction", "LateRecord", "ProcessingError", "RecordError",
                     "StateValueError", "UnhashableKeyError"], "rstream.processors"),
    **dict.fromkeys(["StateError", "StateStore"], "rstream.state"),
}
__getattr__ = lazy_getattr("rstream", _LAZY, globals())

if TYPE_CHECKING:
    from rstream.dsl import (
        DslError,
        GroupedStream,
        JoinedStream,
        JoinResultStream,
        RStream,
        RTable,
        StreamBuilder,
        TableJoinedStream,
        WindowResultStream,
        WindowStream,
    )
    from rstream.graph import Topology
    from rstream.processors import (
        Accumulator,
        KeyedProcessFunction,
        LateRecord,
        ProcessingError,
        RecordError,
        StateValueError,
        UnhashableKeyError,
    )
    from rstream.runtime import (
        BatchProgress,
        CheckpointMismatchError,
        JobTimeoutError,
        QueueProgress,
        RocketMQStream,
        get_spark,
        stop_spark,
    )
    from rstream.runtime.explain import ExplainError, Explanation
    from rstream.runtime.trace import RecordTrace, TraceError
    from rstream.runtime.what_if import WhatIf, WhatIfError
    from rstream.state import StateError, StateStore


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
    "KeyedProcessFunction",
    "LateRecord",
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
    "StateValueError",
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
    "WindowResult",
    "WindowResultStream",
    "WindowStream",
    "JoinedStream",
    "JoinResultStream",
    "RTable",
    "TableJoinedStream",
    "get_spark",
    "stop_spark",
    "RecordTrace",
    "TraceError",
    "Explanation",
    "ExplainError",
    "WhatIf",
    "WhatIfError",
    "__version__",
]
