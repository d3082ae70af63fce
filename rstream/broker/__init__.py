"""Brokers: the RocketMQ-shaped log rstream reads from and writes to."""

from rstream.broker.base import (
    Broker,
    BrokerError,
    BrokerPathError,
    CommitTag,
    InvalidTopicNameError,
    Message,
    RecordBlock,
    SendResult,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    validate_topic_name,
)
from rstream.broker.embedded import EmbeddedBroker

__all__ = [
    "Broker",
    "BrokerError",
    "BrokerPathError",
    "CommitTag",
    "EmbeddedBroker",
    "InvalidTopicNameError",
    "Message",
    "RecordBlock",
    "SendResult",
    "TopicExistsError",
    "TopicInfo",
    "UnknownTopicError",
    "validate_topic_name",
]
