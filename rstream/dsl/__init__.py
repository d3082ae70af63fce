"""The fluent DSL: ``StreamBuilder``, ``RStream``, ``GroupedStream``."""

from rstream.dsl.builder import StreamBuilder
from rstream.dsl.streams import DslError, GroupedStream, RStream

__all__ = ["DslError", "GroupedStream", "RStream", "StreamBuilder"]
