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
- It receives every message of a topic rstream writes, the records of an attempt that lost included (rare:
  a task that died between its write and its commit); a job's sink made with ``visible="on_commit"`` shows it
  committed records only, each once (``rstream.rocketmq.visible``).
- A ``SimpleConsumer`` receives at least once: a message not acknowledged within its invisible duration
  comes back. ``consume`` acknowledges each one and drops repeats (by message id).
- A ``SimpleConsumer`` receives by pop, which a broker refuses unless its timer wheel is on
  (``timerWheelEnable=true``: RocketMQ's default and ``LocalRocketMQ``'s, unless
  ``broker_conf={"timerWheelEnable": "false"}`` turned it off).
- A new consumer group starts at the beginning of a queue only while the queue's first message is still
  in the broker's memory (``initPopOffsetByCheckMsgInMem``); otherwise at the queue's end.
- A receive right after a consumer's ``startup()`` may fail with the proxy's NullPointerException
  ("settings is null"): the proxy has not registered the consumer yet. ``consume`` tries again.
- A cluster with authentication on: ``access_key`` and ``secret_key`` go to the client's ``Credentials``
  (it signs each gRPC call, ``MQv2-HMAC-SHA1``). The client reports refused credentials as "failed to fetch
  topic route" and logs the proxy's answer (code 40100); these functions read it back from the log.
- TLS (``tls=True``): the client trusts the system's CAs only (``grpc.ssl_channel_credentials()``); a
  proxy whose certificate a private CA signed (``LocalRocketMQ(tls=True)``'s) is trusted only if gRPC's
  ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` names that CA's file before the process's first TLS connection
  (gRPC reads its roots once per process). An untrusted certificate is also reported as "failed to fetch
  topic route"; these functions read the cause back from the log.
- The proxy long-polls at least 5 s (``grpcClientConsumerMinLongPollingTimeoutMillis``), so a receive on
  a drained topic returns after about that long.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
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


#: Where the official client logs (``rocketmq/v5/log/log_config.py``): the proxy's refusals are only there.
_CLIENT_LOG = Path("~/logs/rocketmq_python/rocketmq_client.log").expanduser()
_UNAUTHORIZED = re.compile(r"\b40100, (.+)")  # the proxy's Code.UNAUTHORIZED, then its message


class OfficialClientError(RocketMQError):
    """The official client could not reach the proxy, found no such topic, or received too few messages."""


def produce(endpoint: str, topic: str, bodies: Iterable[str | bytes], *, keys: Sequence[str | None] | None = None,
            tag: str | None = None, properties: Mapping[str, str] | None = None, access_key: str | None = None,
            secret_key: str | None = None, tls: bool = False) -> list[Any]:
    """Send each of ``bodies`` to ``topic`` as one NORMAL message, in order; their ``SendReceipt``s.

    ``keys``: one key per body (``None``: none); ``tag``: every message's tag; ``properties``: user
    properties of every message. The official client places messages round robin over the queues.
    ``access_key``, ``secret_key``: a user of a cluster with authentication on; ``tls``: over TLS (the
    proxy's certificate checked against the system's CAs, see the module's docstring).
    """
    from rocketmq import Message, Producer

    payloads = [b.encode() if isinstance(b, str) else b for b in bodies]
    key_list = list(keys) if keys is not None else [None] * len(payloads)
    if len(key_list) != len(payloads):
        raise OfficialClientError(f"give one key per body: {len(payloads)} bodies, {len(key_list)} keys")
    producer = Producer(_configuration(endpoint, access_key, secret_key), (topic,), tls_enable=tls)
    logged = _log_size()
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
        raise _explained(exc, endpoint, topic, logged, access_key) from exc
    finally:
        producer.shutdown()


def consume(endpoint: str, topic: str, group: str, n: int, *, timeout: float = 60.0, tag: str = "*",
            access_key: str | None = None, secret_key: str | None = None, tls: bool = False) -> list[Any]:
    """Receive ``topic``'s messages as consumer group ``group`` until ``n`` distinct ones came.

    Each is acknowledged, so the group moves past it. Returns them in the order received (at least
    ``n``: a receive may bring more), as the official ``rocketmq.Message`` (``body``, ``keys``, ``tag``,
    ``properties``, ``message_id``). ``tag``: receive only messages with this tag (``"*"``: all).
    Raises ``OfficialClientError`` when fewer than ``n`` came within ``timeout`` seconds.
    ``access_key``, ``secret_key`` and ``tls`` as ``produce``'s.
    """
    from rocketmq import FilterExpression, SimpleConsumer

    consumer = SimpleConsumer(_configuration(endpoint, access_key, secret_key), group, {topic: FilterExpression(tag)},
                              await_duration=AWAIT_S, tls_enable=tls)
    logged = _log_size()
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
        raise _explained(exc, endpoint, topic, logged, access_key) from exc
    finally:
        consumer.shutdown()
    return list(received.values())


def _configuration(endpoint: str, access_key: str | None = None, secret_key: str | None = None) -> Any:
    from rocketmq import ClientConfiguration, Credentials

    host, _, port = endpoint.rpartition(":") if isinstance(endpoint, str) else ("", "", "")
    try:  # the client itself starts without complaint and fails later, for another reason
        socket.create_connection((host, int(port)), timeout=3).close()
    except (OSError, ValueError) as exc:
        raise OfficialClientError(
            f"cannot reach a RocketMQ proxy at {endpoint!r} ({exc}): give the proxy's gRPC endpoint 'host:port' "
            "(LocalRocketMQ().proxy, or port 8081 of a cluster's proxy), not the name server's") from None
    return ClientConfiguration(endpoint, Credentials(access_key, secret_key))


def _log_size() -> int:
    try:
        return _CLIENT_LOG.stat().st_size
    except OSError:
        return 0


def _logged(since: int) -> str:
    """What the client logged after ``since`` (the log's size when the call began)."""
    try:
        with open(_CLIENT_LOG, "rb") as log:
            log.seek(since if since <= _log_size() else 0)
            return log.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return ""


def _explained(exc: Exception, endpoint: str, topic: str, logged: int = 0,
               access_key: str | None = None) -> Exception:
    who = f"user {access_key!r}" if access_key else "a client without credentials"
    log = "" if type(exc).__name__ == "UnauthorizedException" else _logged(logged)
    found = _UNAUTHORIZED.findall(log)
    refusal = str(exc) if type(exc).__name__ == "UnauthorizedException" else found[-1].strip() if found else None
    if "CERTIFICATE_VERIFY_FAILED" in log:
        return OfficialClientError(
            f"the TLS certificate of the proxy at {endpoint} is not trusted: the official client trusts the system's "
            "CAs, or the file GRPC_DEFAULT_SSL_ROOTS_FILE_PATH names if set before the process's first TLS "
            "connection (LocalRocketMQ(tls=True).tls_ca is the CA of a local one)")
    if refusal and "has no permission" in refusal:
        return OfficialClientError(
            f"the proxy at {endpoint} refused {who} ({refusal}): grant the user that permission (mqadmin updateAcl, "
            "or LocalRocketMQ.add_user)")
    if refusal:
        return OfficialClientError(
            f"the proxy at {endpoint} refused the credentials of {who} ({refusal}): authentication is on there; give "
            "access_key and secret_key of one of its users (LocalRocketMQ(acl=True).credentials)")
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
