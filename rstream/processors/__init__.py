"""Processors: the real work of each operator, built per queue (the third build)."""

from rstream.processors.aggregate import Accumulator
from rstream.processors.base import ProcessingError, Processor, RecordError, StreamContext, UnhashableKeyError

__all__ = ["Accumulator", "ProcessingError", "Processor", "RecordError", "StreamContext", "UnhashableKeyError"]
