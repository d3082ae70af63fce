"""The official Apache RocketMQ Python client (``rocketmq-python-client``, gRPC through the proxy), in two calls.

rstream's topics are ordinary RocketMQ topics, so an application's own producers and consumers use them
with the official client, not with rstream. ``produce`` sends through its ``Producer``, ``consume``
receives through its ``SimpleConsumer``; both say plainly what went wrong. The official API itself is
``rocketmq.Producer`` and ``rocketmq.SimpleConsumer`` (read the two functions: a few lines each).

What to know about the client (5.1) and RocketMQ 5.3's proxy, all seen on a real cluster:

- ``endpoint`` is the proxy's gRPC address ``"host:port"`` (``LocalRocketMQ().proxy``; port 8081 of a
  cluster's proxy by default), not the name server's.
- The topic must exist first (``RocketMQBroker.create_topic``). A topic created without a
  ``message.type`` attribute, as rstream creates them, takes NORMAL messages only: the client refuses
  to send FIFO (``message_group``), delayed or transactional messages to it.
- The client reports a missing topic and an unreachable proxy alike ("failed to fetch topic route")
  and writes the cause to ``~/logs/rocketmq_python/rocketmq_client.log``; these functions say which.
- A message's ``keys`` are a set, stored space-separated in RocketMQ's ``KEYS`` property: rstream reads
  ``KEYS`` whole as the record's key, and a key holding a space comes back to the official client as
  several keys. The client stamps a message's born time in whole seconds.
- A ``SimpleConsumer`` receives at least once: a message not acknowledged within its invisible duration
  comes back. ``consume`` acknowledges each one and drops repeats (by message id).
- A ``SimpleConsumer`` receives by pop, which a broker refuses unless its timer wheel is on
  (``timerWheelEnable=true``: RocketMQ's default and ``LocalRocketMQ``'s, unless
  ``broker_conf={"timerWheelEnable": "false"}`` turned it off).
- A new consumer group starts at the beginning of a queue only while the queue's first message is still
  in the broker's memory (``initPopOffsetByCheckMsgInMem``); otherwise at the queue's end.
- A receive right after a consumer's ``startup()`` may fail with the proxy's NullPointerException
  ("settings is null"): the proxy has not registered the consumer yet. ``consume`` tries again.
- The proxy long-polls at least 5 s (``grpcClientConsumerMinLongPollingTimeoutMillis``), so a receive on
  a drained topic returns after about that long.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rstream.rocketmq.errors import RocketMQError

#: Seconds the proxy may wait for messages in one receive (long polling; the proxy's minimum is 5).
AWAIT_S = 5
#: Seconds a received message stays invisible to the group before it is delivered again (unless acknowledged).
INVISIBLE_S = 30
_BATCH = 32  # the most messages one receive returns (the proxy's grpcClientConsumerLongPollingBatchSize)
# What a receive may fail with for a moment: a consumer just started, whose settings the proxy has not
# registered yet (a NullPointerException in ReceiveMessageActivity), and a long poll that missed its deadline.
_TRANSIENT = ('"settings" is null', "deadline time remaining is not enough")


class OfficialClientError(RocketMQError):
    """The official client could not reach the proxy, found no such topic, or received too few messages."""


def produce(endpoint: str, topic: str, bodies: Iterable[str | bytes], *, keys: Sequence[str | None] | None = None,
            tag: str | None = None, properties: Mapping[str, str] | None = None) -> list[Any]:
    """Send each of ``bodies`` to ``topic`` as one NORMAL message, in order; their ``SendReceipt``s.

    ``keys``: one key per body (``None``: none); ``tag``: every message's tag; ``properties``: user
    properties of every message. The official client places messages round robin over the queues.
    """
    from rocketmq import Message, Producer

    payloads = [b.encode() if isinstance(b, str) else b for b in bodies]
    key_list = list(keys) if keys is not None else [None] * len(payloads)
    if len(key_list) != len(payloads):
        raise OfficialClientError(f"give one key per body: {len(payloads)} bodies, {len(key_list)} keys")
    producer = Producer(_configuration(endpoint), (topic,))
    producer.startup()
    try:
        receipts = []
        for body, key in zip(payloads, key_list):
            message = Message()
            message.topic = topic
            message.body = body
            if key is not None:
                message.keys = key
            if tag is not None:
                message.tag = tag
            for name, value in (properties or {}).items():
                message.add_property(name, value)
            receipts.append(producer.send(message))
        return receipts
    except Exception as exc:
        raise _explained(exc, endpoint, topic) from exc
    finally:
        producer.shutdown()


def consume(endpoint: str, topic: str, group: str, n: int, *, timeout: float = 60.0, tag: str = "*") -> list[Any]:
    """Receive ``topic``'s messages as consumer group ``group`` until ``n`` distinct ones came.

    Each is acknowledged, so the group moves past it. Returns them in the order received (at least
    ``n``: a receive may bring more), as the official ``rocketmq.Message`` (``body``, ``keys``, ``tag``,
    ``properties``, ``message_id``). ``tag``: receive only messages with this tag (``"*"``: all).
    Raises ``OfficialClientError`` when fewer than ``n`` came within ``timeout`` seconds.
    """
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(_configuration(endpoint), group, {topic: FilterExpression(tag)}, await_duration=AWAIT_S)
    consumer.startup()
    received: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(received) < n:
            if time.monotonic() > deadline:
                raise OfficialClientError(
                    f"consumer group {group!r} received {len(received)} of {n} messages of topic {topic!r} within "
                    f"{timeout:g} s. Did that many get sent? A new group starts at a queue's end once the queue's "
                    "first message left the broker's memory: use a group that consumed the topic before")
            try:
                batch = consumer.receive(_BATCH, INVISIBLE_S)
            except Exception as exc:
                if not any(text in str(exc) for text in _TRANSIENT):
                    raise
                time.sleep(0.2)
                continue
            for message in batch:
                consumer.ack(message)
                received.setdefault(message.message_id, message)
    except OfficialClientError:
        raise
    except Exception as exc:
        raise _explained(exc, endpoint, topic) from exc
    finally:
        consumer.shutdown()
    return list(received.values())


def _configuration(endpoint: str) -> Any:
    from rocketmq import ClientConfiguration, Credentials

    host, _, port = endpoint.rpartition(":") if isinstance(endpoint, str) else ("", "", "")
    try:  # the client itself starts without complaint and fails later, for another reason
        socket.create_connection((host, int(port)), timeout=3).close()
    except (OSError, ValueError) as exc:
        raise OfficialClientError(
            f"cannot reach a RocketMQ proxy at {endpoint!r} ({exc}): give the proxy's gRPC endpoint 'host:port' "
            "(LocalRocketMQ().proxy, or port 8081 of a cluster's proxy), not the name server's") from None
    return ClientConfiguration(endpoint, Credentials())


def _explained(exc: Exception, endpoint: str, topic: str) -> Exception:
    if "timerWheelEnable is false" in str(exc):
        return OfficialClientError(
            f"the broker behind {endpoint} refuses to receive: a SimpleConsumer receives by pop, which RocketMQ "
            "allows only with its timer wheel on (it brings back unacknowledged messages). Start the broker with "
            "timerWheelEnable=true (LocalRocketMQ's default; do not pass broker_conf={'timerWheelEnable': 'false'})")
    if "failed to fetch topic" in str(exc):
        return OfficialClientError(
            f"found no route to topic {topic!r} through {endpoint}: the topic does not exist (create it first: "
            f"RocketMQBroker(namesrv).create_topic({topic!r})), or {endpoint} is not a RocketMQ proxy's gRPC endpoint "
            "(LocalRocketMQ().proxy is one; a name server's address is not)")
    return exc
