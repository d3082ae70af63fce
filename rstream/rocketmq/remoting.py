"""The subset of RocketMQ's remoting protocol rstream speaks: TCP to a name server or a broker,
one JSON header and a body per frame.

Read against apache/rocketmq 5.x: ``RemotingCommand`` (the frame), ``RequestCode`` and
``ResponseCode`` (the numbers below), ``MessageDecoder`` (a stored message's layout, what a pull
returns; a batch's layout, what a batch send carries) and the request headers of each call.

A frame is ``length(4) | serialize type(1) + header length(3) | header JSON | body``, big endian.
Requests are sent one at a time per connection (a lock), which is all rstream needs: a broker
object per process, a few calls per task.

It trusts nothing it reads: a frame longer than RocketMQ's own bound (``MAX_FRAME``) is refused
before it is read, a whole answer must come within the request's timeout, a stored message's sizes
must fit what came, and compressed bodies inflate within a bound (``MAX_INFLATED``); anything else
is a ``ProtocolError`` (a ``RemotingError``), never a hang or an allocation the server chose.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import json
import os
import re
import select
import socket
import ssl
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

from rstream.broker.base import BrokerError

# -- request and response codes (RequestCode.java, ResponseCode.java) ------------------------------
SEND_MESSAGE = 10
PULL_MESSAGE = 11
HEART_BEAT = 34
END_TRANSACTION = 37
CHECK_TRANSACTION_STATE = 39  # a broker's request to a producer of a half message's group: commit it or not?
QUERY_CONSUMER_OFFSET = 14
UPDATE_CONSUMER_OFFSET = 15
UPDATE_AND_CREATE_TOPIC = 17
GET_ALL_TOPIC_CONFIG = 21
UPDATE_BROKER_CONFIG = 25
GET_BROKER_CONFIG = 26
SEARCH_OFFSET_BY_TIMESTAMP = 29
GET_MAX_OFFSET = 30
GET_MIN_OFFSET = 31
GET_ROUTEINFO_BY_TOPIC = 105
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
GET_CONSUME_STATS = 208
GET_TOPIC_STATS_INFO = 202
GET_BROKER_CLUSTER_INFO = 106
DELETE_TOPIC_IN_BROKER = 215
DELETE_TOPIC_IN_NAMESRV = 216
SEND_BATCH_MESSAGE = 320
GET_TOPIC_CONFIG = 351
AUTH_CREATE_USER = 3001
AUTH_UPDATE_USER = 3002
AUTH_CREATE_ACL = 3006

SUCCESS = 0
SYSTEM_BUSY = 2  # flow control: the server refused the request before running it (RemotingSysResponseCode)
NO_PERMISSION = 16  # authentication or authorization refused, or a topic or broker not writable/readable
TOPIC_NOT_EXIST = 17
PULL_NOT_FOUND = 19
PULL_RETRY_IMMEDIATELY = 20
PULL_OFFSET_MOVED = 21
QUERY_NOT_FOUND = 22
SUBSCRIPTION_GROUP_NOT_EXIST = 26
ILLEGAL_OPERATION = 604  # an END_TRANSACTION after the half message's check immunity: only a check-back ends it now

_PYTHON = "PYTHON"  # LanguageCode
_VERSION = 475  # MQVersion of 5.3.x: what the broker sees as the client's version
_RESPONSE = 1  # flag bit 0: a response (RemotingCommand.RPC_TYPE)
_ONEWAY = 2

# -- message flags (MessageSysFlag.java, PullSysFlag.java) -----------------------------------------
_COMPRESSED = 0x1
_BORNHOST_V6 = 0x1 << 4
_STOREHOST_V6 = 0x1 << 5
_COMPRESSION_TYPE = 0x7 << 8
_ZLIB = 0x3 << 8
#: A half message's system flag, and what ``END_TRANSACTION`` says of it (``MessageSysFlag``'s transaction types).
TRANSACTION_PREPARED = 0x1 << 2
TRANSACTION_COMMIT = 0x2 << 2
TRANSACTION_ROLLBACK = 0x3 << 2
_PULL_SUBSCRIPTION = 0x4
_MAGIC_V1 = -626843481  # MessageDecoder.MESSAGE_MAGIC_CODE: a topic's length is a byte
_MAGIC_V2 = -626843477  # MessageVersion.MESSAGE_VERSION_V2: a topic's length is a short

#: The longest frame rstream reads, its 4-byte length included: RocketMQ's own bound on what its
#: servers and Java clients read (``NettyDecoder``'s ``com.rocketmq.remoting.frameMaxLength``, 16 MB by
#: default). A pull reply stays below it (``maxTransferBytesOnMessageInMemory``: 256 KB by default,
#: 8 MB on LocalRocketMQ); a server that says a frame is longer is not speaking this protocol.
MAX_FRAME = 16 * 1024 * 1024
#: The most bytes the compressed bodies of one pull reply may inflate to, together: a zlib body can
#: inflate a thousandfold, and a pull reply holds up to 16 MB of them.
MAX_INFLATED = 256 * 1024 * 1024

#: The property names RocketMQ itself sets (MessageConst): not a client's headers.
SYSTEM_PROPERTIES = frozenset({
    "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP",
    "MIN_OFFSET", "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
    "MQ2_FLAG", "RECONSUME_TIME", "MSG_REGION", "TRACE_ON", "UNIQ_KEY", "MAX_RECONSUME_TIMES",
    "CONSUME_START_TIME", "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET",
    "DUP_INFO", "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET", "__STARTDELIVERTIME", "__SHARDINGKEY", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
    "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_DEL_UNIQKEY", "TIMER_DELAY_LEVEL", "TIMER_DELIVER_MS",
    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "bname", "INNER_NUM", "INNER_BASE", "__BORNHOST",
    "TRACE_CONTEXT", "CRC32", "TRAN_PREPARED", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET", "LMQ_QUEUE_ID", "LMQ_QUEUE_OFFSET", "__MESSAGE_CONVERT",
    "BORN_TIMESTAMP",  # the proxy stores it on every message a gRPC client (the official Python one) sends
    "__transactionId__",  # a transactional message's id (TransactionalMessageUtil.TRANSACTION_ID), kept when it commits
})

_NAME, _SEP = "\x01", "\x02"  # MessageDecoder.NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
_UNQUOTED_KEY = re.compile(r'([{,])\s*(-?\d+)\s*:')  # fastjson writes a Map<Long, _>'s keys unquoted
# a TopicStatsTable's entry: fastjson writes a Map<MessageQueue, TopicOffset>'s keys as objects
_QUEUE_STATS = re.compile(r'"queueId":(\d+)[^{}]*\}:(\{[^{}]*\})')


#: Requests this process sent, by request code (a send again after a busy refusal or a broken
#: connection counts once more): what the bench and the tests count to say how many round trips
#: an operation makes. Never reset here; take a copy before and subtract.
REQUESTS: collections.Counter[int] = collections.Counter()


class RemotingError(BrokerError):
    """A RocketMQ server answered a request with an error code, or could not be reached."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class ProtocolError(RemotingError):
    """A server sent bytes that are not a RocketMQ remoting frame or stored message that rstream can
    read (a frame too long, a header that is not the JSON RocketMQ writes, a message whose sizes do
    not fit): the connection is closed; the request is not sent again."""


#: A request as ``Connection.pipeline`` takes it: (request code, header fields, body).
Request = tuple[int, Mapping[str, Any], bytes]


@dataclass
class Command:
    """One frame: a request or a response."""

    code: int
    ext: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    remark: str | None = None
    opaque: int = 0
    flag: int = 0

    def int_field(self, name: str, default: int | None = None) -> int:
        """The reply's header field ``name`` as an int (``default`` when missing; without one, a
        missing field is a ``ProtocolError``, as is one that is not a number)."""
        text = self.ext.get(name)
        if text is None and default is not None:
            return default
        try:
            return int(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise ProtocolError(f"RocketMQ answered request code {self.code} with header field {name!r} = "
                                f"{text!r}, not a number") from None


def parse_json(body: bytes) -> Any:
    """A body RocketMQ serialized with fastjson (which leaves numeric map keys unquoted)."""
    try:
        text = body.decode("utf-8")
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(_UNQUOTED_KEY.sub(r'\1"\2":', text))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a RocketMQ reply's body is not JSON ({exc}): {body[:120]!r}") from None


# -- security: signed requests and TLS -----------------------------------------------------------
@dataclass(frozen=True)
class Credentials:
    """An access key and its secret, with which every request is signed (``sign``)."""

    access_key: str
    secret_key: str = field(repr=False)
    security_token: str | None = field(default=None, repr=False)


def sign(ext: Mapping[str, str], body: bytes, credentials: Credentials) -> dict[str, str]:
    """``ext`` with ``AccessKey``, ``SecurityToken`` (if any) and ``Signature`` added, as RocketMQ's
    own clients sign a remoting request.

    Read against apache/rocketmq 5.3.3: ``AclClientRPCHook.doBeforeRequest`` (client module) adds
    ``AccessKey`` (and ``SecurityToken``) to the request's ext fields, then signs the values of all
    ext fields in key order (``TreeMap``), ``Signature`` left out, followed by the body
    (``AclUtils.combineRequestContent``), with HmacSHA1 keyed by the secret key, base64
    (``AclSigner.calSignature``, UTF-8). The broker's authentication 2.0 checks exactly that:
    ``DefaultAuthenticationContextBuilder.build(ChannelHandlerContext, RemotingCommand)`` (auth
    module) makes the same content from the ext fields it received, and
    ``DefaultAuthenticationHandler.doAuthenticate`` recomputes the signature with the user's password
    (its secret key) and compares. ACL 1.0 brokers (5.2 and before, ``aclEnable=true``) build the same
    content (read in 5.2.0's ``PlainAccessResource.parse``, checked by ``PlainPermissionManager``); their
    refusals' remarks differ, and rstream's mapping of them (``refused``) was written for 5.3's.
    """
    fields = dict(ext)
    fields.pop("Signature", None)
    fields["AccessKey"] = credentials.access_key
    if credentials.security_token is not None:
        fields["SecurityToken"] = credentials.security_token
    content = "".join(fields[k] for k in sorted(fields)).encode() + body  # keys are ASCII: Java's order
    digest = hmac.new(credentials.secret_key.encode(), content, hashlib.sha1).digest()
    fields["Signature"] = base64.b64encode(digest).decode()
    return fields


#: What ``tls=`` takes: False (plain TCP), True (TLS, the server's certificate checked against the
#: system's CAs), a CA file's path (checked against that CA: a self-signed cluster's), or an
#: ``ssl.SSLContext`` made by the caller.
TLSOption = Union[bool, str, "os.PathLike[str]", ssl.SSLContext, None]


def tls_context(tls: TLSOption) -> ssl.SSLContext | None:
    """The ``ssl.SSLContext`` that ``tls`` asks for (see ``TLSOption``); None for plain TCP."""
    if tls is None or tls is False:
        return None
    if isinstance(tls, ssl.SSLContext):
        return tls
    if tls is True:
        return ssl.create_default_context()
    if isinstance(tls, (str, os.PathLike)):
        try:
            return ssl.create_default_context(cafile=os.fspath(tls))
        except (OSError, ssl.SSLError) as exc:
            raise RemotingError(f"tls={os.fspath(tls)!r} is not a CA certificate file it can read ({exc}): give the "
                                "PEM file of the CA that signed the cluster's certificates "
                                "(LocalRocketMQ(tls=True).tls_ca), True for the system's CAs, or an ssl.SSLContext") from None
    raise RemotingError(f"tls={tls!r}: give False, True (the system's CAs), a CA file's path or an ssl.SSLContext")


class CredentialsRefusedError(RemotingError):
    """A broker with authentication on refused the request's credentials (none, an unknown access
    key, a wrong secret key, a disabled user)."""


class PermissionDeniedError(RemotingError):
    """A broker refused the request for want of a permission: ``permission`` (``"PUB"``, ``"SUB"``,
    ...) on ``resource`` (``"topic 'orders'"``, ``"group 'rstream-reader'"``)."""

    def __init__(self, message: str, code: int | None, resource: str, permission: str) -> None:
        super().__init__(message, code)
        self.resource, self.permission = resource, permission


# What each request needs under RocketMQ 5.3.3's authorization (ACL 2.0): the actions of
# DefaultAuthorizationContextBuilder.build (pulls, sends, consumer offsets), else those of the request
# header's @RocketMQAction (GetMaxOffsetRequestHeader: Get, CreateTopicRequestHeader: Create, ...).
# A policy grants a request when it allows any one of them (PolicyEntry.isMatchAction).
_NEEDS: dict[int, tuple[str, str]] = {  # request code -> (permission, what the request does)
    SEND_MESSAGE: ("PUB", "send"), SEND_BATCH_MESSAGE: ("PUB", "send"), PULL_MESSAGE: ("SUB", "pull"),
    QUERY_CONSUMER_OFFSET: ("SUB or GET", "read a consumer offset"),
    UPDATE_CONSUMER_OFFSET: ("SUB or UPDATE", "commit a consumer offset"),
    GET_MAX_OFFSET: ("GET", "read a queue's end"), GET_MIN_OFFSET: ("GET", "read a queue's start"),
    SEARCH_OFFSET_BY_TIMESTAMP: ("GET", "search an offset by time"),
    GET_TOPIC_STATS_INFO: ("GET", "read a topic's offsets"), GET_TOPIC_CONFIG: ("GET", "read a topic's config"),
    UPDATE_AND_CREATE_TOPIC: ("CREATE", "create a topic"), DELETE_TOPIC_IN_BROKER: ("DELETE", "delete a topic"),
    GET_ALL_TOPIC_CONFIG: ("LIST", "list topics"),
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: ("CREATE", "create a consumer group"),
    AUTH_CREATE_USER: ("UPDATE", "create a user"), AUTH_UPDATE_USER: ("UPDATE", "update a user"),
    AUTH_CREATE_ACL: ("UPDATE", "create an ACL"),
}
# DefaultAuthenticationHandler, AbstractAuthenticationStrategy, UserAuthorizationHandler (5.3.3)
_AUTHENTICATION = re.compile(r"check signature failed|User:\S* is not found|User:\S* not found|username cannot be "
                             r"null|is disabled|Authentication failed|signature", re.IGNORECASE)
# AclAuthorizationHandler.throwException: "{subject} has no permission to access {resource} from {ip}, ..."
_DENIED = re.compile(r"has no permission to access (\w+):(\S*) from")
# a topic's, group's or broker's own permission (PullMessageProcessor, AbstractSendMessageProcessor)
_FORBIDDEN = re.compile(r"(?i)(topic|broker|group)\[([^\]]*)\]|subscription (group) no permission, (\S+)")


def refused(addr: str, code: int, ext: Mapping[str, Any], reply: Command,
            credentials: Credentials | None, body: bytes = b"") -> RemotingError:
    """The error for a request refused with ``NO_PERMISSION``: ``CredentialsRefusedError`` when the
    broker did not take the credentials, else ``PermissionDeniedError`` naming what was missing."""
    remark = reply.remark or ""
    who = f"user {credentials.access_key!r}" if credentials else "a client without credentials"
    if _AUTHENTICATION.search(remark) and not _DENIED.search(remark):
        fix = ("check access_key and secret_key (RocketMQBroker(namesrv, access_key=..., secret_key=...)): the "
               "broker knows no such user, or its secret differs" if credentials else
               "give RocketMQBroker(namesrv, access_key=..., secret_key=...) a user of the cluster "
               "(mqadmin createUser on a cluster with authenticationEnabled=true)")
        return CredentialsRefusedError(f"RocketMQ at {addr} refused the credentials of {who} ({remark}): {fix}",
                                       reply.code)
    permission, action = _NEEDS.get(code, ("a permission", f"request {code}"))
    found = _DENIED.search(remark) or _FORBIDDEN.search(remark)
    if found:
        kind, name = [g for g in found.groups() if g is not None]
        kind = kind.title()
    elif code in (AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_CREATE_ACL):
        kind, name = "Cluster", "(a super user's)"
    elif code == UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        found_name = re.search(rb'"groupName"\s*:\s*"([^"]*)"', body)
        kind, name = "Group", found_name.group(1).decode("utf-8", "replace") if found_name else "?"
    elif "consumerGroup" in ext:
        kind, name = "Group", str(ext["consumerGroup"])
    else:
        kind, name = "Topic", str(ext.get("topic", ext.get("b", "")))
    resource = f"{kind.lower()} {name!r}"
    grant = (f"; grant it: mqadmin updateAcl -b {addr} -s User:{credentials.access_key} -r {kind}:{name} "
             f"-a {permission.split(' or ')[0].title()} -d Allow (createAcl if the user has no ACL yet)"
             if credentials and _DENIED.search(remark) and kind in ("Topic", "Group") else "")
    return PermissionDeniedError(f"RocketMQ at {addr} refused {who} permission {permission} on {resource}, needed to "
                                 f"{action} ({remark or 'no remark'}){grant}", reply.code, resource, permission)


#: Requests a connection may send again after the connection broke mid-way: reads and settings.
#: A send is not among them: whether the broker stored it is unknown (``OutcomeUnknownError``).
_SENDS = frozenset({SEND_MESSAGE, SEND_BATCH_MESSAGE})


class OutcomeUnknownError(RemotingError):
    """A send whose connection broke after the request left: the broker may or may not have stored it."""


class Connection:
    """A TCP connection to one RocketMQ server (``"host:port"``), reconnected when it breaks.

    While the server cannot be reached (a broker restarting), a request waits and tries again for
    up to ``reconnect_s`` seconds; a send whose connection broke after it left raises
    ``OutcomeUnknownError`` unless the caller says sending it twice is harmless (``repeatable``).
    A request the server refused as busy (``SYSTEM_BUSY``: RocketMQ's flow control, e.g. a send
    that waited more than 200 ms in the broker's queue on a loaded machine) was never run, so it is
    sent again after a pause, for up to ``reconnect_s`` seconds too, as RocketMQ's own producer does.

    ``credentials``: every request is signed with them (``sign``); ``tls``: see ``TLSOption``. A
    server that closes three fresh connections in a row without a word (what a RocketMQ server in
    TLS enforcing mode does to plain TCP, and one with TLS disabled to TLS) is an error at once.
    """

    def __init__(self, addr: str, timeout: float = 10.0, reconnect_s: float = 60.0,
                 credentials: Credentials | None = None, tls: TLSOption = None) -> None:
        self.addr, self.timeout, self.reconnect_s = addr, timeout, reconnect_s
        self.credentials, self.tls = credentials, tls
        self._ssl = tls_context(tls)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._opaque = 0

    def _connect(self) -> socket.socket:
        host, port = self.addr.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl is None:
            return sock
        try:
            return self._ssl.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise RemotingError(f"the TLS certificate of RocketMQ at {self.addr} is not trusted ({exc.verify_message}): "
                                "give tls= the file of the CA that signed it (LocalRocketMQ(tls=True).tls_ca), or an "
                                "ssl.SSLContext that trusts it") from None
        except BaseException:
            sock.close()
            raise

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None

    def request(self, code: int, ext: Mapping[str, Any] | None = None, body: bytes = b"",
                timeout: float | None = None, repeatable: bool | None = None) -> Command:
        """Send a request and return its response (any code: the caller checks it)."""
        again = code not in _SENDS if repeatable is None else repeatable
        deadline = time.monotonic() + self.reconnect_s
        pause = busy_pause = 0.05
        silent = 0  # fresh connections the server closed in a row before a word
        with self._lock:
            while True:
                sent = fresh = False
                try:
                    if self._sock is not None and _closed_by_peer(self._sock):  # a restarted server: not sent yet
                        self._sock.close()
                        self._sock = None
                    if self._sock is None:
                        fresh = True
                        self._sock = self._connect()
                    self._opaque += 1
                    frame = _encode(code, ext, body, self._opaque, self.credentials)
                    REQUESTS[code] += 1
                    wait = timeout or self.timeout
                    self._sock.settimeout(wait)
                    sent = True
                    self._sock.sendall(frame)
                    answer_by = time.monotonic() + wait  # for the whole answer, however the server trickles it
                    while True:
                        reply = _read_frame(self._sock, answer_by)
                        if reply.flag & _RESPONSE and reply.opaque == self._opaque:
                            break
                    if reply.code != SYSTEM_BUSY or time.monotonic() > deadline:
                        return reply
                    time.sleep(busy_pause)  # refused before it ran (fast failure, a full queue): again
                    busy_pause = min(busy_pause * 2, 1.0)
                except ProtocolError as exc:
                    if self._sock is not None:  # the rest of what it sent cannot be read as frames
                        self._sock.close()
                        self._sock = None
                    raise ProtocolError(f"RocketMQ at {self.addr}, answering request {code}: {exc}") from None
                except OSError as exc:  # refused, reset, closed or timed out
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None
                    closed = isinstance(exc, (ConnectionResetError, ssl.SSLEOFError, _Closed))
                    silent = silent + 1 if fresh and closed else 0
                    if silent >= 3:
                        raise RemotingError(self._closes_unheard(), None) from exc
                    if sent and not again:
                        raise OutcomeUnknownError(
                            f"the connection to RocketMQ at {self.addr} broke while request {code} was under way "
                            f"({exc}): whether the broker stored it is unknown", None) from exc
                    if time.monotonic() > deadline:
                        raise RemotingError(
                            f"cannot reach RocketMQ at {self.addr} ({exc}) for {self.reconnect_s:.0f} s. Is the "
                            "name server or broker running there (LocalRocketMQ().start(), or check the "
                            "address)?", None) from exc
                    time.sleep(pause)
                    pause = min(pause * 2, 1.0)

    def pipeline(self, requests: Sequence[Request], after: Sequence[int | None] | None = None,
                 window: int = 256, oneway: bool = False) -> list[Command]:
        """Send ``requests`` without waiting for each answer (up to ``window`` unanswered at once) and
        return their answers in order (none when ``oneway``: the server answers none). ``after[i]``: the
        index of an earlier request whose answer must have come before request ``i`` is sent (None:
        none), so requests the server runs on several threads keep an order where one matters. A
        request refused as busy is sent again (before any that waits for it), as ``request`` does.

        The connection must be up or come up now (``reconnect_s``); one that breaks after the first
        request left raises ``OutcomeUnknownError`` (which of them the server ran is unknown)."""
        if not requests:
            return []
        replies: list[Command | None] = [None] * len(requests)
        pending: dict[int, int] = {}  # opaque -> request index
        out = bytearray()
        with self._lock:
            deadline = time.monotonic() + self.reconnect_s
            pause = 0.05
            while self._sock is None or _closed_by_peer(self._sock):
                try:
                    if self._sock is not None:
                        self._sock.close()
                        self._sock = None
                    self._sock = self._connect()
                except OSError as exc:
                    if time.monotonic() > deadline:
                        raise RemotingError(f"cannot reach RocketMQ at {self.addr} ({exc}) for {self.reconnect_s:.0f} s",
                                            None) from exc
                    time.sleep(pause)
                    pause = min(pause * 2, 1.0)
            sock = self._sock
            wait = self.timeout
            busy_until = time.monotonic() + self.reconnect_s

            def put(i: int) -> None:
                code, ext, body = requests[i]
                self._opaque += 1
                out.extend(_encode(code, ext, body, self._opaque, self.credentials, _ONEWAY if oneway else 0))
                REQUESTS[code] += 1
                if not oneway:
                    pending[self._opaque] = i

            def flush() -> None:
                if out:
                    sock.settimeout(wait)
                    sock.sendall(out)
                    out.clear()

            def answer() -> None:  # reads frames until one of the pending requests is answered
                flush()
                while True:
                    reply = _read_frame(sock, time.monotonic() + wait)
                    if reply.flag & _RESPONSE and reply.opaque in pending:
                        break
                i = pending.pop(reply.opaque)
                if reply.code == SYSTEM_BUSY and time.monotonic() < busy_until:
                    time.sleep(0.05)
                    put(i)  # never run: again, before whatever waits for it
                else:
                    replies[i] = reply

            try:
                for i in range(len(requests)):
                    before = after[i] if after is not None else None
                    while len(pending) >= window or (before is not None and not oneway and replies[before] is None):
                        answer()
                    put(i)
                    if len(out) >= 1 << 20:
                        flush()
                flush()
                while pending:
                    answer()
            except ProtocolError as exc:
                sock.close()
                self._sock = None
                raise ProtocolError(f"RocketMQ at {self.addr}, answering pipelined requests: {exc}") from None
            except OSError as exc:
                sock.close()
                self._sock = None
                raise OutcomeUnknownError(
                    f"the connection to RocketMQ at {self.addr} broke while {len(requests)} pipelined requests were "
                    f"under way ({exc}): which of them the broker ran is unknown", None) from exc
        return [] if oneway else [r for r in replies if r is not None]

    def _closes_unheard(self) -> str:
        if self._ssl is None:
            return (f"RocketMQ at {self.addr} closes every connection without answering, as a RocketMQ server in TLS "
                    "enforcing mode (tls.server.mode=enforcing) does to plain TCP: connect with TLS (tls=True, or "
                    "the CA file's path: RocketMQBroker(namesrv, tls=...))")
        return (f"RocketMQ at {self.addr} closes every TLS connection without answering, as a RocketMQ server with TLS "
                "disabled (tls.server.mode=disabled) does: connect without TLS (tls=False), or turn its TLS on "
                "(permissive or enforcing)")

    def call(self, code: int, ext: Mapping[str, Any] | None = None, body: bytes = b"",
             ok: Iterable[int] = (SUCCESS,), timeout: float | None = None,
             repeatable: bool | None = None) -> Command:
        """``request``, raising ``RemotingError`` unless the response's code is in ``ok``: a request
        refused for its credentials or a permission as ``CredentialsRefusedError`` or
        ``PermissionDeniedError``."""
        reply = self.request(code, ext, body, timeout, repeatable)
        if reply.code not in tuple(ok):
            if reply.code == NO_PERMISSION:
                raise refused(self.addr, code, ext or {}, reply, self.credentials, body)
            raise RemotingError(f"RocketMQ at {self.addr} refused request {code}: code {reply.code}, "
                                f"{reply.remark or 'no remark'}", reply.code)
        return reply

    def __getstate__(self) -> dict[str, Any]:
        return {"addr": self.addr, "timeout": self.timeout, "reconnect_s": self.reconnect_s,
                "credentials": self.credentials, "tls": portable_tls(self.tls)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["addr"], state["timeout"], state.get("reconnect_s", 60.0),  # type: ignore[misc]
                      state.get("credentials"), state.get("tls"))


@dataclass(frozen=True)
class TransactionCheck:
    """A broker's ``CHECK_TRANSACTION_STATE``: is the half message ``half`` of ``topic`` committed? Its
    producer group and properties text as stored (``CheckTransactionStateRequestHeader`` and the body)."""

    topic: str
    half: HalfMessage
    producer_group: str
    properties_text: str


def transaction_check(request: Command) -> TransactionCheck:
    """A ``CHECK_TRANSACTION_STATE`` request read (``ClientRemotingProcessor.checkTransactionState``): its
    header names the half message, its body is the message (``MessageDecoder.encode``)."""
    messages = decode_messages(request.body)
    if len(messages) != 1:
        raise ProtocolError(f"a transaction check carries {len(messages)} messages, not one")
    text = messages[0].properties_text
    props = parse_properties(text)
    half = HalfMessage(request.int_field("commitLogOffset"), request.int_field("tranStateTableOffset"),
                       request.ext.get("transactionId") or props.get("UNIQ_KEY") or request.ext.get("msgId", ""))
    return TransactionCheck(request.ext.get("topic", ""), half, props.get("PGROUP", ""), text)


class ProducerChannel:
    """A connection to one broker on which this process is a producer of ``group``, as RocketMQ's own
    producer is (``HEART_BEAT`` with the group in its ``producerDataSet``, again every ``heartbeat_s``
    seconds: a broker forgets a producer's channel 120 s after its last heartbeat, and at once when it
    closes). The broker may then send it a ``CHECK_TRANSACTION_STATE`` for a half message of the group
    that nobody ended (``TransactionalMessageCheckService``, every ``transactionCheckInterval``, for
    messages older than ``transactionTimeOut``); ``next_check`` reads them, ``answer`` ends one.

    Meant for one thread: it reads whatever the broker sends on it."""

    def __init__(self, addr: str, group: str, client_id: str, timeout: float = 10.0,
                 credentials: Credentials | None = None, tls: TLSOption = None, heartbeat_s: float = 20.0) -> None:
        self.addr, self.group, self.client_id, self.heartbeat_s = addr, group, client_id, heartbeat_s
        self._conn = Connection(addr, timeout, 0.0, credentials=credentials, tls=tls)
        self._sock: socket.socket | None = None
        self._beat = 0.0
        self.checks = 0  # checks this channel was asked

    def _heartbeat(self, sock: socket.socket) -> None:
        body = json.dumps({"clientID": self.client_id, "producerDataSet": [{"groupName": self.group}],
                           "consumerDataSet": [], "heartbeatFingerprint": 0}).encode()
        self._conn._opaque += 1
        sock.settimeout(self._conn.timeout)
        sock.sendall(_encode(HEART_BEAT, {}, body, self._conn._opaque, self._conn.credentials))
        REQUESTS[HEART_BEAT] += 1
        self._beat = time.monotonic()

    def next_check(self, wait_s: float) -> TransactionCheck | None:
        """The next check the broker asks within ``wait_s`` seconds (None: none came), heartbeating when due.
        Raises ``OSError`` (or a ``RemotingError``) when the connection broke: make a new channel."""
        if self._sock is None:
            self._sock = self._conn._connect()
            self._heartbeat(self._sock)
        sock = self._sock
        until = time.monotonic() + wait_s
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        while True:
            if time.monotonic() - self._beat >= self.heartbeat_s:
                self._heartbeat(sock)
            left = min(until, self._beat + self.heartbeat_s) - time.monotonic()
            if (isinstance(sock, ssl.SSLSocket) and sock.pending()) or poller.poll(max(0, int(left * 1000))):
                frame = _read_frame(sock, time.monotonic() + self._conn.timeout)
                if frame.flag & _RESPONSE:
                    if frame.code != SUCCESS:  # a heartbeat refused
                        if frame.code == NO_PERMISSION:
                            raise refused(self.addr, HEART_BEAT, {}, frame, self._conn.credentials)
                        raise RemotingError(f"RocketMQ at {self.addr} refused rstream's heartbeat as a producer of "
                                            f"{self.group!r}: code {frame.code}, {frame.remark or 'no remark'}",
                                            frame.code)
                elif frame.code == CHECK_TRANSACTION_STATE:
                    self.checks += 1
                    return transaction_check(frame)
            if time.monotonic() >= until:
                return None

    def answer(self, check: TransactionCheck, commit: bool | None) -> None:
        """Tell the broker what became of ``check``'s transaction (True: commit, False: roll back), oneway,
        as RocketMQ's producer answers a check (``endTransactionOneway`` with ``fromTransactionCheck``);
        nothing for None (unknown: the broker asks again at its next round)."""
        if commit is None or self._sock is None:
            return
        code, ext, body = end_transaction_request(check.topic, check.half, commit, check.producer_group or self.group,
                                                  from_check=True)
        self._conn._opaque += 1
        self._sock.settimeout(self._conn.timeout)
        self._sock.sendall(_encode(code, ext, body, self._conn._opaque, self._conn.credentials, _ONEWAY))
        REQUESTS[code] += 1

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None


def portable_tls(tls: TLSOption) -> TLSOption:
    """``tls`` as it can travel to another process (a Spark executor): an ``ssl.SSLContext`` cannot."""
    if isinstance(tls, ssl.SSLContext):
        raise RemotingError("an ssl.SSLContext cannot travel to another process (a Spark executor): give tls= the "
                            "CA file's path (or True for the system's CAs) where the broker object is pickled")
    return tls


class _Closed(ConnectionError):
    """The server closed the connection (an end of stream where a frame's bytes were due)."""


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the server closed this idle connection (it never writes unasked: readable means closed;
    over TLS, readable may also be a session ticket, which is no data)."""
    try:
        poller = select.poll()  # not select.select, which refuses a descriptor above 1023
        poller.register(sock, select.POLLIN)
        if not poller.poll(0):
            return False
        if isinstance(sock, ssl.SSLSocket):
            sock.settimeout(0)
            try:
                sock.recv(1)  # an end, or data nobody asked for: either way not a connection to go on with
            except ssl.SSLWantReadError:
                return False
            return True
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (OSError, ValueError):
        return True


def _encode(code: int, ext: Mapping[str, Any] | None, body: bytes, opaque: int,
            credentials: Credentials | None = None, flag: int = 0) -> bytes:
    header: dict[str, Any] = {"code": code, "language": _PYTHON, "version": _VERSION, "opaque": opaque, "flag": flag,
                              "serializeTypeCurrentRPC": "JSON"}
    fields = {k: ("true" if v is True else "false" if v is False else str(v))
              for k, v in (ext or {}).items() if v is not None}
    if credentials is not None:
        fields = sign(fields, body, credentials)
    if fields:
        header["extFields"] = fields
    data = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack(">II", 4 + len(data) + len(body), len(data)) + data + body


def _read_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    parts, left = [], n
    while left:
        wait = deadline - time.monotonic()
        if wait <= 0:
            raise TimeoutError(f"the server sent {n - left} of a frame's {n} bytes in time")
        sock.settimeout(wait)
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise _Closed("connection closed by the server")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


_LENGTH = struct.Struct(">I")
_TLS_RECORD = re.compile(rb"[\x14-\x17]\x03[\x00-\x04]")  # a TLS record's type and version


def _read_frame(sock: socket.socket, deadline: float, max_frame: int = MAX_FRAME) -> Command:
    """The next frame from ``sock``, read whole by ``deadline`` (``time.monotonic()``);
    ``ProtocolError`` when it is not one, before reading past a length above ``max_frame`` (so a
    server never makes rstream allocate more)."""
    head = _read_exact(sock, 4, deadline)
    (length,) = _LENGTH.unpack(head)
    if length > max_frame - 4:
        if _TLS_RECORD.match(head):
            raise ProtocolError("the server answered in TLS: connect with TLS (RocketMQBroker(..., tls=True))")
        raise ProtocolError(f"the server sent a frame of {length} bytes; RocketMQ's frames have at most "
                            f"{max_frame - 4} (its frameMaxLength): is this a RocketMQ name server or broker?")
    if length < 4:
        raise ProtocolError(f"the server sent a frame of {length} bytes, too short for its header length")
    return decode_frame(_read_exact(sock, length, deadline))


def decode_frame(data: bytes) -> Command:
    """A frame without its length (``RemotingCommand.decode``): serialize type and header length,
    header JSON, body. Raises ``ProtocolError`` for anything else."""
    if len(data) < 4:
        raise ProtocolError(f"a frame of {len(data)} bytes has no header length")
    mark = _LENGTH.unpack_from(data)[0]
    if mark >> 24 != 0:
        raise ProtocolError(f"the server answered in serialize type {mark >> 24} (1 is RocketMQ's binary "
                            "one); rstream speaks JSON (0) only")
    size = mark & 0xFFFFFF
    if size > len(data) - 4:
        raise ProtocolError(f"a frame of {len(data) + 4} bytes says its header takes {size}")
    try:
        header = json.loads(data[4:4 + size])
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"a frame's header is not JSON ({exc}): {data[4:4 + min(size, 120)]!r}") from None
    if not isinstance(header, dict):
        raise ProtocolError(f"a frame's header is a JSON {type(header).__name__}, not an object")
    code, opaque, flag = header.get("code"), header.get("opaque", 0), header.get("flag", 0)
    ext, remark = header.get("extFields") or {}, header.get("remark")
    if type(code) is not int or type(opaque) is not int or type(flag) is not int:
        raise ProtocolError(f"a frame's header has code {code!r}, opaque {opaque!r} and flag {flag!r}: "
                            "not all numbers")
    if not isinstance(ext, dict) or not all(isinstance(v, str) for v in ext.values()):
        raise ProtocolError(f"a frame's extFields are not an object of strings: {str(ext)[:120]}")
    if remark is not None and not isinstance(remark, str):
        raise ProtocolError(f"a frame's remark is not a string: {str(remark)[:120]}")
    return Command(code, ext, data[4 + size:], remark, opaque, flag)


# -- messages -------------------------------------------------------------------------------------
def properties_string(props: Mapping[str, str]) -> str:
    """``MessageDecoder.messageProperties2String``."""
    return "".join(f"{k}{_NAME}{v}{_SEP}" for k, v in props.items())


def parse_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties`` (tolerant of a trailing separator)."""
    out = {}
    for item in text.split(_SEP):
        name, sep, value = item.partition(_NAME)
        if sep:
            out[name] = value
    return out


class BatchBody:
    """A batch send's body (``MessageDecoder.encodeMessages``), built message by message: per
    message its flag, body and properties (``properties_string`` encoded), and its exact size."""

    __slots__ = ("data", "count")

    def __init__(self) -> None:
        self.data = bytearray()
        self.count = 0

    @property
    def size(self) -> int:
        return len(self.data)

    def add(self, body: bytes, properties: bytes) -> None:
        self.add_field(body, properties_field(properties))

    def add_field(self, body: bytes, field: bytes) -> None:
        """Add a message whose properties are ``field`` (``properties_field``: a sender that sends
        the same properties again and again makes it once)."""
        n = len(body)
        data = self.data
        data += message_head(20 + n + len(field), 0, 0, 0, n)
        data += body
        data += field
        self.count += 1

    def bytes(self) -> bytes:
        return bytes(self.data)


#: A batched message's head: ``message_head(size, 0, 0, 0, body length)`` (total size, magic code, body
#: CRC, flag, body length); its body and ``properties_field`` follow.
message_head = struct.Struct(">iiiii").pack
_SHORT = struct.Struct(">h")


def properties_field(properties: bytes) -> bytes:
    """A message's properties (``properties_string`` encoded) as a batch carries them: length, text."""
    m = len(properties)
    if m > 32767:
        raise BrokerError(f"a message's headers take {m} bytes; RocketMQ allows at most 32767")
    return _SHORT.pack(m) + properties


def encode_batch(messages: Sequence[tuple[bytes, Mapping[str, str]]]) -> bytes:
    """A batch send's body of ``(body, properties)`` messages."""
    batch = BatchBody()
    for body, props in messages:
        batch.add(body, properties_string(props).encode())
    return batch.bytes()


class HalfMessage(NamedTuple):
    """A half message as its send answered: where RocketMQ keeps it until it is ended (what an
    ``END_TRANSACTION`` must name: ``EndTransactionProcessor.checkPrepareMessage``)."""

    commit_log_offset: int  # its physical offset (the last 16 hex digits of the broker's message id)
    half_offset: int  # its offset in the half topic's queue (``tranStateTableOffset``)
    transaction_id: str  # its unique id (``UNIQ_KEY``), RocketMQ's transaction id


def commit_log_offset(offset_msg_id: str) -> int:
    """The physical offset a broker's message id names (``MessageDecoder.createMessageId``: the store
    host's address and port, then the offset, 8 bytes, in hex)."""
    try:
        return int(offset_msg_id[-16:], 16) if len(offset_msg_id) >= 32 else int("x")
    except ValueError:
        raise ProtocolError(f"a send's answer names message id {offset_msg_id!r}, not a broker's message id "
                            "(address, port and offset in hex)") from None


def end_transaction_request(topic: str, half: HalfMessage, commit: bool | None, producer_group: str,
                            from_check: bool = False) -> Request:
    """An ``END_TRANSACTION`` request (``EndTransactionRequestHeader``) that commits ``half`` (True), rolls
    it back (False) or says its state is unknown (None: only in answer to a check)."""
    kind = TRANSACTION_COMMIT if commit else TRANSACTION_ROLLBACK if commit is False else 0
    return (END_TRANSACTION, {
        "topic": topic, "producerGroup": producer_group, "tranStateTableOffset": half.half_offset,
        "commitLogOffset": half.commit_log_offset, "commitOrRollback": kind, "fromTransactionCheck": from_check,
        "msgId": half.transaction_id, "transactionId": half.transaction_id}, b"")


class PulledMessage(NamedTuple):
    """A message as a pull returns it (the fields rstream reads); its properties as RocketMQ's
    text (``properties_text``, parsed on demand by ``properties``)."""

    queue_id: int
    offset: int
    born_timestamp: int
    store_timestamp: int
    body: bytes
    properties_text: str

    @property
    def properties(self) -> dict[str, str]:
        return parse_properties(self.properties_text)


_FIXED = struct.Struct(">iiiiiqqiq")  # size, magic, body crc, queue, flag, queue offset, phys offset, sysflag, born
#: A stored message's smallest size: IPv4 hosts, no body, a topic's length in a byte, no topic or properties.
_MIN_STORED = _FIXED.size + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2


def decode_messages(data: bytes, max_inflated: int = MAX_INFLATED) -> list[PulledMessage]:
    """The stored messages a pull returns, one after the other (``MessageDecoder.decode``).

    Trusts nothing: a message's declared size must hold its fields and fit in ``data``, and the
    compressed bodies inflate to ``max_inflated`` bytes at most, together; anything else raises
    ``ProtocolError``. So garbage never loops, and never makes it allocate much more than ``data``.
    """
    out: list[PulledMessage] = []
    pos, end = 0, len(data)
    unpack_from = struct.unpack_from
    fixed = _FIXED.unpack_from
    append = out.append
    budget = max_inflated
    try:
        while pos < end:
            size, magic, _crc, queue, _flag, offset, _phys, sysflag, born = fixed(data, pos)
            stop = pos + size
            if size < _MIN_STORED or stop > end:  # a size of 0 or less would never move on
                raise ProtocolError(f"a pulled message at byte {pos} of {end} says it takes {size} bytes; a stored "
                                    f"message takes {_MIN_STORED} at least, and {end - pos} remain")
            at = pos + 52 + (16 if sysflag & _BORNHOST_V6 else 4)  # the fixed part, born host and port
            (store,) = unpack_from(">q", data, at)
            at += 12 + (16 if sysflag & _STOREHOST_V6 else 4) + 12  # store time, store host + port, reconsume, prepared
            (body_len,) = unpack_from(">i", data, at)
            at += 4
            if body_len > 0:
                body = data[at:at + body_len]  # a slice: never longer than what is there
                at += body_len
            else:
                body = b""
            if magic == _MAGIC_V2:
                (topic_len,) = unpack_from(">h", data, at)
                if topic_len < 0:
                    raise ProtocolError(f"a pulled message at byte {pos} says its topic takes {topic_len} bytes")
                at += 2 + topic_len
            elif magic == _MAGIC_V1:
                at += 1 + data[at]
            else:
                raise ProtocolError(f"a pulled message at byte {pos} has magic code {magic}, not a RocketMQ "
                                    "message's")
            (props_len,) = unpack_from(">h", data, at)
            at += 2
            if props_len > 0:
                text = data[at:at + props_len].decode("utf-8", "replace")
                at += props_len
            else:
                text = ""
            if at > stop:
                raise ProtocolError(f"a pulled message at byte {pos} says it takes {size} bytes, and its "
                                    f"fields take {at - pos}")
            if sysflag & _COMPRESSED:
                body, budget = _inflate(body, sysflag, budget, max_inflated)
            append(PulledMessage(queue, offset, born, store, body, text))
            pos = stop
    except (struct.error, IndexError):
        raise ProtocolError(f"a pulled message at byte {pos} of {end} is cut short") from None
    return out


def _inflate(body: bytes, sysflag: int, budget: int, limit: int) -> tuple[bytes, int]:
    """A compressed body inflated, and what is left of the reply's ``budget`` of inflated bytes."""
    if sysflag & _COMPRESSION_TYPE not in (0, _ZLIB):
        raise RemotingError("a message is compressed with LZ4 or ZSTD, which rstream cannot read yet; "
                            "send it uncompressed or with zlib")
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(body, budget + 1)  # at most one byte past the budget: never more
    except zlib.error as exc:
        raise ProtocolError(f"a pulled message's compressed body does not inflate ({exc})") from None
    if len(out) > budget:
        raise ProtocolError(f"a pulled reply's compressed bodies inflate to more than {limit} bytes "
                            "(rstream's bound, remoting.MAX_INFLATED): pull fewer messages at once")
    if not inflater.eof:
        raise ProtocolError("a pulled message's compressed body is cut short")
    return out, budget - len(out)
# -- the calls ------------------------------------------------------------------------------------
def name_servers(namesrv: str) -> list[str]:
    """The ``"host:port"`` addresses of a name server list as RocketMQ's clients take it
    (``"a:9876;b:9876"``); raises ``BrokerError`` for one that is not ``host:port``."""
    addrs = [addr.strip() for addr in namesrv.split(";") if addr.strip()] if isinstance(namesrv, str) else []
    bad = [addr for addr in addrs if not re.fullmatch(r"[^\s:;]+:\d{1,5}", addr)]
    if not addrs or bad:
        raise BrokerError(f"namesrv must be 'host:port' of a RocketMQ name server, or several separated by ';' "
                          f"('ns1:9876;ns2:9876'), got {namesrv!r}")
    return addrs


class Client:
    """Connections to a cluster's name servers and brokers, and the calls rstream makes: every request
    signed with ``credentials`` if given, over TLS if ``tls`` says so (``TLSOption``).

    ``namesrv``: one name server ``"host:port"``, or several (``"a:9876;b:9876"``): a request goes to
    the one that answered last, and to the next when it cannot be reached. ``reconnect_s``: how long
    a request to a broker waits for it to be reachable again (``Connection``); a caller that looks a
    moved broker up again asks for a short one."""

    #: Seconds a request to the name servers waits for one to be reachable, trying each in turn.
    namesrv_reconnect_s = 60.0

    def __init__(self, namesrv: str, timeout: float = 10.0, reconnect_s: float = 60.0,
                 credentials: Credentials | None = None, tls: TLSOption = None) -> None:
        self.namesrv, self.timeout, self.reconnect_s = namesrv, timeout, reconnect_s
        self.credentials, self.tls = credentials, tls
        tls_context(tls)  # a CA file that is not one: said now, not at the first request
        self.namesrvs = [addr.strip() for addr in namesrv.split(";") if addr.strip()] or [namesrv]
        self._conns: dict[str, Connection] = {}
        self._lock = threading.Lock()
        self._answered = 0  # the name server that answered last (an index of ``namesrvs``)

    def conn(self, addr: str, reconnect_s: float | None = None) -> Connection:
        with self._lock:
            conn = self._conns.get(addr)
            if conn is None:
                conn = self._conns[addr] = Connection(addr, self.timeout,
                                                      self.reconnect_s if reconnect_s is None else reconnect_s,
                                                      credentials=self.credentials, tls=self.tls)
            return conn

    def close(self) -> None:
        for conn in list(self._conns.values()):
            conn.close()

    # name server
    def namesrv_call(self, code: int, ext: Mapping[str, Any] | None = None,
                     ok: Iterable[int] = (SUCCESS,)) -> Command:
        """A request to the name servers: the one that answered last first, then each other in turn,
        for up to ``namesrv_reconnect_s`` seconds while none can be reached."""
        if len(self.namesrvs) == 1:
            return self.conn(self.namesrvs[0], self.namesrv_reconnect_s).call(code, ext, ok=ok)
        deadline = time.monotonic() + self.namesrv_reconnect_s
        failures: dict[str, str] = {}
        while True:
            first = self._answered
            for i in range(len(self.namesrvs)):
                at = (first + i) % len(self.namesrvs)
                try:
                    reply = self.conn(self.namesrvs[at], 0.0).call(code, ext, ok=ok)
                except RemotingError as exc:
                    if exc.code is not None:
                        raise
                    failures[self.namesrvs[at]] = str(exc.__cause__ or exc)
                    continue
                self._answered = at
                return reply
            if time.monotonic() > deadline:
                said = "; ".join(f"{addr}: {why}" for addr, why in failures.items())
                raise RemotingError(f"none of the RocketMQ name servers {self.namesrv} could be reached for "
                                    f"{self.namesrv_reconnect_s:.0f} s ({said}): are they running?", None)
            time.sleep(0.2)

    def cluster_info(self) -> dict[str, Any]:
        """``GET_BROKER_CLUSTER_INFO``: ``{"brokerAddrTable": {name: {"brokerAddrs": {id: addr}}}, ...}``."""
        data = parse_json(self.namesrv_call(GET_BROKER_CLUSTER_INFO).body)
        return data if isinstance(data, dict) else {}

    def route(self, topic: str) -> dict[str, Any] | None:
        """``GET_ROUTEINFO_BY_TOPIC``: the topic's brokers and queues, None if the name server has none."""
        reply = self.namesrv_call(GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, ok=(SUCCESS, TOPIC_NOT_EXIST))
        return None if reply.code == TOPIC_NOT_EXIST else parse_json(reply.body)

    def delete_topic_in_namesrv(self, topic: str, cluster: str | None = None) -> None:
        self.namesrv_call(DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})

    # broker
    def create_topic(self, broker: str, topic: str, queues: int, attributes: str | None = None,
                     perm: int = 6) -> None:
        """``UPDATE_AND_CREATE_TOPIC`` on one broker: ``queues`` read and write queues; ``perm``
        RocketMQ's permission bits (6: read and write, 4: read only)."""
        self.conn(broker).call(UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
            "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": False,
            "attributes": attributes})

    def topic_configs(self, broker: str) -> dict[str, dict[str, Any]]:
        """``GET_ALL_TOPIC_CONFIG``: every topic's config on one broker, by name."""
        data = parse_json(self.conn(broker).call(GET_ALL_TOPIC_CONFIG).body)
        table = data.get("topicConfigTable", {}) if isinstance(data, dict) else {}
        return dict(table)

    def topic_config(self, broker: str, topic: str) -> dict[str, Any] | None:
        """``GET_TOPIC_CONFIG``: one topic's config on one broker, None if it has no such topic."""
        reply = self.conn(broker).call(GET_TOPIC_CONFIG, {"topic": topic}, ok=(SUCCESS, TOPIC_NOT_EXIST))
        data = parse_json(reply.body) if reply.code == SUCCESS and reply.body else None
        return data if isinstance(data, dict) else None

    def delete_topic_in_broker(self, broker: str, topic: str) -> None:
        try:
            self.conn(broker).call(DELETE_TOPIC_IN_BROKER, {"topic": topic})
        except RemotingError as exc:
            # A broker without timer messages (timerWheelEnable=false) deletes the
            # topic, then fails on its timer metrics (5.3.3, AdminBrokerProcessor.deleteTopicInBroker's
            # last line): deleted all the same when the broker no longer lists it.
            if "getTimerMessageStore()" not in str(exc) or topic in self.topic_configs(broker):
                raise

    def send_batch(self, broker: str, topic: str, queue: int,
                   messages: BatchBody | Sequence[tuple[bytes, Mapping[str, str]]],
                   born_timestamp: int, producer_group: str = "rstream-writer") -> int:
        """Append ``messages`` (a ``BatchBody``, or (body, properties) pairs) to one queue in one
        request; the first's offset. RocketMQ stores a batch's messages contiguously in the queue and
        gives them one born time. At most ``maxMessageSize`` bytes (4 MB by default) in all."""
        body = messages.bytes() if isinstance(messages, BatchBody) else encode_batch(messages)
        reply = self.conn(broker).call(SEND_BATCH_MESSAGE, {  # SendMessageRequestHeaderV2's one-letter names
            "a": producer_group, "b": topic, "c": "TBW102", "d": 4, "e": queue, "f": 0, "g": born_timestamp,
            "h": 0, "i": "", "j": 0, "k": False, "l": 0, "m": True}, body)
        return reply.int_field("queueOffset")

    def send(self, broker: str, topic: str, queue: int, body: bytes, properties: Mapping[str, str],
             born_timestamp: int, producer_group: str = "rstream-writer", repeatable: bool = False) -> int:
        """Append one message to one queue; its offset. ``repeatable``: storing it twice is harmless,
        so a send whose connection broke is sent again."""
        reply = self.conn(broker).call(SEND_MESSAGE, {
            "producerGroup": producer_group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue, "sysFlag": 0, "bornTimestamp": born_timestamp, "flag": 0,
            "properties": properties_string(properties), "reconsumeTimes": 0, "unitMode": False,
            "batch": False, "maxReconsumeTimes": 0}, body, repeatable=repeatable)
        return reply.int_field("queueOffset")

    def send_half(self, broker: str, topic: str, queue: int, messages: Sequence[tuple[bytes, str, int]],
                  producer_group: str, check_after_s: int) -> list[HalfMessage]:
        """Send each of ``messages`` (body, properties text, born time) as a *half* message of
        ``topic``/``queue``: RocketMQ stores it in its half topic (``RMQ_SYS_TRANS_HALF_TOPIC``), where no
        consumer sees it, until an ``END_TRANSACTION`` commits it (the message then goes to the queue,
        given its offset there) or rolls it back. One request per message (a batch send refuses
        transactional messages: ``CommitLog.asyncPutMessages``), pipelined. Each message's properties get
        ``TRAN_MSG`` and ``PGROUP``, as ``DefaultMQProducerImpl.sendMessageInTransaction`` sets them, and
        ``CHECK_IMMUNITY_TIME_IN_SECONDS``: for ``check_after_s`` seconds after its born time (at least the
        broker's ``transactionTimeOut``) only its sender's end counts, after that only an end answering a
        check-back (``CHECK_TRANSACTION_STATE`` to a producer of ``producer_group``): the broker refuses a
        late sender's (``EndTransactionProcessor.rejectCommitOrRollback``), so the two never both commit it."""
        extra = (f"TRAN_MSG{_NAME}true{_SEP}PGROUP{_NAME}{producer_group}{_SEP}"
                 f"CHECK_IMMUNITY_TIME_IN_SECONDS{_NAME}{int(check_after_s)}{_SEP}")
        requests: list[Request] = [(SEND_MESSAGE, {
            "producerGroup": producer_group, "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
            "queueId": queue, "sysFlag": TRANSACTION_PREPARED, "bornTimestamp": born, "flag": 0,
            "properties": properties + extra, "reconsumeTimes": 0, "unitMode": False, "batch": False,
            "maxReconsumeTimes": 0}, body) for body, properties, born in messages]
        conn = self.conn(broker)
        out = []
        for reply in conn.pipeline(requests):
            if reply.code != SUCCESS:
                if reply.code == NO_PERMISSION:
                    raise refused(conn.addr, SEND_MESSAGE, {"topic": topic}, reply, self.credentials)
                raise RemotingError(f"RocketMQ at {broker} refused a half message of {topic}: code {reply.code}, "
                                    f"{reply.remark or 'no remark'}", reply.code)
            out.append(HalfMessage(commit_log_offset(reply.ext.get("msgId", "")), reply.int_field("queueOffset"),
                                   reply.ext.get("transactionId") or reply.ext.get("msgId", "")))
        return out

    def end_transactions(self, broker: str, topic: str, halves: Sequence[HalfMessage], commit: bool,
                         producer_group: str, after: Sequence[int | None] | None = None,
                         oneway: bool = False) -> list[bool]:
        """``END_TRANSACTION`` of each of ``halves`` (as ``send_half`` returned them): commit (the broker
        writes each message to its queue) or roll back. Pipelined; ``after`` as ``Connection.pipeline``'s,
        to keep an order among the commits (the broker ends transactions on several threads). With
        ``oneway`` the broker answers none (what RocketMQ's own producer sends): returns []; otherwise each
        is answered once its message is stored in the queue: per half message, whether it was ended
        (False: refused as past its check immunity, left to the check-back); another refusal raises."""
        requests = [end_transaction_request(topic, half, commit, producer_group) for half in halves]
        conn = self.conn(broker)
        done = []
        for reply in conn.pipeline(requests, after, oneway=oneway):
            if reply.code not in (SUCCESS, ILLEGAL_OPERATION):
                raise RemotingError(f"RocketMQ at {broker} refused to {'commit' if commit else 'roll back'} a half "
                                    f"message of {topic}: code {reply.code}, {reply.remark or 'no remark'}", reply.code)
            done.append(reply.code == SUCCESS)
        return done

    def consume_stats(self, broker: str, group: str, topic: str | None = None) -> dict[tuple[str, int], tuple[int, int]]:
        """``GET_CONSUME_STATS``, as ``mqadmin consumerProgress`` asks each broker: per (topic, queue id)
        of ``group`` on ``broker``, (the queue's end offset, the group's offset), the topics being those
        the group has offsets of (or ``topic``)."""
        reply = self.conn(broker).call(GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
        text = reply.body.decode("utf-8")
        out = {}
        # fastjson writes the offsetTable's MessageQueue keys as objects: {"brokerName":..,"queueId":..,"topic":..}:{...}
        for key, value in re.findall(r'(\{[^{}]*"queueId"[^{}]*\}):(\{[^{}]*\})', text):
            queue, wrapper = json.loads(key), json.loads(value)
            out[(str(queue["topic"]), int(queue["queueId"]))] = (int(wrapper["brokerOffset"]),
                                                                   int(wrapper["consumerOffset"]))
        return out

    def pull(self, broker: str, topic: str, queue: int, offset: int, max_messages: int = 1024,
             group: str = "rstream-reader") -> tuple[list[PulledMessage], int]:
        """Up to ``max_messages`` messages from ``offset`` on, and the offset to go on from (the same
        when there is nothing new). Never blocks waiting for messages."""
        messages, next_offset, _end = self.pull_log(broker, topic, queue, offset, max_messages, group)
        return messages, next_offset

    def pull_log(self, broker: str, topic: str, queue: int, offset: int, max_messages: int = 1024,
                 group: str = "rstream-reader") -> tuple[list[PulledMessage], int, int]:
        """``pull``, with the queue's end offset when the broker answered (its ``maxOffset``): one
        request says what is new and whether that is all (-1: the reply said no end)."""
        reply = self.conn(broker).call(PULL_MESSAGE, {
            "consumerGroup": group, "topic": topic, "queueId": queue, "queueOffset": offset,
            "maxMsgNums": max_messages, "sysFlag": _PULL_SUBSCRIPTION, "commitOffset": 0,
            "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0, "expressionType": "TAG"},
            ok=(SUCCESS, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED))
        next_offset = reply.int_field("nextBeginOffset", offset)
        end = reply.int_field("maxOffset", -1)
        if reply.code != SUCCESS:
            return [], next_offset, end
        return decode_messages(reply.body), next_offset, end

    def topic_offsets(self, broker: str, topic: str) -> list[tuple[int, int]] | None:
        """``GET_TOPIC_STATS_INFO``: per queue of ``topic`` on ``broker``, its first and end offset
        (``getMinOffsetInQueue``, ``getMaxOffsetInQueue``, as ``GET_MIN_OFFSET`` and ``GET_MAX_OFFSET``
        answer them) in one request; None if the broker has no such topic."""
        reply = self.conn(broker).call(GET_TOPIC_STATS_INFO, {"topic": topic}, ok=(SUCCESS, TOPIC_NOT_EXIST))
        if reply.code == TOPIC_NOT_EXIST:
            return None
        try:
            found = {int(q): json.loads(stats) for q, stats in _QUEUE_STATS.findall(reply.body.decode("utf-8"))}
            if sorted(found) == list(range(len(found))):
                return [(int(found[q]["minOffset"]), int(found[q]["maxOffset"])) for q in range(len(found))]
        except (ValueError, KeyError, TypeError, RecursionError):
            pass
        raise ProtocolError(f"RocketMQ at {broker} answered topic {topic!r}'s stats with what rstream cannot read "
                            f"as one entry per queue from 0: {reply.body[:200]!r}")

    def broker_config(self, broker: str) -> dict[str, str]:
        """``GET_BROKER_CONFIG``: the broker's settings (its ``broker.conf`` keys and their values now)."""
        text = self.conn(broker).call(GET_BROKER_CONFIG).body.decode("utf-8", "replace")
        return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

    def max_offset(self, broker: str, topic: str, queue: int) -> int:
        return self.conn(broker).call(GET_MAX_OFFSET, {"topic": topic, "queueId": queue}).int_field("offset")

    def min_offset(self, broker: str, topic: str, queue: int) -> int:
        return self.conn(broker).call(GET_MIN_OFFSET, {"topic": topic, "queueId": queue}).int_field("offset")

    def search_offset(self, broker: str, topic: str, queue: int, timestamp_ms: int) -> int:
        return self.conn(broker).call(SEARCH_OFFSET_BY_TIMESTAMP, {
            "topic": topic, "queueId": queue, "timestamp": timestamp_ms, "boundaryType": "LOWER"}).int_field("offset")

    def query_consumer_offset(self, broker: str, group: str, topic: str, queue: int) -> int | None:
        reply = self.conn(broker).call(QUERY_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": queue, "setZeroIfNotFound": False},
            ok=(SUCCESS, QUERY_NOT_FOUND))
        return None if reply.code == QUERY_NOT_FOUND else reply.int_field("offset")

    def create_group(self, broker: str, group: str) -> None:
        """``UPDATE_AND_CREATE_SUBSCRIPTIONGROUP``: a consumer group (a broker keeps offsets only for one)."""
        body = json.dumps({"groupName": group, "consumeEnable": True, "consumeFromMinEnable": True,
                           "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                           "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True})
        self.conn(broker).call(UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body.encode())

    def update_consumer_offset(self, broker: str, group: str, topic: str, queue: int, offset: int) -> None:
        self.conn(broker).call(UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": group, "topic": topic, "queueId": queue, "commitOffset": offset})

    # users and ACLs (RocketMQ 5.3's authentication and authorization: a super user's requests)
    def create_user(self, broker: str, username: str, password: str, super_user: bool = False) -> None:
        """``AUTH_CREATE_USER``: a user whose access key is ``username`` and secret key ``password``;
        ``AUTH_UPDATE_USER`` (the same password and type) if the broker has one of that name."""
        body = json.dumps({"username": username, "password": password,
                           "userType": "Super" if super_user else "Normal", "userStatus": "enable"}).encode()
        try:
            self.conn(broker).call(AUTH_CREATE_USER, {"username": username}, body)
        except RemotingError as exc:
            if "is existed" not in str(exc):  # AuthenticationMetadataManagerImpl.createUser (5.3.3)
                raise
            self.conn(broker).call(AUTH_UPDATE_USER, {"username": username}, body)

    def create_acl(self, broker: str, username: str, allow: Mapping[str, Sequence[str]]) -> None:
        """``AUTH_CREATE_ACL``: allow user ``username`` the actions (``"Pub"``, ``"Sub"``, ``"Create"``,
        ``"Update"``, ``"Delete"``, ``"Get"``, ``"List"``, ``"All"``) on each resource
        (``"Topic:orders"``, ``"Topic:*"``, ``"Group:rstream-*"``: a name, any, or a prefix)."""
        subject = f"User:{username}"
        entries = [{"resource": resource, "actions": list(actions), "decision": "Allow"}
                   for resource, actions in allow.items()]
        body = json.dumps({"subject": subject, "policies": [{"policyType": "Custom", "entries": entries}]})
        self.conn(broker).call(AUTH_CREATE_ACL, {"subject": subject}, body.encode())

    def __getstate__(self) -> dict[str, Any]:
        return {"namesrv": self.namesrv, "timeout": self.timeout, "reconnect_s": self.reconnect_s,
                "credentials": self.credentials, "tls": portable_tls(self.tls)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namesrv"], state["timeout"], state.get("reconnect_s", 60.0),  # type: ignore[misc]
                      state.get("credentials"), state.get("tls"))
