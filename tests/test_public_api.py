"""Pins the public API: renaming or dropping one of these breaks users' notebooks."""

import rstream

PUBLIC = {
    "Accumulator", "BatchProgress", "Broker", "BrokerError", "BrokerPathError", "CheckpointMismatchError",
    "DslError", "EmbeddedBroker", "GroupedStream", "InvalidTopicNameError", "JobError", "JobProperties",
    "JobTimeoutError", "JsonDeserializer", "JsonSerializer", "Message", "ProcessingError", "QueueProgress",
    "RStream", "RStreamError", "RawDeserializer", "RawSerializer", "RecordError", "RocketMQStream",
    "SerdeError", "StateError", "StateStore", "StreamBuilder", "TextDeserializer", "TextSerializer",
    "Topology", "UnhashableKeyError", "UnknownTopicError", "get_spark", "__version__",
    "SessionWindow", "SlidingWindow", "Time", "TimeType", "TumblingWindow", "WindowError", "WindowKey",
    "WindowStream", "JoinedStream", "RTable", "TableJoinedStream", "stop_spark", "RecordTrace", "TraceError", "KeyedProcessFunction",
    "StateValueError", "LateRecord", "WindowResult", "WindowResultStream", "JoinResultStream",
    "Explanation", "ExplainError", "WhatIf", "WhatIfError",
}


def test_public_names_are_pinned() -> None:
    assert set(rstream.__all__) == PUBLIC
    for name in PUBLIC:
        assert hasattr(rstream, name), name


def test_every_error_derives_from_rstream_error() -> None:
    for name in rstream.__all__:
        obj = getattr(rstream, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, rstream.RStreamError), name
