"""Brokers: the RocketMQ-shaped log rstream reads from and writes to.

- ``base``: the contract every broker meets (``Broker``) and the types it speaks in;
- ``batch``: record batches, and the registry of batch formats a broker may store them in;
- ``embedded``: the default broker, one SQLite file (a new broker is a new module beside it).
"""

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
