"""The fluent DSL: ``StreamBuilder``, ``RStream``, ``GroupedStream``."""

from rstream.dsl.builder import StreamBuilder
from rstream.dsl.streams import DslError, GroupedStream, JoinedStream, RStream, WindowStream

__all__ = ["DslError", "GroupedStream", "JoinedStream", "RStream", "StreamBuilder", "WindowStream"]
