"""``RocketMQBroker``: the broker contract (``rstream.broker.base.Broker``) on a RocketMQ 5 cluster.

What it writes are ordinary RocketMQ messages: a record's key is the message's ``KEYS``, its tags
``TAGS``, its headers user properties, so any RocketMQ client reads them, and it reads what any
client wrote. A few properties of its own (``RSTREAM_*``, never shown as headers) carry what a
message cannot: a born time per record of a batch, a key that is bytes, and an append's attempt.

Exactly once without atomic appends. RocketMQ appends one batch to one queue atomically, never
several queues or topics at once, and its transactions hold one message. So an append of several
queues (a task's outputs: sink, shuffle, state and late topics, with its commit tag) is made
atomic for readers, the way Kafka's transactions are (``read_committed``, the last stable offset):

1. the writer appends an *open* record to the decision log, the one-queue topic ``rstream_txn``:
   its attempt id, the range it commits (job, input topic, queue, start offset) and, per queue it
   will write, that queue's end offset now (a lower bound of where its records go);
2. it appends its records, each carrying the attempt id (``RSTREAM_TXN``);
3. it appends a *commit* record: the commit tag, with where the records landed.

The decision log decides, in its order, for everyone: of the attempts of one range, the first
commit wins; a later one lost (the same task's retry, rerun or zombie), and so did an attempt that
an *abort* record (a reader's, after ``txn_timeout_ms``) came before. Every rstream reader, state
replay included, reads committed records only: a queue's end offset (``end_offsets``) stops
before the first record of an undecided attempt, and a lost attempt's records are skipped. Offsets
are RocketMQ's own, so a lost attempt leaves a hole in a queue's offsets that no rstream reader
sees. A consumer outside rstream sees every message, lost attempts' too: ``committed_only(...)``
(or ``read``) gives it what committed, and a sink whose consumers cannot filter can be read
through rstream.

Compact topics are ordinary RocketMQ topics, their setting kept in the decision log: RocketMQ 5's
``cleanup.policy=COMPACTION`` topics serve reads from a compaction store built in the background
(a record just written is not readable yet, read in 5.3.3's ``DefaultMessageStore.getMessage``) and
refuse records without a key, so rstream reads a compact topic as the latest record per key itself.

The decision log and every topic rstream creates live on one broker (the cluster's first master
by name), so the log's order and the data's agree: RocketMQ makes a message readable in the order
of its commit log.

A deleted topic's messages come back after a crash. RocketMQ deletes a topic's queue index, never
its messages in the commit log; a broker restarted after a crash rebuilds its queue indexes from
the commit log, and in 5.3.3 it puts a deleted topic's messages back into every queue of that name
that is empty then, or created later (``CommitLog.recoverAbnormally`` dispatches all it reads;
tests/rocketmq/test_topic_incarnations.py shows it). So ``delete_topic`` notes the deletion in the
decision log, and readers skip the messages of a topic stored before its last deletion (the
broker's store times: every rstream topic lives on the log's broker). A topic deleted by another
tool (``mqadmin deleteTopic``) has no such note: give a new topic a new name.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
import threading
import time
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rstream.broker.base import (
    BrokerError,
    CommitTag,
    Message,
    MessageKey,
    ReadRecord,
    RecordTuple,
    SendResult,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    messages_frame,
    validate_topic_name,
)
from rstream.rocketmq.remoting import (
    SUBSCRIPTION_GROUP_NOT_EXIST,
    SYSTEM_PROPERTIES,
    BatchBody,
    Client,
    Credentials,
    OutcomeUnknownError,
    ProtocolError,
    PulledMessage,
    RemotingError,
    TLSOption,
    message_head,
    parse_properties,
    portable_tls,
    properties_field,
    properties_string,
)

#: The decision log: open, commit and abort records of every append that needs one (one queue).
TXN_TOPIC = "rstream_txn"
#: The consumer group whose offsets rstream's readers never commit (a pull needs a group name).
READER_GROUP = "rstream-reader"

_TXN, _BORN, _KEY = "RSTREAM_TXN", "RSTREAM_BORN", "RSTREAM_KEY"
_OWN = frozenset({_TXN, _BORN, _KEY})
_HIDDEN = SYSTEM_PROPERTIES | _OWN
_MAX_BATCH_BYTES = 3 << 20  # under RocketMQ's default 4 MB per request
# RocketMQ 5.3.3 advances a queue's next offset by a batch's message count cast to a short
# (QueueOffsetOperator.increaseQueueOffset(String, short)): a batch of more than 32767 messages wraps it,
# and the queue's offsets then overlap, losing messages without an error. So a batch holds fewer.
_MAX_BATCH_MESSAGES = 32767
_PULL = 2048


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class _Topic:
    info: TopicInfo
    broker: str  # "host:port" of the master that holds its queues


@dataclass
class _Log:
    """What the decision log said so far, read incrementally (``RocketMQBroker._refresh``)."""

    next_offset: int = 0
    decided: dict[str, bool] = field(default_factory=dict)  # attempt -> committed (True) or lost
    pending: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)  # "topic/q" -> attempt -> (low, ms)
    opened: dict[tuple[Any, ...], set[str]] = field(default_factory=dict)  # range -> undecided attempts
    winners: dict[tuple[Any, ...], CommitTag] = field(default_factory=dict)  # (job, topic, queue, start) -> tag
    by_job: dict[str, list[CommitTag]] = field(default_factory=dict)  # commit order
    compact: set[str] = field(default_factory=set)  # the topics created compact
    deleted_ms: dict[str, int] = field(default_factory=dict)  # topic -> the broker's time of its last deletion


class RocketMQBroker:
    """The ``Broker`` contract on the RocketMQ cluster whose name server is ``namesrv`` ("host:port").

    ``txn_timeout_ms``: an append undecided for that long (its writer died and nothing retried its
    range) is aborted by the next reader that waits on it, so readers never wait forever.

    A cluster with authentication on: ``access_key`` and ``secret_key`` of one of its users sign every
    request, as RocketMQ's own clients sign them (``remoting.sign``); they travel with this object to
    Spark's executors. A refused key raises ``CredentialsRefusedError``, a missing permission
    ``PermissionDeniedError`` naming the topic or group and the permission (both ``BrokerError``s).
    ``tls``: True (the servers' certificates checked against the system's CAs), a CA file's path, or
    an ``ssl.SSLContext`` (which cannot travel to executors: give a path for jobs).
    """

    #: Offsets may skip what an attempt that lost its race wrote (see the module's docstring).
    gapless = False

    def __init__(self, namesrv: str, *, cluster: str | None = None, timeout: float = 10.0,
                 txn_timeout_ms: int = 300_000, access_key: str | None = None, secret_key: str | None = None,
                 tls: TLSOption = False) -> None:
        if not isinstance(namesrv, str) or ":" not in namesrv:
            raise BrokerError(f"namesrv must be 'host:port' of a RocketMQ name server, got {namesrv!r}")
        self.namesrv, self.cluster, self.timeout, self.txn_timeout_ms = namesrv, cluster, timeout, txn_timeout_ms
        self.access_key, self.tls = access_key, tls
        self._secret_key = secret_key
        self._client = Client(namesrv, timeout, _credentials(access_key, secret_key), tls)
        self._topics: dict[str, _Topic] = {}
        self._log = _Log()
        self._lock = threading.RLock()
        self._groups: set[tuple[str, str]] = set()
        self._watched: dict[str, _Topic] = {}  # the topics whose end offsets were asked (``data_version``)
        self._home: str | None = None
        self._rr = itertools.count(os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        return {"namesrv": self.namesrv, "cluster": self.cluster, "timeout": self.timeout,
                "txn_timeout_ms": self.txn_timeout_ms, "home": self._home, **self._security()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namesrv"], cluster=state["cluster"], timeout=state["timeout"],  # type: ignore[misc]
                      txn_timeout_ms=state["txn_timeout_ms"], access_key=state.get("access_key"),
                      secret_key=state.get("secret_key"), tls=state.get("tls", False))
        self._home = state.get("home")

    def _security(self) -> dict[str, Any]:
        """The credentials and TLS setting, as they travel to Spark's executors (which sign requests too)."""
        if self.access_key is None and not self.tls:
            return {}
        return {"access_key": self.access_key, "secret_key": self._secret_key, "tls": portable_tls(self.tls)}

    def __repr__(self) -> str:
        user = f", access_key={self.access_key!r}" if self.access_key is not None else ""
        return f"RocketMQBroker({self.namesrv!r}{user}{', tls' if self.tls else ''})"

    def close(self) -> None:
        self._client.close()

    # -- where things live ------------------------------------------------------------------------
    def home_broker(self, wait_s: float = 60.0) -> str:
        """The broker rstream creates its topics on: the cluster's first master, by name. Waits up to
        ``wait_s`` for one to register (a broker that just started registers within about 30 s)."""
        deadline = time.monotonic() + wait_s
        while self._home is None:
            info = self._client.cluster_info()
            names = info.get("clusterAddrTable", {}).get(self.cluster) if self.cluster else None
            table = info.get("brokerAddrTable", {})
            masters = sorted((name, data["brokerAddrs"]["0"]) for name, data in table.items()
                             if "0" in data.get("brokerAddrs", {}) and (names is None or name in names))
            if masters:
                self._home = masters[0][1]
            elif time.monotonic() > deadline:
                raise BrokerError(f"the RocketMQ name server at {self.namesrv} knows no master broker"
                                  + (f" of cluster {self.cluster!r}" if self.cluster else "")
                                  + ": start one, or wait until it has registered")
            else:
                time.sleep(0.5)
        return self._home

    def _lookup(self, name: str) -> _Topic | None:
        found = self._topics.get(name)
        if found is not None:
            return found
        route = self._client.route(name)
        if not route or not route.get("queueDatas"):
            # The name server forgets a broker's routes the moment it goes away, until it registers
            # again (a restart): the broker itself still knows its topics.
            config = self._client.topic_config(self.home_broker(), name)
            if config is None:
                return None
            compact = name != TXN_TOPIC and name in self._refresh().compact
            topic = _Topic(TopicInfo(name, int(config["writeQueueNums"]), compact), self.home_broker())
            self._topics[name] = topic
            return topic
        queue_data = sorted(route["queueDatas"], key=lambda q: q["brokerName"])[0]
        addrs = {b["brokerName"]: b["brokerAddrs"].get("0") for b in route.get("brokerDatas", [])}
        addr = addrs.get(queue_data["brokerName"])
        if addr is None:
            return None
        compact = name != TXN_TOPIC and name in self._refresh().compact
        topic = _Topic(TopicInfo(name, int(queue_data["writeQueueNums"]), compact), addr)
        self._topics[name] = topic
        return topic

    def _get(self, name: str) -> _Topic:
        topic = self._lookup(validate_topic_name(name) if isinstance(name, str) else name)
        if topic is None:
            raise UnknownTopicError(f"unknown topic {name!r}: create it first (broker.create_topic({name!r}))")
        return topic

    def _queue(self, name: str, queue: int) -> _Topic:
        topic = self._get(name)
        if not isinstance(queue, int) or not 0 <= queue < topic.info.queues:
            raise BrokerError(f"topic {name!r} has queues 0..{topic.info.queues - 1}, not {queue!r}")
        return topic

    # -- topics ---------------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 8, compact: bool = False) -> TopicInfo:
        validate_topic_name(name)
        if not isinstance(queues, int) or queues < 1:
            raise BrokerError(f"a topic needs at least one queue, got queues={queues!r}")
        existing = self._lookup(name)
        wanted = TopicInfo(name, queues, bool(compact))
        if existing is not None:
            if existing.info != wanted:
                raise TopicExistsError(f"topic {name!r} exists with {existing.info.queues} queues"
                                       f"{' (compact)' if existing.info.compact else ''}; asked for {queues}"
                                       f"{' (compact)' if compact else ''}. Use another name or delete it first")
            return existing.info
        home = self.home_broker()
        if compact:  # said first: a topic is never seen without its setting
            self._log_append({"t": "topic", "topic": name, "compact": True})
        self._client.create_topic(home, name, queues)
        deadline = time.monotonic() + 15
        while not self._client.route(name):  # the broker registers it with the name server (other clients ask it)
            if time.monotonic() > deadline:
                raise BrokerError(f"RocketMQ created topic {name!r} but its name server never routed it")
            time.sleep(0.05)
        return self._get(name).info

    def topic(self, name: str) -> TopicInfo:
        return self._get(name).info

    def has_topic(self, name: str) -> bool:
        return self._lookup(name) is not None

    def topics(self) -> list[TopicInfo]:
        out = []
        configs = self._client.topic_configs(self.home_broker())
        compacts = self._refresh().compact
        for name, config in sorted(configs.items()):
            if name == TXN_TOPIC or not config.get("perm", 0) & 6 == 6 or _system_topic(name):
                continue
            compact = name in compacts
            out.append(TopicInfo(name, int(config.get("writeQueueNums", 0)), compact))
        return out

    def delete_topic(self, name: str) -> None:
        topic = self._get(name)
        self._client.delete_topic_in_broker(topic.broker, name)
        self._client.delete_topic_in_namesrv(name)
        self._topics.pop(name, None)
        with self._lock:
            self._watched.pop(name, None)
        self._log_append({"t": "forget", "topic": name})  # its commit tags, and its messages, go with it
        time.sleep(0.002)  # a topic made anew after this returns is stamped a later millisecond than its deletion

    # -- the decision log -----------------------------------------------------------------------
    def _txn_topic(self) -> _Topic:
        topic = self._lookup(TXN_TOPIC)
        if topic is None:
            self.create_topic(TXN_TOPIC, queues=1)
            topic = self._get(TXN_TOPIC)
        return topic

    def _log_append(self, entry: dict[str, Any], wait: bool = True) -> int:
        """Append ``entry`` to the decision log; with ``wait``, return once a reader sees it."""
        topic = self._txn_topic()
        body = json.dumps(entry, separators=(",", ":")).encode()
        offset = self._client.send(topic.broker, TXN_TOPIC, 0, body, {"KEYS": str(entry.get("a", entry["t"]))},
                                   now_ms(), repeatable=True)  # the log's first word on an attempt counts
        if wait:
            self._refresh(until=offset + 1)
        return offset

    def _await(self, topic: _Topic, queue: int, end: int) -> None:
        """Wait until a reader sees the queue reach ``end``: RocketMQ acknowledges a send once it is in
        the commit log and makes it readable a moment later (its reput service); after this, what
        this broker object wrote reads back, here and in any other process."""
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while self._client.max_offset(topic.broker, topic.info.name, queue) < end:
            if time.monotonic() > deadline:
                raise BrokerError(f"RocketMQ acknowledged records of {topic.info.name}/{queue} up to offset {end} "
                                  f"but did not make them readable within {self.timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _refresh(self, until: int = 0) -> _Log:
        """Read the decision log to its end (what another process decided since); with ``until``,
        wait until a reader sees it reach that offset (an entry this object just appended: RocketMQ
        acknowledges a send before it makes it readable, ``_await``).

        One pull request when the log grew by fewer than ``_PULL`` entries, or not at all: its reply
        says where the log ends (``maxOffset``), so no request asks that apart."""
        with self._lock:
            log = self._log
            topic = self._txn_topic()
            deadline = pause = 0.0
            while True:
                messages, nxt, end = self._pull(topic.broker, TXN_TOPIC, 0, log.next_offset, _PULL)
                for m in messages:
                    self._apply(log, m)
                if messages:
                    log.next_offset = max(nxt, messages[-1].offset + 1)
                elif log.next_offset < end:  # a hole RocketMQ skipped (nothing readable there): step over it
                    log.next_offset = max(nxt, log.next_offset + 1)
                if log.next_offset < end:
                    continue
                if log.next_offset >= until:
                    return log
                if not deadline:
                    deadline = time.monotonic() + self.timeout
                    pause = 0.0005
                elif time.monotonic() > deadline:
                    raise BrokerError(f"RocketMQ acknowledged entry {until - 1} of {TXN_TOPIC} but did not make "
                                      f"it readable within {self.timeout} s")
                time.sleep(pause)
                pause = min(pause * 2, 0.02)

    @staticmethod
    def _apply(log: _Log, m: PulledMessage) -> None:
        entry = json.loads(m.body)
        kind = entry["t"]
        attempt = entry.get("a")
        if kind == "open":
            if attempt in log.decided:
                return
            rng = tuple(entry["range"]) if entry.get("range") else None
            if rng is not None:
                log.opened.setdefault(rng, set()).add(attempt)
            for where, low in entry["at"].items():
                log.pending.setdefault(where, {})[attempt] = (int(low), m.store_timestamp)
        elif kind in ("commit", "abort"):
            if attempt in log.decided:
                return
            rng = tuple(entry["range"]) if entry.get("range") else None
            won = kind == "commit" and (rng is None or rng not in log.winners)
            log.decided[attempt] = won
            _settle(log, attempt)
            if won and rng is not None:
                tag = CommitTag(**entry["tag"], seq=m.offset + 1, committed_ms=m.store_timestamp)
                tag = replace(tag, outputs={k: (int(v[0]), int(v[1])) for k, v in tag.outputs.items()})
                log.winners[rng] = tag
                log.by_job.setdefault(tag.job, []).append(tag)
                for loser in log.opened.pop(rng, set()) - {attempt}:  # the range's other attempts lost
                    log.decided[loser] = False
                    _settle(log, loser)
        elif kind == "topic":
            log.compact.add(entry["topic"])
        elif kind == "forget":
            job, topic = entry.get("job"), entry.get("topic")
            if job is None:  # a deleted topic: its setting, and what attempts were writing to it, go with it
                log.compact.discard(topic)
                log.deleted_ms[topic] = max(log.deleted_ms.get(topic, 0), m.store_timestamp)
                for where in [w for w in log.pending if w.rpartition("/")[0] == topic]:
                    del log.pending[where]
            gone = [rng for rng in log.winners if (job is None or rng[0] == job) and (topic is None or rng[1] == topic)]
            for rng in gone:
                tag = log.winners.pop(rng)
                log.by_job[tag.job] = [t for t in log.by_job.get(tag.job, []) if t is not tag]

    def _stable_ends(self, topic: _Topic, queues: Sequence[int] | None = None) -> list[int]:
        """Per queue (of ``queues``, default all), where committed records end: the queue's end, or
        the first record of an attempt still undecided (aborted by this reader if it waited past
        ``txn_timeout_ms``)."""
        queues = range(topic.info.queues) if queues is None else queues
        ends = self._raw_ends(topic, queues)
        log = self._refresh()  # after the ends: an attempt whose records they count was opened before
        out = []
        for q, end in zip(queues, ends):
            waiting = log.pending.get(f"{topic.info.name}/{q}")
            if waiting:
                stale = [a for a, (_low, ms) in waiting.items() if now_ms() - ms > self.txn_timeout_ms]
                for attempt in stale:
                    self._log_append({"t": "abort", "a": attempt})
                if stale:
                    log = self._refresh()
                    waiting = log.pending.get(f"{topic.info.name}/{q}") or {}
                if waiting:
                    end = min(end, min(low for low, _ms in waiting.values()))
            out.append(end)
        return out

    def _raw_ends(self, topic: _Topic, queues: Sequence[int]) -> list[int]:
        """Per queue of ``queues``, its end as RocketMQ says it (records of undecided attempts
        included): one ``GET_MAX_OFFSET`` for one queue, one ``GET_TOPIC_STATS_INFO`` for more."""
        name = topic.info.name
        if len(queues) > 1:
            stats = self._client.topic_offsets(topic.broker, name)
            if stats is not None and len(stats) >= topic.info.queues:
                return [stats[q][1] for q in queues]
            # deleted (or made anew) by another client since this object looked it up: ask as before
        return [self._client.max_offset(topic.broker, name, q) for q in queues]

    # -- offsets --------------------------------------------------------------------------------
    def end_offsets(self, topic: str) -> list[int]:
        found = self._get(topic)
        with self._lock:
            self._watched[found.info.name] = found
        return self._stable_ends(found)

    def data_version(self) -> tuple[int, ...]:
        """A value that changes when a record is stored in a topic whose ``end_offsets`` this object
        was asked, or the decision log grows (an attempt opened, committed or aborted): what a started
        job's idle source watches instead of reading every queue's end. One request per such topic
        (``GET_TOPIC_STATS_INFO``) and one for the log (which it reads on, as ``_refresh`` does)."""
        with self._lock:
            watched = list(self._watched.values())
        version = [self._refresh().next_offset]  # the log first: what it says of a record is stored after it
        for topic in watched:
            stats = self._client.topic_offsets(topic.broker, topic.info.name)
            version += [end for _first, end in stats] if stats is not None else [-1]
        return tuple(version)

    def commits_version(self) -> int:
        """A value that changes when the decision log grows, so whenever a commit tag may have: what a
        task that waits for the other ranges of its batch to commit watches (one request, which reads
        the log on), rather than ``data_version``, which asks every topic this object read the ends of."""
        return self._refresh().next_offset

    def search_offset(self, topic: str, queue: int, timestamp_ms: int) -> int:
        found = self._queue(topic, queue)
        lo, hi = self._client.min_offset(found.broker, topic, queue), self._stable_ends(found, [queue])[0]
        while lo < hi:  # the first offset stored at or after timestamp_ms: store times never go back
            mid = (lo + hi) // 2
            messages, _, _end = self._pull(found.broker, topic, queue, mid, 1)
            if messages and messages[0].store_timestamp >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- writing --------------------------------------------------------------------------------
    def send(self, topic: str, body: bytes | str, key: MessageKey = None, headers: Mapping[str, str] | None = None,
             queue: int | None = None, born_timestamp: int | None = None, tags: str | None = None) -> SendResult:
        """Append one message (see ``send_batch``)."""
        return self.send_batch(topic, [body], key=key, headers=headers, queue=queue,
                               born_timestamp=born_timestamp, tags=tags)[0]

    def send_batch(self, topic: str, bodies: Iterable[bytes | str], key: MessageKey = None,
                   headers: Mapping[str, str] | None = None, queue: int | None = None,
                   born_timestamp: int | None = None, tags: str | None = None,
                   keys: Sequence[MessageKey] | None = None, born_timestamps: Sequence[int] | None = None,
                   progress: bool = True) -> list[SendResult]:
        """Append ``bodies`` as a producer does: to ``queue``, else queue ``crc32(key) % queues``,
        else round robin; one batch request per queue (each atomic, no decision record)."""
        found = self._get(topic)
        n = found.info.queues
        if queue is not None and (not isinstance(queue, int) or not 0 <= queue < n):
            raise BrokerError(f"topic {topic!r} has queues 0..{n - 1}, not {queue!r}")
        encoded = [b.encode() if isinstance(b, str) else b for b in bodies]
        for body in encoded:
            if not isinstance(body, bytes):
                raise BrokerError(f"message body must be bytes or str, got {type(body).__name__}")
        _check_headers(headers)
        key_list = list(keys) if keys is not None else [key] * len(encoded)
        for k in key_list:
            if k is not None and not isinstance(k, (str, bytes)):
                raise BrokerError(f"message key must be str, bytes or None, got {type(k).__name__}: {k!r}")
        now = now_ms()
        stamps = [int(t) for t in born_timestamps] if born_timestamps is not None else \
            [int(born_timestamp if born_timestamp is not None else now)] * len(encoded)
        if queue is not None:
            placed = [queue] * len(encoded)
        else:
            rr = next(self._rr)
            placed = [(rr + i) % n if k is None else zlib.crc32(k.encode() if isinstance(k, str) else k) % n
                      for i, k in enumerate(key_list)]
        per_queue: dict[int, list[RecordTuple]] = {}
        index = []
        hdrs = dict(headers) if headers else None
        for q, k, body, born in zip(placed, key_list, encoded, stamps):
            recs = per_queue.setdefault(q, [])
            index.append(len(recs))
            recs.append((k, body, born, hdrs, tags))
        firsts = {q: self._send_queue(found, q, recs, None)[0] for q, recs in per_queue.items()}
        return [SendResult(topic, q, firsts[q] + i) for q, i in zip(placed, index)]

    def _send_queue(self, topic: _Topic, queue: int, records: Iterable[RecordTuple],
                    attempt: str | None) -> tuple[int, int]:
        """Append ``records`` to one queue in batch requests of at most ``_MAX_BATCH_BYTES`` and
        ``_MAX_BATCH_MESSAGES``; ``(first offset, end offset)``: the first request's first, the last request's end.

        Records of an attempt return at once: readers see them once the attempt's commit is in the
        decision log, which RocketMQ makes readable after them (it makes the messages of its commit
        log readable in order). Records sent without one are readable when it returns."""
        first = last_end = -1
        own = f"{_TXN}\x01{attempt}\x02" if attempt is not None else ""
        headers: dict[int, str] = {}  # id -> the properties text of a headers dict (a batch shares a few)
        # key -> the properties field of a record with no headers, no tags and the batch's born time:
        # most records of an append (a sink's, a shuffle's) are such records, their keys repeating
        plain: dict[MessageKey, bytes] = {}
        stamped: dict[tuple[MessageKey, int], bytes] = {}  # (key, born) -> the same with a born time of its own
        batch, born0 = BatchBody(), 0
        data, count = batch.data, 0  # the batch's bytes and messages, kept here (BatchBody.add_field inlined)
        name = topic.info.name
        for k, body, born, hdrs, tags in records:
            if type(body) is not bytes and not isinstance(body, bytes):
                raise BrokerError(f"message body must be bytes, got {type(body).__name__}")
            if not count:
                born0 = born  # a batch's born time: its first record's; the others' differing ones said apart
            if hdrs or tags is not None:
                text = own if k is None else own + _key_property(k)
                if hdrs:
                    known = headers.get(id(hdrs))
                    if known is None:
                        _check_headers(hdrs)
                        known = headers[id(hdrs)] = properties_string(hdrs)
                    text += known
                if tags is not None:
                    text += f"TAGS\x01{tags}\x02"
                field = own_field = properties_field(text.encode())
                if born != born0:
                    field = properties_field(f"{text}{_BORN}\x01{born}\x02".encode())
            else:
                text = None
                try:
                    field = plain[k]
                except KeyError:
                    text = own if k is None else own + _key_property(k)
                    field = plain[k] = properties_field(text.encode())
                except TypeError:
                    _key_property(k)  # raises: not a key
                    raise
                own_field = field  # without a born time of its own: what a record starting a batch carries
                if born != born0:  # records born at a few times (each a send of the input) share a few fields
                    try:
                        field = stamped[(k, born)]
                    except KeyError:
                        if text is None:
                            text = own if k is None else own + _key_property(k)
                        field = stamped[(k, born)] = properties_field(f"{text}{_BORN}\x01{born}\x02".encode())
            n = len(body)
            size = 20 + n + len(field)
            if count and (len(data) + size > _MAX_BATCH_BYTES or count >= _MAX_BATCH_MESSAGES):
                batch.count = count
                at = self._client.send_batch(topic.broker, name, queue, batch, born0)
                first = at if first < 0 else first
                batch, born0, field = BatchBody(), born, own_field
                data, count, size = batch.data, 0, 20 + n + len(own_field)
            data += message_head(size, 0, 0, 0, n)
            data += body
            data += field
            count += 1
        if count:
            batch.count = count
            at = self._client.send_batch(topic.broker, name, queue, batch, born0)
            first = at if first < 0 else first
            last_end = at + count
        if last_end > 0 and attempt is None:
            self._await(topic, queue, last_end)
        return first, last_end

    def append(self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None = None) -> bool:
        targets = {(t, q): self._queue(t, q) for (t, q) in records}  # every queue checked before any write
        writes = {tq: recs for tq, recs in records.items() if len(recs)}
        if tag is None and len(writes) <= 1 and all(len(recs) < 1000 for recs in writes.values()):
            for (t, q), recs in writes.items():  # one batch request: atomic as it is
                self._send_queue(targets[(t, q)], q, list(recs), None)
            return True
        while True:
            try:
                return self._append_attempt(targets, writes, tag)
            except OutcomeUnknownError:  # the broker went away mid-send: that attempt is aborted, try anew
                continue

    def _append_attempt(self, targets: Mapping[tuple[str, int], _Topic],
                        writes: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None) -> bool:
        """One attempt of ``append``: open, records, commit. Raises ``OutcomeUnknownError`` (after
        aborting the attempt) when the broker went away while its records were under way."""
        if tag is not None and (tag.job, tag.topic, tag.queue, tag.start_offset) in self._refresh().winners:
            return False
        attempt = uuid.uuid4().hex
        lows = {}
        by_topic: dict[str, list[int]] = {}
        for (t, q) in writes:
            by_topic.setdefault(t, []).append(q)
        for t, queues in by_topic.items():  # one request per topic (``_raw_ends``)
            for q, low in zip(queues, self._raw_ends(targets[(t, queues[0])], queues)):
                lows[f"{t}/{q}"] = low
        rng_list = None if tag is None else [tag.job, tag.topic, tag.queue, tag.start_offset]
        # readable before the records (RocketMQ makes its commit log readable in order): no wait
        self._log_append({"t": "open", "a": attempt, "range": rng_list, "at": lows}, wait=False)
        outputs = {}
        try:
            for (t, q), recs in writes.items():
                first, end = self._send_queue(targets[(t, q)], q, recs, attempt)
                outputs[f"{t}/{q}"] = (first, end)
        except BaseException:
            try:
                self._log_append({"t": "abort", "a": attempt})
            finally:
                raise
        entry: dict[str, Any] = {"t": "commit", "a": attempt, "range": rng_list}
        if tag is not None:
            entry["tag"] = {"job": tag.job, "topic": tag.topic, "queue": tag.queue, "start_offset": tag.start_offset,
                            "end_offset": tag.end_offset, "meta": tag.meta, "batch_id": tag.batch_id,
                            "info": tag.info, "outputs": outputs}
        self._log_append(entry)  # read back up to the commit: decided
        return self._log.decided.get(attempt, False)

    # -- reading --------------------------------------------------------------------------------
    def _pulled(self, topic: _Topic, queue: int, start: int, end: int) -> Iterator[PulledMessage]:
        """The committed messages of ``[start, end)`` (end clipped at the stable end)."""
        end = min(end, self._stable_ends(topic, [queue])[0])
        decided = self._log.decided
        # what a crash recovery put back from the topic's life before its last deletion (module docstring)
        before = self._log.deleted_ms.get(topic.info.name, -1)
        offset = max(start, 0)
        while offset < end:
            messages, nxt, _end = self._pull(topic.broker, topic.info.name, queue, offset, min(_PULL, end - offset))
            for m in messages:
                if m.offset >= end:
                    return
                if m.store_timestamp <= before:
                    continue
                attempt = _parsed(m.properties_text)[4]
                if attempt is None or decided.get(attempt, True):
                    yield m
            if nxt <= offset:
                if not messages:
                    return
                nxt = messages[-1].offset + 1
            offset = nxt

    def read_records(self, topic: str, queue: int, start: int, end: int) -> Iterator[ReadRecord]:
        found = self._queue(topic, queue)
        for m in self._pulled(found, queue, start, end):
            k, born, hdrs, _tags = _unpack(m)
            yield (m.offset, k, m.body, born, m.store_timestamp, hdrs)

    def read(self, topic: str, queue: int | None = None, start: int = 0, end: int | None = None) -> list[Message]:
        found = self._get(topic)
        if queue is not None:
            self._queue(topic, queue)
        out = []
        for q in range(found.info.queues) if queue is None else [queue]:
            for m in self._pulled(found, q, start, 2**62 if end is None else end):
                k, born, hdrs, tags = _unpack(m)
                out.append(Message(topic, q, m.offset, k, m.body, born, m.store_timestamp, hdrs or {}, tags))
        return out

    committed_only = read

    def to_pandas(self, topic: str, queue: int | None = None, decode: bool = True) -> Any:
        """The topic's committed messages as a DataFrame, one row per message."""
        return messages_frame(self.read(topic, queue), decode)

    # -- compact topics -------------------------------------------------------------------------
    def read_latest(self, topic: str, queue: int, end: int | None = None) -> dict[MessageKey, tuple[Any, ...]]:
        """Per key, the latest committed record below ``end``: rstream reads it itself, so a result
        never depends on whether RocketMQ's compaction ran."""
        found = self._queue(topic, queue)
        latest: dict[MessageKey, tuple[Any, ...]] = {}
        for m in self._pulled(found, queue, 0, 2**62 if end is None else end):
            k, born, hdrs, tags = _unpack(m)
            latest[k] = (k, m.body, born, hdrs, tags)
        return latest

    def compacted_below(self, topic: str, queue: int) -> int:
        """The queue's first offset RocketMQ still has (0 until it removed records)."""
        found = self._queue(topic, queue)
        return self._client.min_offset(found.broker, topic, queue)

    # -- commit tags ----------------------------------------------------------------------------
    def _tags(self, job: str, topic: str, queue: int) -> list[CommitTag]:
        return [t for t in self._refresh().by_job.get(job, []) if t.topic == topic and t.queue == queue]

    def last_commit(self, job: str, topic: str, queue: int) -> CommitTag | None:
        tags = self._tags(job, topic, queue)
        return max(tags, key=lambda t: t.start_offset) if tags else None

    def find_commit(self, job: str, topic: str, queue: int, start_offset: int) -> CommitTag | None:
        return self._refresh().winners.get((job, topic, queue, start_offset))

    def commit_covering(self, job: str, topic: str, queue: int, offset: int) -> CommitTag | None:
        below = [t for t in self._tags(job, topic, queue) if t.start_offset <= offset]
        if not below:
            return None
        tag = max(below, key=lambda t: t.start_offset)
        return tag if offset < tag.end_offset else None

    def commits(self, job: str, after_seq: int = 0) -> list[CommitTag]:
        return [t for t in self._refresh().by_job.get(job, []) if t.seq > after_seq]

    def delete_commits(self, job: str) -> None:
        """Forget every commit tag of ``job`` (a job reset)."""
        self._log_append({"t": "forget", "job": job})

    def _pull(self, broker: str, topic: str, queue: int, offset: int,
              max_messages: int) -> tuple[list[PulledMessage], int, int]:
        """``Client.pull_log`` as ``READER_GROUP``, made on a broker that lacks it: a broker with
        ``autoCreateSubscriptionGroup=false`` refuses a pull by a group it does not know."""
        try:
            return self._client.pull_log(broker, topic, queue, offset, max_messages, READER_GROUP)
        except RemotingError as exc:
            if exc.code != SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
        self._client.create_group(broker, READER_GROUP)
        self._groups.add((broker, READER_GROUP))
        return self._client.pull_log(broker, topic, queue, offset, max_messages, READER_GROUP)

    # -- consumer offsets -----------------------------------------------------------------------
    def _group(self, broker: str, group: str) -> None:
        if (broker, group) not in self._groups:
            self._client.create_group(broker, group)
            self._groups.add((broker, group))

    def commit_offset(self, group: str, topic: str, queue: int, next_offset: int) -> None:
        found = self._queue(topic, queue)
        self._group(found.broker, group)
        self._client.update_consumer_offset(found.broker, group, topic, queue, next_offset)

    def committed_offset(self, group: str, topic: str, queue: int) -> int | None:
        found = self._queue(topic, queue)
        try:
            return self._client.query_consumer_offset(found.broker, group, topic, queue)
        except RemotingError as exc:
            if exc.code in (24, 26):  # no such subscription or group: never committed
                return None
            raise


def _credentials(access_key: str | None, secret_key: str | None) -> Credentials | None:
    if access_key is None and secret_key is None:
        return None
    if not access_key or not secret_key or not isinstance(access_key, str) or not isinstance(secret_key, str):
        raise BrokerError("give access_key and secret_key together (a user of a RocketMQ cluster with "
                          f"authentication on), got access_key={access_key!r} and a secret_key of "
                          f"{type(secret_key).__name__}")
    return Credentials(access_key, secret_key)


def _settle(log: _Log, attempt: str) -> None:
    for waiting in log.pending.values():
        waiting.pop(attempt, None)


def _system_topic(name: str) -> bool:
    return name in {"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "DefaultCluster",
                    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
                    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"} \
        or name.startswith(("rmq_sys_", "%RETRY%", "%DLQ%", "RMQ_SYS_", "rocketmq-broker-")) \
        or name.startswith("broker-") or name.endswith("_REPLY_TOPIC")


def _check_headers(headers: Mapping[str, str] | None) -> None:
    for name, text in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(text, str):
            raise BrokerError(f"headers must map str to str, got {name!r}: {text!r}")
        if name in _HIDDEN or "\x01" in name + text or "\x02" in name + text:
            raise BrokerError(f"header {name!r} is RocketMQ's or rstream's own, or holds a \\x01 or \\x02 "
                              "character, which RocketMQ's properties cannot carry: rename it")


def _key_property(key: MessageKey) -> str:
    """A key as properties text: a plain str as RocketMQ's ``KEYS``; bytes, an empty str or one that
    properties cannot carry in ``RSTREAM_KEY`` (base64)."""
    if type(key) is str and key and "\x01" not in key and "\x02" not in key:
        return f"KEYS\x01{key}\x02"
    if isinstance(key, str):
        return f"{_KEY}\x01s:{base64.b64encode(key.encode()).decode()}\x02"
    if isinstance(key, bytes):
        return f"{_KEY}\x01b:{base64.b64encode(key).decode()}\x02"
    raise BrokerError(f"message key must be str, bytes or None, got {type(key).__name__}: {key!r}")


def _unpack(m: PulledMessage) -> tuple[MessageKey, int, dict[str, str] | None, str | None]:
    """A message's key, born time, client headers (None when it has none) and tags."""
    key, born, headers, tags, _attempt = _parsed(m.properties_text)
    return key, m.born_timestamp if born is None else born, None if headers is None else dict(headers), tags


@functools.lru_cache(maxsize=16384)
def _parsed(text: str) -> tuple[MessageKey, int | None, dict[str, str] | None, str | None, str | None]:
    """What rstream reads from a message's properties text: its key, its own born time (None: the
    message's), the client's headers (None: none), tags and attempt. Cached: a batch's messages share
    a few texts (a task's attempt, a key per word); ``_unpack`` copies the headers."""
    props = parse_properties(text)
    raw = props.get(_KEY)
    key: MessageKey
    try:
        if raw is not None:
            data = base64.b64decode(raw[2:], validate=True)
            key = data if raw.startswith("b:") else data.decode()
        else:
            key = props.get("KEYS")
        born = int(props[_BORN]) if _BORN in props else None
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        raise ProtocolError(f"a message's {_KEY} or {_BORN} property is not what rstream writes there: "
                            f"{props.get(_KEY)!r}, {props.get(_BORN)!r} (another client's, or garbled)") from None
    headers = {k: v for k, v in props.items() if k not in _HIDDEN}
    return key, born, headers or None, props.get("TAGS"), props.get(_TXN)
