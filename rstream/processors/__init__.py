"""Processors: the real work of each operator, built per queue (the third build)."""

from rstream.processors.base import ProcessingError, Processor, RecordError, StreamContext, UnhashableKeyError
from rstream.processors.fold import Accumulator
from rstream.processors.late import LateRecord

__all__ = ["Accumulator", "LateRecord", "ProcessingError", "Processor", "RecordError", "StreamContext", "UnhashableKeyError"]
