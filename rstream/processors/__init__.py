"""Processors: the real work of each operator, built per queue (the third build)."""

from rstream.processors.base import ProcessingError, Processor, RecordError, StreamContext, UnhashableKeyError
from rstream.processors.fold import Accumulator
from rstream.processors.late import LateRecord
from rstream.processors.process import KeyedProcessFunction, ProcessContext, StateValueError

__all__ = ["Accumulator", "KeyedProcessFunction", "LateRecord", "ProcessContext", "ProcessingError", "Processor",
           "RecordError", "StateValueError", "StreamContext", "UnhashableKeyError"]
