"""The errors of ``rstream.rocketmq``: all derive from ``RocketMQError``, itself an ``RStreamError``."""

from __future__ import annotations

from rstream.errors import RStreamError


class RocketMQError(RStreamError):
    """RocketMQ could not be started, reached or used (the message says what to do)."""
