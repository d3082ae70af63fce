"""The fluent DSL: ``StreamBuilder``, ``RStream``, ``GroupedStream``."""

from rstream.dsl.builder import StreamBuilder
from rstream.dsl.streams import (
    DslError,
    GroupedStream,
    JoinedStream,
    JoinResultStream,
    RStream,
    RTable,
    TableJoinedStream,
    WindowResultStream,
    WindowStream,
)

__all__ = [
    "DslError",
    "GroupedStream",
    "JoinedStream",
    "JoinResultStream",
    "RStream",
    "RTable",
    "StreamBuilder",
    "TableJoinedStream",
    "WindowResultStream",
    "WindowStream",
]
