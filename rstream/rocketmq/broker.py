"""``RocketMQBroker``: the broker contract (``rstream.broker.base.Broker``) on a RocketMQ 5 cluster.

What it writes are ordinary RocketMQ messages: a record's key is the message's ``KEYS``, its tags
``TAGS``, its headers user properties, so any RocketMQ client reads them, and it reads what any
client wrote. A few properties of its own (``RSTREAM_*``, never shown as headers) carry what a
message cannot: a born time per record of a batch, a key that is bytes, and an append's attempt.

Queues across brokers. A RocketMQ topic's queues are (broker name, queue id) pairs, as RIP-58 names
them: a topic on two masters with 4 queues each has 8. The ``Broker`` contract numbers a topic's
queues ``0..queues-1``; rstream numbers them in the order of (broker name, queue id), so queue 5 of
that topic is ``broker-b:1`` (``queue_ids(topic)``, ``queue_label(topic, queue)``). A number never
changes while the topic lives: the numbering is written to the decision log when rstream creates a
topic (or first reads one that another tool made), and a broker that is down keeps its numbers (the
name server forgets its queues until it registers again). A topic that later has queues its
numbering does not hold (an operator added queues or a broker) is refused with an error that says so
(``adopt_queues`` numbers the new ones after the old, when no job reads the topic). ``create_topic``
spreads a topic's queues over the cluster's masters (as ``mqadmin updateTopic -c`` does, every
master), as evenly as it can: ``queues`` is the topic's total, the first brokers by name taking one
more when it does not divide (``topic_brokers`` or ``create_topic(brokers=...)`` chooses others).

Brokers that go away. Every request to a broker goes to the address the name server gives for its
name (``brokerAddrs[0]``, the master); one that cannot be reached is looked up again, so a broker
that moved, failed over or was replaced is found where it is now, and while it is not registered the
request waits, saying so in the ``rstream.rocketmq`` log every 10 s, for up to ``broker_wait_s``
seconds before it raises a ``BrokerError`` that names the broker. A topic's route is read again
every ``ROUTE_TTL_S`` seconds and when a broker says it has no such topic. ``namesrv`` may name
several name servers (``"ns1:9876;ns2:9876"``), each tried in turn.

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
an *abort* record came before: its writer's own (it broke off), or a reader's that gave up on it. A
reader gives up once ``txn_timeout_ms`` passed since the open in the log broker's time (the newest
entry's store time) or in its own steady clock since it first saw the attempt open, and its abort
counts only if the broker's store times of the abort and the open are that far apart: no host's wall
clock is ever compared with the broker's, so a reader whose clock is minutes off neither aborts a
writer in time nor waits for ever. A writer whose attempt lost to an abort, not to another attempt's
commit of its range, appends again under a new attempt (and raises after five such attempts in a
row): a range is never left unwritten. Every rstream reader, state replay included, reads committed
records only: a queue's end offset (``end_offsets``) stops before the first record of an undecided
attempt, and a lost attempt's records are skipped. Offsets are RocketMQ's own, so a lost attempt
leaves a hole in a queue's offsets that no rstream reader sees. A consumer outside rstream sees every message, lost attempts' too: ``committed_only(...)``
(or ``read``) gives it what committed. A sink whose consumers cannot filter is made with
``visible="on_commit"``: its records (``OnCommitRecords``) are sent as RocketMQ half messages, which no
consumer sees until the log decides them (``rstream.rocketmq.visible``): the open record names their
queues under ``half`` (no reader waits on them: they show in their queue once committed), and a lost
attempt keeps them with no end, so a checkpoint never forgets it while the broker may still ask about it.

A job's progress in RocketMQ's own tools: after a range commits, its end is committed as consumer group
``rstream-<job>``'s offset of the input queue (``progress_group``, ``mirror_progress``), so ``mqadmin
consumerProgress`` and RocketMQ Dashboard show the job's lag; rstream itself never reads those offsets.

A reader relies on two orders: (a) an attempt's open record is readable before any of its records
is, so a reader that reads a queue's end and then the log knows every attempt the end counts
records of, and clips the end at the attempt's low offset while it is undecided; (b) an attempt's
records are readable once its commit is, so a commit tag's ``outputs`` can be read at once (a job
that sees a range committed reads what it wrote). RocketMQ makes one broker's messages readable in
the order of its commit log, so on the log's broker both hold by sending in that order. On another
broker they are made to hold by waiting: the writer reads its open record back from the log before
it sends records to another broker, and waits until each other broker's readable end reaches the
records it sent there before it appends the commit (a broker that goes away meanwhile is waited
for; a writer that gives up aborts, and one whose attempt a reader aborted meanwhile, after
``txn_timeout_ms``, appends again under a new attempt). What this asks of the brokers: that one that acknowledged a
message keeps it (a broker JVM killed keeps it: its page cache outlives it; a machine that crashes
before flushing does not, unless the broker flushes synchronously or replicates: then a commit on
the log's broker can name records that another broker lost).

The decision log lives on one broker: the cluster's first master by name when it is first created
(every other master gets a read-only marker of it, so a client that starts while the log's broker
is down waits for it rather than making a second log). One log for every job keeps every decision
in one order that one read gives a reader of any topic, whichever jobs wrote it; logs of their own
per job would spread the load, but a reader would then need to know every job that writes a topic.

Retention. RocketMQ deletes commit-log files older than ``fileReservedTime`` (72 h by default), whatever
they hold; a queue's first offset then moves up. rstream's own data must outlive that, so it keeps
rewriting what still counts, and never reads the past it needs from before:

- the decision log gets a *checkpoint* every ``checkpoint_every`` entries (written by the process whose
  entry lands on the boundary) and whenever the last is older than a third of the retention: its state
  that counts (each input queue's last commit and the commits since the previous checkpoint, attempts
  still open, lost attempts whose records may still be read, topics' settings, numbering and
  deletions, compact queues' snapshots), in entries of up to 1 M characters. A client starts from the
  newest whole checkpoint, found reading the log back from its end, so a new process reads a bounded
  tail, not the whole log; one that finds entries deleted and no checkpoint raises;
- a compact topic's queue (state, tables) gets a *snapshot*: its latest record per key as of its
  stable end, written to ``<topic>-rstream-snapshots`` (same queue number, hidden from ``topics()``),
  then noted in the decision log, which makes it count; once ``compact_min`` records (and at least as
  many as the snapshot held) came after it, and whenever it is older than a third of the retention.
  ``read_latest``, ``read_compacted`` (state replay) and ``compacted_below`` start from the newest
  snapshot whose tail RocketMQ still has; records deleted with no snapshot standing for them raise.

``maintain()`` does the rewriting by age; appends and a waiting job's ``data_version`` call it. So what
must hold is that some rstream process using the cluster runs at least once a third of the retention
(a running job does). The retention is the masters' shortest ``fileReservedTime`` unless
``retention_s`` says it; ages are this host's clock against store times, where a skew of minutes is
nothing beside a third of the retention.

Compact topics are ordinary RocketMQ topics, their setting kept in the decision log: RocketMQ 5's
``cleanup.policy=COMPACTION`` topics serve reads from a compaction store built in the background
(a record just written is not readable yet, read in 5.3.3's ``DefaultMessageStore.getMessage``) and
refuse records without a key, so rstream reads a compact topic as the latest record per key itself.

A deleted topic's messages come back after a crash. RocketMQ deletes a topic's queue index, never
its messages in the commit log; a broker restarted after a crash rebuilds its queue indexes from
the commit log, and in 5.3.3 it puts a deleted topic's messages back into every queue of that name
that is empty then, or created later (``CommitLog.recoverAbnormally`` dispatches all it reads;
tests/rocketmq/test_topic_incarnations.py shows it). So ``delete_topic`` notes the deletion in the
decision log, and readers skip the messages of a topic stored before its last deletion (the store
times of the topic's brokers against the log broker's: their clocks must agree within a few
milliseconds, as NTP keeps them). A topic deleted by another tool (``mqadmin deleteTopic``) has no
such note: give a new topic a new name.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import logging
import marshal
import os
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from rstream.broker.base import (
    BrokerError,
    CommitTag,
    Message,
    MessageKey,
    ReadRecord,
    RecordBlock,
    RecordTuple,
    SendResult,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    blocks_of,
    messages_frame,
    validate_topic_name,
)
from rstream.broker.batch import visible_on_commit
from rstream.rocketmq.remoting import (
    SUBSCRIPTION_GROUP_NOT_EXIST,
    SYSTEM_BUSY,
    SYSTEM_PROPERTIES,
    TOPIC_NOT_EXIST,
    BatchBody,
    Client,
    Credentials,
    HalfMessage,
    OutcomeUnknownError,
    ProtocolError,
    PulledMessage,
    RemotingError,
    TLSOption,
    message_head,
    name_servers,
    parse_properties,
    portable_tls,
    properties_field,
    properties_string,
)

#: The decision log: open, commit and abort records of every append that needs one (one queue).
TXN_TOPIC = "rstream_txn"
#: The end of the name of the topic that holds a compact topic's snapshots (``snapshot_topic``).
SNAPSHOTS_SUFFIX = "-rstream-snapshots"
#: The consumer group whose offsets rstream's readers never commit (a pull needs a group name).
READER_GROUP = "rstream-reader"
#: Seconds between two reads of a topic's route from the name server (queues added, a broker gone).
ROUTE_TTL_S = 30.0
#: Where a broker that cannot be reached is reported while a request waits for it.
LOG = logging.getLogger("rstream.rocketmq")

#: A queue as RocketMQ names it: (broker name, queue id).
QueueId = tuple[str, int]

_TXN, _BORN, _KEY, _SNAP, _PACK = "RSTREAM_TXN", "RSTREAM_BORN", "RSTREAM_KEY", "RSTREAM_SNAP", "RSTREAM_PACK"
#: A half message's place in its attempt's records of its queue, and that queue's end before the first was
#: sent: where its committed copy can be looked for (``visible.CheckAnswerer``).
HALF_SEQ, HALF_AT = "RSTREAM_SEQ", "RSTREAM_AT"
_OWN = frozenset({_TXN, _BORN, _KEY, _SNAP, _PACK, HALF_SEQ, HALF_AT})
_HIDDEN = SYSTEM_PROPERTIES | _OWN
_MAX_BATCH_BYTES = 3 << 20  # under RocketMQ's default 4 MB per request
# RocketMQ 5.3.3 advances a queue's next offset by a batch's message count cast to a short
# (QueueOffsetOperator.increaseQueueOffset(String, short)): a batch of more than 32767 messages wraps it,
# and the queue's offsets then overlap, losing messages without an error. So a batch holds fewer.
_MAX_BATCH_MESSAGES = 32767
_PULL = 2048
# Seconds a connection to a broker tries its address before RocketMQBroker asks the name server where
# the broker is now (a broker that moved, failed over or was replaced registers another address).
_RECONNECT_S = 2.0
_NOTE_EVERY_S = 10.0
_PIECE = 1 << 20  # characters of a checkpoint of the decision log per entry (RocketMQ takes 4 MB a message)
_SNAPSHOTS_KEPT = 4  # a compact queue's newest snapshots the decision log keeps notes of (older states' reads)
_FILE_RESERVED_HOURS = 72  # RocketMQ's default fileReservedTime
_GIVEN_UP_MAX = 5  # attempts of one append that readers gave up on before ``append`` raises
_SCAN_EVERY_S = 600.0  # ``maintain`` looks at ages at most this often (and a twelfth of the retention)
_READ, _WRITE = 4, 2  # RocketMQ's permission bits (PermName)
_HALF_PIPELINE = 4096  # half messages per pipelined request run (a run cut off aborts the attempt)
# A packed topic (``create_topic(packed=True)``: a shuffle topic, which only rstream reads) stores up to
# 2**_PACK_BITS records in one message; record i of message m has offset m << _PACK_BITS | i.
_PACK_BITS = 12
_PACK_RECORDS = 1 << _PACK_BITS
_PACK_BYTES = 1 << 20  # of records' keys and bodies in one message at most (RocketMQ takes 4 MB a message)

T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# -- how rstream numbers a topic's queues (pure: tests/rocketmq/test_queue_numbering.py) ------------------
def progress_group(job: str) -> str:
    """The consumer group whose offsets follow job ``job``'s committed ranges: ``rstream-<job>``."""
    return f"rstream-{job}"


def route_queues(route: Mapping[str, Any] | None) -> tuple[QueueId, ...]:
    """A route's queues in rstream's order: (broker name, queue id), by broker name, then queue id.
    A broker's queues are the larger of its read and write queue counts (a topic whose write queues
    an operator shrank keeps its other queues readable)."""
    found: set[QueueId] = set()
    for data in (route or {}).get("queueDatas") or []:
        count = max(int(data.get("readQueueNums", 0)), int(data.get("writeQueueNums", 0)))
        found.update((str(data["brokerName"]), i) for i in range(count))
    return tuple(sorted(found))


def spread(queues: int, brokers: Iterable[str]) -> dict[str, int]:
    """How many of a new topic's ``queues`` each broker holds: as even as it gets, the first brokers
    by name taking one more when ``queues`` does not divide (a broker taking none is left out)."""
    names = sorted(set(brokers))
    if not names:
        raise BrokerError("no broker to put the topic's queues on")
    each, extra = divmod(queues, len(names))
    counts = {name: each + (1 if i < extra else 0) for i, name in enumerate(names)}
    return {name: n for name, n in counts.items() if n}


def numbered(counts: Mapping[str, int]) -> tuple[QueueId, ...]:
    """The queues of brokers holding ``counts`` queues each, in rstream's order."""
    return tuple(sorted((name, i) for name, n in counts.items() for i in range(n)))


def unnumbered(numbering: Sequence[QueueId], seen: Iterable[QueueId]) -> list[QueueId]:
    """The queues of ``seen`` (a route's) that ``numbering`` has no number for: queues added later."""
    known = set(numbering)
    return sorted(q for q in seen if q not in known)


def label(queue: QueueId) -> str:
    """A queue as a person reads it: ``"broker-b:3"``."""
    return f"{queue[0]}:{queue[1]}"


def snapshot_topic(name: str) -> str:
    """The topic holding rstream's snapshots of compact topic ``name``: ``<name>-rstream-snapshots``
    (its end replaced by a hash of ``name`` past RocketMQ's 127 characters)."""
    out = name + SNAPSHOTS_SUFFIX
    if len(out) > 127:
        out = f"{name[:127 - len(SNAPSHOTS_SUFFIX) - 9]}-{zlib.crc32(name.encode()):08x}{SNAPSHOTS_SUFFIX}"
    return out


def note(text: str) -> None:
    """A progress note about the cluster (a broker waited for, and back): a warning of the
    ``rstream.rocketmq`` logger where logging is set up, else a line on standard output, where a
    notebook shows it as the cell's text (Python's last-resort handler would print it on standard
    error: a red box for a learner, for what is no error)."""
    if LOG.hasHandlers():
        LOG.warning(text)
    else:
        print(text, flush=True)


@dataclass
class _Topic:
    info: TopicInfo
    queue_ids: tuple[QueueId, ...]  # rstream's queue q is queue_ids[q]
    read_at: float = 0.0  # time.monotonic() when its route was last read
    packed: bool = False  # many records a message, offsets message << _PACK_BITS | index (``create_topic``)
    by_broker: dict[str, list[int]] = field(init=False, repr=False)  # broker name -> its queues (rstream's numbers)
    #: a packed topic's records a message, by rstream's queue and message offset (``records_between``)
    counts: dict[int, dict[int, int]] = field(default_factory=dict, repr=False)

    @property
    def shift(self) -> int:
        """Bits of a record's offset below its message's offset: _PACK_BITS on a packed topic, else 0."""
        return _PACK_BITS if self.packed else 0

    def __post_init__(self) -> None:
        self.by_broker = {}
        for q, (name, _queue_id) in enumerate(self.queue_ids):
            self.by_broker.setdefault(name, []).append(q)


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
    packed: set[str] = field(default_factory=set)  # the topics created packed (records packed into messages)
    deleted_ms: dict[str, int] = field(default_factory=dict)  # topic -> the broker's time of its last deletion
    numbering: dict[str, tuple[QueueId, ...]] = field(default_factory=dict)  # topic -> its queues, numbered
    # what outlives the broker's retention (the module's docstring, "Retention"):
    loaded: bool = False  # whether the log's latest checkpoint (or its start) was found
    last_ms: int = 0  # the broker's store time of the newest entry read: the log broker's clock, as late as known
    undecided: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)  # attempt -> (open's ms, queues)
    lost: dict[str, dict[str, int | None]] = field(default_factory=dict)  # attempt -> queue -> its records' end
    snapshots: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "topic/q" -> notes, oldest first
    checkpoint: tuple[int, int, int] = (-1, 0, 0)  # the newest checkpoint: (its last entry, its ms, as of)


class _Waiting:
    """A request waiting for a broker: says so in the log every ``_NOTE_EVERY_S`` and gives up after ``wait_s``."""

    def __init__(self, broker: str, what: str, wait_s: float, namesrv: str) -> None:
        self.broker, self.what, self.wait_s, self.namesrv = broker, what, wait_s, namesrv
        self.began = time.monotonic()
        self.noted = 0.0
        self.pause = 0.05

    def note(self, problem: str) -> None:
        waited = time.monotonic() - self.began
        if waited > self.wait_s:
            raise BrokerError(
                f"RocketMQ broker {self.broker} has not been reachable for {waited:.0f} s ({problem}), so {self.what} "
                f"could not be done: start it again (LocalRocketMQ.start_broker), or start a broker named "
                f"{self.broker!r} in its place, registered with the name server {self.namesrv}; "
                "RocketMQBroker(broker_wait_s=...) waits longer")
        if not self.noted or time.monotonic() - self.noted >= _NOTE_EVERY_S:
            self.noted = time.monotonic()
            note(f"rstream is waiting for RocketMQ broker {self.broker} ({problem}) to {self.what}: waited "
                 f"{waited:.0f} s of {self.wait_s:.0f} s; it goes on once the broker, or one registered under its "
                 "name, is back")
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, 1.0)

    def done(self) -> None:
        if self.noted:
            note(f"RocketMQ broker {self.broker} is back after {time.monotonic() - self.began:.1f} s: rstream goes on")


class RocketMQBroker:
    """The ``Broker`` contract on the RocketMQ cluster whose name server is ``namesrv`` ("host:port",
    or several: "ns1:9876;ns2:9876").

    ``cluster``: the cluster whose masters hold the topics rstream creates (default: every master the
    name server knows). ``topic_brokers``: the broker names to create topics on instead (default:
    every master). ``txn_timeout_ms``: an append undecided for that long (its writer died and nothing
    retried its range) is aborted by the next reader that waits on it, so readers never wait forever.
    ``broker_wait_s``: how long a request waits for a broker that went away before it raises.

    What outlives RocketMQ's retention (the module's docstring): ``compact_min``: a compact queue gets a
    new snapshot once that many records (and at least as many as its last snapshot held) came after
    its last one; ``checkpoint_every``: the decision log gets a checkpoint every that many entries;
    ``retention_s``: how long the brokers keep a commit-log file (default: the masters' shortest
    ``fileReservedTime``, asked once): a snapshot or checkpoint older than a third of it is written
    anew by ``maintain()``, which appends and the idle watch of a running job call.

    A cluster with authentication on: ``access_key`` and ``secret_key`` of one of its users sign every
    request, as RocketMQ's own clients sign them (``remoting.sign``); they travel with this object to
    Spark's executors. A refused key raises ``CredentialsRefusedError``, a missing permission
    ``PermissionDeniedError`` naming the topic or group and the permission (both ``BrokerError``s).
    ``tls``: True (the servers' certificates checked against the system's CAs), a CA file's path, or
    an ``ssl.SSLContext`` (which cannot travel to executors: give a path for jobs).

    ``mirror_progress``: commit each committed range's end as consumer group ``rstream-<job>``'s offset
    (True, default: one request per range). ``check_after_s``: how long after a half message (a sink's
    ``visible="on_commit"``) is sent only its writer may end it, and after which only the broker's
    check-back does (whole seconds, default 60; the writer commits within the first half of it, else
    leaves its records to the check-back: ``rstream.rocketmq.visible``).
    """

    #: Offsets may skip what an attempt that lost its race wrote (see the module's docstring).
    gapless = False

    def __init__(self, namesrv: str, *, cluster: str | None = None, timeout: float = 10.0,
                 txn_timeout_ms: int = 300_000, broker_wait_s: float = 300.0,
                 topic_brokers: Sequence[str] | None = None, compact_min: int = 10_000,
                 checkpoint_every: int = 4096, retention_s: float | None = None, access_key: str | None = None,
                 secret_key: str | None = None, tls: TLSOption = False, mirror_progress: bool = True,
                 check_after_s: int = 60) -> None:
        name_servers(namesrv)  # raises for what is no list of host:port
        if compact_min < 1 or checkpoint_every < 2:
            raise BrokerError(f"compact_min={compact_min!r} and checkpoint_every={checkpoint_every!r}: give at least "
                              "1 and 2 (records of a compact queue between its snapshots, entries of the log between "
                              "its checkpoints)")
        if retention_s is not None and retention_s <= 0:
            raise BrokerError(f"retention_s={retention_s!r}: give the seconds the brokers keep a commit-log file, "
                              "or None to ask the broker (fileReservedTime)")
        self.compact_min, self.checkpoint_every, self.retention_s = compact_min, checkpoint_every, retention_s
        self.namesrv, self.cluster, self.timeout, self.txn_timeout_ms = namesrv, cluster, timeout, txn_timeout_ms
        if not isinstance(check_after_s, int) or check_after_s < 2:
            raise BrokerError(f"check_after_s={check_after_s!r}: give the whole seconds (2 at least) after which a half "
                              "message is ended by the broker's check-back only")
        self.broker_wait_s, self.mirror_progress, self.check_after_s = broker_wait_s, mirror_progress, check_after_s
        self.topic_brokers = None if topic_brokers is None else tuple(topic_brokers)
        self.access_key, self.tls = access_key, tls
        self._secret_key = secret_key
        self._client = Client(namesrv, timeout, reconnect_s=_RECONNECT_S,
                              credentials=_credentials(access_key, secret_key), tls=tls)
        self._topics: dict[str, _Topic] = {}
        self._log = _Log()
        self._lock = threading.RLock()
        self._groups: set[tuple[str, str]] = set()
        self._watched: dict[str, _Topic] = {}  # the topics whose end offsets were asked (``data_version``)
        self._addrs: dict[str, str] = {}  # broker name -> its master's address, as the name server said last
        self._log_broker: str | None = None  # the name of the broker holding the decision log
        self._rr = itertools.count(os.getpid())
        self._seen_open: dict[str, float] = {}  # attempt -> time.monotonic() when this reader first saw it open
        self._maintained = time.monotonic()  # when ``maintain()`` last looked at ages (first: a while after this)
        self._checkpointing = False
        self._retention_ms: int | None = None if retention_s is None else int(retention_s * 1000)
        self._wrote: dict[tuple[str, int], int] = {}  # the last append's queues -> their end after it
        self._half_sent_ms: dict[str, int] = {}  # attempt -> when it sent its first half message (this host's ms)
        self._mirrored: set[tuple[str, str]] = set()  # (broker, group) made for a job's progress (``_mirror_progress``)
        self._mirror_failed: set[str] = set()  # jobs whose progress could not be mirrored (said once)

    def __getstate__(self) -> dict[str, Any]:
        return {"namesrv": self.namesrv, "cluster": self.cluster, "timeout": self.timeout,
                "txn_timeout_ms": self.txn_timeout_ms, "broker_wait_s": self.broker_wait_s,
                "topic_brokers": self.topic_brokers, "addrs": dict(self._addrs), "log_broker": self._log_broker,
                "compact_min": self.compact_min, "checkpoint_every": self.checkpoint_every,
                "retention_s": self.retention_s, "mirror_progress": self.mirror_progress,
                "check_after_s": self.check_after_s, **self._security()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namesrv"], cluster=state["cluster"], timeout=state["timeout"],  # type: ignore[misc]
                      txn_timeout_ms=state["txn_timeout_ms"], broker_wait_s=state.get("broker_wait_s", 300.0),
                      topic_brokers=state.get("topic_brokers"), compact_min=state.get("compact_min", 10_000),
                      checkpoint_every=state.get("checkpoint_every", 4096), retention_s=state.get("retention_s"),
                      access_key=state.get("access_key"), secret_key=state.get("secret_key"),
                      tls=state.get("tls", False), mirror_progress=state.get("mirror_progress", True),
                      check_after_s=state.get("check_after_s", 60))
        self._addrs.update(state.get("addrs") or {})
        self._log_broker = state.get("log_broker")

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
    def masters(self) -> dict[str, str]:
        """The masters registered with the name server now (of ``cluster`` if given): broker name -> address."""
        info = self._client.cluster_info()
        names = info.get("clusterAddrTable", {}).get(self.cluster) if self.cluster else None
        out = {}
        for name, data in info.get("brokerAddrTable", {}).items():
            addr = (data.get("brokerAddrs") or {}).get("0")
            if addr and (names is None or name in names):
                out[str(name)] = str(addr)
        self._addrs.update(out)
        return out

    def _masters_now(self, what: str) -> dict[str, str]:
        """``masters()``, waiting (``broker_wait_s``) while there is none."""
        waiting = None
        while True:
            found = self.masters()
            if found:
                if waiting is not None:
                    waiting.done()
                return found
            waiting = waiting or _Waiting("(any master)", what, self.broker_wait_s, self.namesrv)
            waiting.note(f"the name server at {self.namesrv} knows no master broker"
                         + (f" of cluster {self.cluster!r}" if self.cluster else "") + ": start one")

    def _learn(self, route: Mapping[str, Any] | None) -> None:
        for data in (route or {}).get("brokerDatas") or []:
            addr = (data.get("brokerAddrs") or {}).get("0")
            if addr:
                self._addrs[str(data["brokerName"])] = str(addr)

    def _at(self, broker: str, call: Callable[..., T], *args: Any, what: str = "answer a request") -> T:
        """``call(address, *args)`` on the master of ``broker`` (a broker name). While the broker cannot
        be reached, or is not registered, asks the name server where it is and waits (``_Waiting``).
        A send cut off mid-way raises ``OutcomeUnknownError`` at once (whether it was stored is unknown)."""
        waiting = None
        while True:
            addr = self._addrs.get(broker)
            problem = f"not registered with the name server at {self.namesrv}"
            if addr is None:
                try:
                    addr = self.masters().get(broker)
                except RemotingError as exc:  # the name servers are away too: wait for both
                    if exc.code is not None:
                        raise
                    problem = str(exc)
            if addr is not None:
                try:
                    out = call(addr, *args)
                    if waiting is not None:
                        waiting.done()
                    return out
                except (OutcomeUnknownError, ProtocolError):  # unknown outcome; a server rstream cannot talk to
                    raise
                except RemotingError as exc:
                    if exc.code == TOPIC_NOT_EXIST:  # moved or deleted: every route is read again at its next use
                        for name in [n for n in self._topics if n != TXN_TOPIC]:
                            del self._topics[name]
                    if exc.code not in (None, SYSTEM_BUSY):
                        raise
                    problem = f"{addr}: {exc.__cause__ or exc}"
                if self._addrs.get(broker) == addr:
                    del self._addrs[broker]  # where is it now? (moved, failed over, replaced)
            waiting = waiting or _Waiting(broker, what, self.broker_wait_s, self.namesrv)
            waiting.note(problem)

    def home_broker(self) -> str:
        """The address of the broker that holds the decision log."""
        self._txn_topic()
        assert self._log_broker is not None
        return self._at(self._log_broker, lambda addr: addr)

    def _lookup(self, name: str, fresh: bool = False) -> _Topic | None:
        """The topic, its route read again if older than ``ROUTE_TTL_S`` (or ``fresh``); None if it does
        not exist. Raises ``BrokerError`` when the route has queues the topic's numbering lacks."""
        found = self._topics.get(name)
        if found is not None and not fresh and time.monotonic() - found.read_at < ROUTE_TTL_S:
            return found
        if name == TXN_TOPIC:
            return self._txn_topic()
        try:
            route = self._client.route(name)
        except RemotingError as exc:
            if exc.code is not None or found is None:
                raise
            found.read_at = time.monotonic()  # the name servers are away: the route it had, read again later
            return found
        self._learn(route)
        seen = route_queues(route)
        log = self._refresh()
        numbering = log.numbering.get(name)
        if numbering is None:
            if not seen:
                # The name server forgets a broker's routes the moment it goes away, until it registers
                # again (a restart): the brokers themselves still know their topics.
                seen = self._queues_in_configs(name)
                if not seen:
                    return None
            # first seen (made by another tool): numbered now, for every reader after this one
            self._log_append({"t": "numbering", "topic": name, "queues": [list(q) for q in seen]})
            numbering = self._refresh().numbering.get(name, seen)
        elif not seen and not self._may_exist(name, numbering):
            return None
        added = unnumbered(numbering, seen)
        if added:
            self._topics.pop(name, None)
            raise BrokerError(
                f"topic {name!r} now has queues {', '.join(map(label, added))} beyond the {len(numbering)} that rstream "
                f"numbered ({', '.join(map(label, numbering))}); someone added queues or a broker to it. rstream never "
                "renumbers a topic's queues by itself (a job's state and offsets are per queue number): once no job "
                f"reads it, broker.adopt_queues({name!r}) numbers the new queues after the old ones")
        topic = _Topic(TopicInfo(name, len(numbering), name in log.compact), tuple(numbering), time.monotonic(),
                       name in log.packed)
        self._topics[name] = topic
        return topic

    def _queues_in_configs(self, name: str) -> tuple[QueueId, ...]:
        """The topic's queues as the registered masters' own topic configs have them."""
        found: list[QueueId] = []
        for broker, addr in sorted(self.masters().items()):
            config = self._client.topic_config(addr, name)
            if config is not None:
                count = max(int(config.get("readQueueNums", 0)), int(config.get("writeQueueNums", 0)))
                found += [(broker, i) for i in range(count)]
        return tuple(sorted(found))

    def _may_exist(self, name: str, numbering: Sequence[QueueId]) -> bool:
        """Whether a topic rstream numbered, which the name server routes no queue of, still exists:
        a registered broker of it has it, or none of its brokers is registered (they are away)."""
        masters = self.masters()
        mine = sorted({broker for broker, _ in numbering} & set(masters))
        return not mine or any(self._client.topic_config(masters[b], name) is not None for b in mine)

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

    def queue_ids(self, topic: str) -> list[QueueId]:
        """The topic's queues as RocketMQ names them, (broker name, queue id), in rstream's order:
        rstream's queue ``q`` is ``queue_ids(topic)[q]``."""
        return list(self._get(topic).queue_ids)

    def queue_label(self, topic: str, queue: int) -> str:
        """Queue ``queue`` of ``topic`` as RocketMQ names it: ``"broker-b:3"``."""
        return label(self._queue(topic, queue).queue_ids[queue])

    def adopt_queues(self, name: str) -> TopicInfo:
        """Number the queues that were added to topic ``name`` (by an operator, or a broker that joined)
        after its old ones, which keep their numbers. Only while no job reads the topic: a job's state
        topics have as many queues as its source topics had."""
        route = self._client.route(validate_topic_name(name))
        self._learn(route)
        numbering = self._refresh().numbering.get(name)
        if numbering is None:
            return self.topic(name)
        added = unnumbered(numbering, route_queues(route))
        if added:
            self._log_append({"t": "numbering", "topic": name, "queues": [list(q) for q in (*numbering, *added)],
                              "adopt": True})
        self._topics.pop(name, None)
        return self.topic(name)

    # -- topics ---------------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 8, compact: bool = False, *,
                     brokers: Sequence[str] | None = None, packed: bool = False) -> TopicInfo:
        """Create a topic of ``queues`` queues in all, spread over ``brokers`` (names; default
        ``topic_brokers``, else every master of the cluster): ``spread``.

        ``packed``: a topic only rstream reads (a shuffle topic): an append stores up to 4096 of a queue's
        records in one RocketMQ message (its records' keys, bodies, times, headers and tags, marshalled),
        so RocketMQ stores, indexes and serves one message where it would many. A record keeps an offset
        of its own, ``message offset << 12 | its index in the message``: in order, never dense (the
        ``Broker`` contract's ``packed``). A topic that exists keeps how it was made."""
        validate_topic_name(name)
        if not isinstance(queues, int) or queues < 1:
            raise BrokerError(f"a topic needs at least one queue, got queues={queues!r}")
        if packed and compact:
            raise BrokerError(f"topic {name!r}: a compact topic is read as the latest record per message key, "
                              "so it cannot be packed; give compact=True or packed=True, not both")
        existing = self._lookup(name)
        wanted = TopicInfo(name, queues, bool(compact))
        if existing is not None:
            if existing.info != wanted:
                raise TopicExistsError(f"topic {name!r} exists with {existing.info.queues} queues"
                                       f"{' (compact)' if existing.info.compact else ''}; asked for {queues}"
                                       f"{' (compact)' if compact else ''}. Use another name or delete it first")
            return existing.info
        masters = self._masters_now(f"create topic {name!r}")
        chosen = list(brokers if brokers is not None else self.topic_brokers or masters)
        missing = sorted(set(chosen) - set(masters))
        if missing or not chosen:
            raise BrokerError(f"cannot create topic {name!r} on brokers {chosen}: "
                              + (f"{', '.join(missing)} is not a registered master" if missing else "none given")
                              + f"; the masters registered now are {', '.join(sorted(masters)) or 'none'}")
        counts = spread(queues, chosen)
        numbering = numbered(counts)
        # said first: a topic is never seen without its setting and its numbering
        made: dict[str, Any] = {"t": "topic", "topic": name, "compact": bool(compact),
                                "queues": [list(q) for q in numbering]}
        if packed:
            made["packed"] = True
        self._log_append(made)
        for broker, count in sorted(counts.items()):
            self._at(broker, self._client.create_topic, name, count, what=f"create topic {name!r}")
        deadline = time.monotonic() + 15
        while set(route_queues(self._client.route(name))) != set(numbering):
            # each broker registers it with the name server (other clients ask it)
            if time.monotonic() > deadline:
                raise BrokerError(f"RocketMQ created topic {name!r} on {', '.join(sorted(counts))} but its name "
                                  "server never routed all of its queues")
            time.sleep(0.05)
        return self._get(name).info

    def topic(self, name: str) -> TopicInfo:
        return self._get(name).info

    def has_topic(self, name: str) -> bool:
        return self._lookup(name) is not None

    def topics(self) -> list[TopicInfo]:
        found: dict[str, int] = {}
        writable: set[str] = set()
        for broker in sorted(self._masters_now("list topics")):
            configs = self._at(broker, self._client.topic_configs, what="list topics")
            for name, config in configs.items():
                found[name] = found.get(name, 0) + max(int(config.get("readQueueNums", 0)),
                                                       int(config.get("writeQueueNums", 0)))
                if config.get("perm", 0) & 6 == 6:
                    writable.add(name)
        log = self._refresh()
        out = []
        for name in sorted(found):
            if name == TXN_TOPIC or name not in writable or _system_topic(name) or name.endswith(SNAPSHOTS_SUFFIX):
                continue
            queues = len(log.numbering[name]) if name in log.numbering else found[name]
            out.append(TopicInfo(name, queues, name in log.compact))
        return out

    def delete_topic(self, name: str) -> None:
        topic = self._get(name)
        if topic.info.compact and self.has_topic(snapshot_topic(name)):
            self.delete_topic(snapshot_topic(name))
        for broker in topic.by_broker:
            self._at(broker, self._client.delete_topic_in_broker, name, what=f"delete topic {name!r}")
        self._client.delete_topic_in_namesrv(name)
        self._topics.pop(name, None)
        with self._lock:
            self._watched.pop(name, None)
        self._log_append({"t": "forget", "topic": name})  # its commit tags, numbering and messages go with it
        time.sleep(0.002)  # a topic made anew after this returns is stamped a later millisecond than its deletion

    # -- the decision log -----------------------------------------------------------------------
    def _txn_topic(self) -> _Topic:
        """The decision log: one queue on one broker, found (or made, the first time) and never moved.

        Made on the cluster's first master by name, with a read-only marker of the same name on every
        other master: a client that starts while the log's broker is down finds a marker and waits
        for that broker, where it would otherwise make a second log."""
        found = self._topics.get(TXN_TOPIC)
        if found is not None:
            return found
        waiting = None
        while self._log_broker is None:
            route = self._client.route(TXN_TOPIC)
            self._learn(route)
            holders = sorted(d["brokerName"] for d in (route or {}).get("queueDatas") or [] if d["perm"] & _WRITE)
            markers = bool(route and route.get("queueDatas"))
            if not holders:
                masters = self.masters()
                configs = {b: self._client.topic_config(a, TXN_TOPIC) for b, a in masters.items()}
                holders = sorted(b for b, c in configs.items() if c is not None and int(c.get("perm", 6)) & _WRITE)
                markers = markers or any(c is not None for c in configs.values())
                if not holders and not markers and masters:  # the first time on this cluster
                    first, *others = sorted(masters)
                    self._client.create_topic(masters[first], TXN_TOPIC, 1)
                    for other in others:
                        self._client.create_topic(masters[other], TXN_TOPIC, 1, perm=_READ)
                    holders = [first]
            if holders:
                self._log_broker = holders[0]
                break
            waiting = waiting or _Waiting("(the decision log's)", f"read the decision log {TXN_TOPIC}",
                                          self.broker_wait_s, self.namesrv)
            waiting.note("the broker holding it is not registered" if markers else "no master is registered")
        if waiting is not None:
            waiting.done()
        topic = _Topic(TopicInfo(TXN_TOPIC, 1, False), ((self._log_broker, 0),), time.monotonic())
        self._topics[TXN_TOPIC] = topic
        return topic

    def _log_append(self, entry: dict[str, Any], wait: bool = True) -> int:
        """Append ``entry`` to the decision log; with ``wait``, return once a reader sees it."""
        topic = self._txn_topic()
        body = json.dumps(entry, separators=(",", ":")).encode()
        offset = self._at(topic.queue_ids[0][0], self._client.send, TXN_TOPIC, 0, body,
                          {"KEYS": str(entry.get("a", entry["t"]))}, now_ms(), "rstream-writer",
                          True, what="append to the decision log")  # repeatable: the log's first word counts
        if wait:
            self._refresh(until=offset + 1)
        if (offset + 1) % self.checkpoint_every == 0 and not self._checkpointing:
            self._checkpointing = True  # the entry on the boundary elects its writer to write the next checkpoint
            try:
                self.checkpoint()
            except (BrokerError, RemotingError) as exc:  # another process writes one later (``maintain``)
                LOG.warning("rstream could not write a checkpoint of the decision log %s: %s", TXN_TOPIC, exc)
            finally:
                self._checkpointing = False
        return offset

    def _max_offset(self, topic: _Topic, queue: int) -> int:
        broker, queue_id = topic.queue_ids[queue]
        return self._at(broker, self._client.max_offset, topic.info.name, queue_id,
                        what=f"read the end of {topic.info.name}/{queue}")

    def _await(self, topic: _Topic, queue: int, end: int) -> None:
        """Wait until a reader sees the queue reach ``end``: RocketMQ acknowledges a send once it is in
        the commit log and makes it readable a moment later (its reput service); after this, what
        this broker object wrote reads back, here and in any other process."""
        self._await_ends(topic, [queue], [end])

    def _await_ends(self, topic: _Topic, queues: Sequence[int], ends: Sequence[int]) -> None:
        """``_await`` for several queues of a topic: one request per broker and look (``_raw_ends``: one
        ``GET_MAX_OFFSET`` for a broker's one queue)."""
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while any(now < end for now, end in zip(self._raw_ends(topic, queues), ends)):
            if time.monotonic() > deadline:
                raise BrokerError(f"RocketMQ acknowledged records of {topic.info.name} queues "
                                  f"{', '.join(label(topic.queue_ids[q]) for q in queues)} up to offsets {list(ends)} "
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
            broker = self._txn_topic().queue_ids[0][0]
            if not log.loaded:
                self._load_log(log, broker)
            deadline = pause = 0.0
            while True:
                messages, nxt, end = self._pull(broker, TXN_TOPIC, 0, log.next_offset, _PULL, "read the decision log")
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

    def _log_range(self, broker: str, start: int, end: int) -> Iterator[PulledMessage]:
        """The decision log's entries in ``[start, end)``, in order (holes stepped over)."""
        offset = start
        while offset < end:
            messages, nxt, _end = self._pull(broker, TXN_TOPIC, 0, offset, min(_PULL, end - offset),
                                             "read the decision log")
            for m in messages:
                if m.offset < end:
                    yield m
            offset = max(nxt, messages[-1].offset + 1) if messages else max(nxt, offset + 1)

    def _load_log(self, log: _Log, broker: str) -> None:
        """Start ``log`` from the decision log's newest complete checkpoint (found reading back from
        its end), or from its first entry when it has none and RocketMQ deleted none of it."""
        first = self._at(broker, self._client.min_offset, TXN_TOPIC, 0, what="read the decision log")
        end = self._at(broker, self._client.max_offset, TXN_TOPIC, 0, what="read the decision log")
        found: tuple[int, dict[str, Any], int] | None = None
        at = end
        while at > first and found is None:
            lo = max(first, at - _PULL)
            for m in reversed(list(self._log_range(broker, lo, at))):
                entry = json.loads(m.body)
                if entry["t"] == "ckpt" and entry["i"] == entry["n"] - 1:
                    found = (m.offset, entry, m.store_timestamp)
                    break
            at = lo
        if found is None:
            if first > 0:
                raise BrokerError(
                    f"RocketMQ deleted the decision log {TXN_TOPIC}'s entries below offset {first} (its retention, "
                    f"fileReservedTime) and what is left holds no checkpoint of rstream's: the commit tags, topic "
                    "settings and decisions before it are lost. rstream writes a checkpoint every "
                    f"checkpoint_every entries and whenever the last is older than a third of the retention, while "
                    "any of its processes runs; a log nobody used for longer than the retention is gone. Give "
                    "rstream a RocketMQ cluster of its own, or keep a job running")
            log.loaded = True
            return
        last, marker, marker_ms = found
        as_of = int(marker["as_of"])
        if as_of < first:
            raise BrokerError(f"RocketMQ deleted the decision log {TXN_TOPIC}'s entries {as_of}..{first - 1}, which came "
                              f"after its newest checkpoint's state (entry {last}) was taken: that state cannot be "
                              "completed. rstream keeps its checkpoints newer than a third of the retention; is "
                              "fileReservedTime shorter than RocketMQBroker(retention_s=...) says?")
        pieces: dict[int, str] = {}
        after: list[PulledMessage] = []
        for m in self._log_range(broker, as_of, last + 1):
            entry = json.loads(m.body)
            if entry["t"] != "ckpt":
                after.append(m)
            elif entry["id"] == marker["id"]:
                pieces[int(entry["i"])] = entry["d"]
        if sorted(pieces) != list(range(int(marker["n"]))):
            raise BrokerError(f"the checkpoint of {TXN_TOPIC} ending at entry {last} lacks pieces "
                              f"{sorted(set(range(int(marker['n']))) - set(pieces))}: RocketMQ lost entries it acknowledged")
        _restore(log, json.loads("".join(pieces[i] for i in range(len(pieces)))))
        for m in after:  # said after its state was taken, before it was whole
            self._apply(log, m)
        log.checkpoint = (last, marker_ms, as_of)
        log.next_offset, log.loaded = last + 1, True

    def checkpoint(self) -> int:
        """Append a checkpoint of the decision log: what it says now that counts (each range's last
        commit and the commits since the previous checkpoint, attempts still open, lost attempts whose
        records may still be read, topics' settings and numbering, compact queues' snapshots), in
        pieces of ``_PIECE`` characters. A reader starts from the newest whole one. Returns the offset
        of its last piece."""
        with self._lock:
            log = self._refresh()
            as_of = log.next_offset
            self._forget_lost(log)
            text = json.dumps(_dump(log), separators=(",", ":"))
        pieces = [text[i:i + _PIECE] for i in range(0, len(text), _PIECE)]
        cid = uuid.uuid4().hex
        last = -1
        for i, piece in enumerate(pieces):
            last = self._log_append({"t": "ckpt", "id": cid, "i": i, "n": len(pieces), "as_of": as_of, "d": piece},
                                    wait=i == len(pieces) - 1)
        return last

    def _forget_lost(self, log: _Log) -> None:
        """Drop the lost attempts whose records RocketMQ deleted (every queue's first offset is past
        their end) or whose topics were deleted: no reader can meet them again. An attempt whose
        records' end is unknown (a writer that died while a reader aborted it) is kept."""
        firsts: dict[str, list[int] | None] = {}
        for attempt, ends in list(log.lost.items()):
            gone = True
            for where, end in ends.items():
                name, _, q = where.rpartition("/")
                if name not in log.numbering:
                    continue  # deleted (or never rstream's): its messages are skipped by deletion time
                if end is None:
                    gone = False
                    break
                if name not in firsts:
                    topic = self._lookup(name)
                    firsts[name] = None if topic is None else self._first_offsets(topic)
                known = firsts[name]
                if known is not None and known[int(q)] < end:
                    gone = False
                    break
            if gone:
                del log.lost[attempt]
                log.decided.pop(attempt, None)

    def _first_offsets(self, topic: _Topic) -> list[int]:
        """Per queue of ``topic``, the first offset RocketMQ still has (0 until retention deleted records)."""
        firsts = [0] * topic.info.queues
        for broker, queues in topic.by_broker.items():
            stats = self._at(broker, self._client.topic_offsets, topic.info.name,
                             what=f"read the first offsets of {topic.info.name}")
            for q in queues:
                queue_id = topic.queue_ids[q][1]
                firsts[q] = stats[queue_id][0] << topic.shift if stats is not None and queue_id < len(stats) else 0
        return firsts

    @staticmethod
    def _apply(log: _Log, m: PulledMessage) -> None:
        entry = json.loads(m.body)
        kind = entry["t"]
        attempt = entry.get("a")
        log.last_ms = max(log.last_ms, m.store_timestamp)
        if kind == "open":
            if attempt in log.decided or attempt in log.undecided:
                return
            rng = tuple(entry["range"]) if entry.get("range") else None
            if rng is not None:
                log.opened.setdefault(rng, set()).add(attempt)
            for where, low in entry["at"].items():
                log.pending.setdefault(where, {})[attempt] = (int(low), m.store_timestamp)
            # queues of half messages (visible on commit): no reader waits on them (they show once committed),
            # and a lost attempt keeps them with no end, so a checkpoint never forgets it (``visible.verdict``)
            log.undecided[attempt] = (m.store_timestamp, (*entry["at"], *entry.get("half", ())))
        elif kind in ("commit", "abort"):
            out = entry.get("out")
            if attempt not in log.undecided:  # decided before: a late word, which only says where records went
                if out and attempt in log.lost:
                    _lost_at(log, attempt, out)
                return
            # A reader's abort counts once txn_timeout_ms (its "after") passed since the open in the log
            # broker's own time: the two store times, never a reader's clock against the broker's.
            if kind == "abort" and m.store_timestamp - log.undecided[attempt][0] < int(entry.get("after", 0)):
                return
            rng = tuple(entry["range"]) if entry.get("range") else None
            won = kind == "commit" and (rng is None or rng not in log.winners)
            wrote = log.undecided[attempt][1]
            log.decided[attempt] = won
            _settle(log, attempt)
            if not won:
                log.lost[attempt] = dict.fromkeys(wrote)
                if out:
                    _lost_at(log, attempt, out)
            if won and rng is not None:
                tag = CommitTag(**entry["tag"], seq=m.offset + 1, committed_ms=m.store_timestamp)
                tag = replace(tag, outputs={k: (int(v[0]), int(v[1])) for k, v in tag.outputs.items()})
                log.winners[rng] = tag
                log.by_job.setdefault(tag.job, []).append(tag)
                for loser in log.opened.pop(rng, set()) - {attempt}:  # the range's other attempts lost
                    if loser in log.undecided:
                        log.lost[loser] = dict.fromkeys(log.undecided[loser][1])
                    log.decided[loser] = False
                    _settle(log, loser)
        elif kind == "topic":  # made by rstream: its setting, and its queues numbered
            name = entry["topic"]
            if entry.get("compact", True):  # entries before numbering were written for compact topics only
                log.compact.add(name)
            else:
                log.compact.discard(name)
            if entry.get("packed"):
                log.packed.add(name)
            else:
                log.packed.discard(name)
            if "queues" in entry:
                log.numbering[name] = tuple((str(b), int(q)) for b, q in entry["queues"])
        elif kind == "numbering":  # a topic made by another tool, numbered when rstream first saw it (or adopted)
            name = entry["topic"]
            if name not in log.numbering or entry.get("adopt"):  # the first word counts
                log.numbering[name] = tuple((str(b), int(q)) for b, q in entry["queues"])
        elif kind == "snap":  # a compact queue's snapshot, complete
            notes = log.snapshots.setdefault(f"{entry['topic']}/{entry['q']}", [])
            notes.append({**entry, "ms": m.store_timestamp})
            notes.sort(key=lambda n: n["as_of"])
            del notes[:-_SNAPSHOTS_KEPT]
        elif kind == "ckpt":  # a piece of a checkpoint: what it says was said before; the last marks it whole
            if entry["i"] == entry["n"] - 1:
                log.checkpoint = (m.offset, m.store_timestamp, int(entry["as_of"]))
        elif kind == "forget":
            job, topic = entry.get("job"), entry.get("topic")
            if job is None:  # a deleted topic: its setting, and what attempts were writing to it, go with it
                log.compact.discard(topic)
                log.packed.discard(topic)
                log.numbering.pop(topic, None)
                log.deleted_ms[topic] = max(log.deleted_ms.get(topic, 0), m.store_timestamp)
                for where in [w for w in log.pending if w.rpartition("/")[0] == topic]:
                    del log.pending[where]
                for where in [w for w in log.snapshots if w.rpartition("/")[0] == topic]:
                    del log.snapshots[where]
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
                stale = [a for a, (_low, ms) in waiting.items() if self._overdue(log, a, ms)]
                for attempt in stale:  # judged again by everyone in the log broker's time (``_apply``)
                    self._log_append({"t": "abort", "a": attempt, "after": self.txn_timeout_ms})
                if stale:
                    log = self._refresh()
                    waiting = log.pending.get(f"{topic.info.name}/{q}") or {}
                    for attempt in set(stale) & set(waiting):  # not taken (the broker's clock went back): later
                        self._seen_open[attempt] = time.monotonic()
                if waiting:
                    end = min(end, min(low for low, _ms in waiting.values()))
            out.append(end)
        return out

    def _overdue(self, log: _Log, attempt: str, open_ms: int) -> bool:
        """Whether this reader gives up on an undecided attempt: ``txn_timeout_ms`` passed since its open
        in the log broker's time (the newest entry's store time against the open's), or in this
        process's own steady clock since it first saw the attempt open (the log may be idle). Never this
        host's wall clock against the broker's: a reader whose clock is minutes off neither aborts an
        attempt at once nor waits for ever."""
        if log.last_ms - open_ms >= self.txn_timeout_ms:
            return True
        seen = self._seen_open.get(attempt)
        if seen is None:
            if len(self._seen_open) > 4096:  # forget attempts decided since
                for gone in [a for a in self._seen_open if a not in log.undecided]:
                    del self._seen_open[gone]
            seen = self._seen_open[attempt] = time.monotonic()
        return (time.monotonic() - seen) * 1000 >= self.txn_timeout_ms

    def _raw_ends(self, topic: _Topic, queues: Sequence[int]) -> list[int]:
        """Per queue of ``queues``, its end as RocketMQ says it (records of undecided attempts
        included): per broker, one ``GET_MAX_OFFSET`` for one queue, one ``GET_TOPIC_STATS_INFO`` for more."""
        name = topic.info.name
        ends: dict[int, int] = {}
        mine: dict[str, list[int]] = {}
        for q in queues:
            mine.setdefault(topic.queue_ids[q][0], []).append(q)
        for broker, qs in mine.items():
            if len(qs) > 1:
                stats = self._at(broker, self._client.topic_offsets, name, what=f"read the end offsets of {name}")
                if stats is not None and len(stats) > max(topic.queue_ids[q][1] for q in qs):
                    ends.update({q: stats[topic.queue_ids[q][1]][1] for q in qs})
                    continue
                # deleted (or made anew) by another client since this object looked it up: ask as before
            for q in qs:
                ends[q] = self._max_offset(topic, q)
        return [ends[q] << topic.shift for q in queues]

    # -- offsets --------------------------------------------------------------------------------
    def range_end(self, topic: str, queue: int, start: int, end: int, max_records: int) -> int:
        """Where a range from ``start`` of at most ``max_records`` records ends, up to ``end``
        (``rstream.broker.base.range_end``): on a packed topic where a message does, after as many
        whole messages as ``max_records`` fills with full ones (one at least), so a range never walks
        the offsets a message's records leave unused."""
        found = self._get(topic)
        if not found.packed:
            return min(end, start + max_records)
        return min(end, ((start >> _PACK_BITS) + max(1, max_records >> _PACK_BITS)) << _PACK_BITS)

    def records_between(self, topic: str, queue: int, start: int, end: int) -> int:
        """How many records offsets ``[start, end)`` of a queue hold (``rstream.broker.base.records_between``):
        ``end - start``, but on a packed topic counted from its messages, each pulled once a process (a
        message never changes) and its count read from the head of its body. Records of attempts that
        lost count too, as their offsets do on a topic that is not packed."""
        found = self._queue(topic, queue)
        if not found.packed or end <= start:
            return max(0, end - start)
        broker, queue_id = found.queue_ids[queue]
        counts = found.counts.setdefault(queue, {})
        total, at, last = 0, start >> _PACK_BITS, -(-end >> _PACK_BITS)
        while at < last:
            if at not in counts:
                messages, next_at, _end = self._pull(broker, found.info.name, queue_id, at, min(32, last - at),
                                                     f"count the records of {topic}/{queue}")
                counts.update((m.offset, _pack_count(m)) for m in messages)
                if at not in counts:  # gone past the retention (read on from the first there), or not yet stored
                    later = min((m.offset for m in messages), default=next_at)
                    if later <= at:
                        break
                    at = later
                    continue
            base = at << _PACK_BITS
            total += max(0, min(end - base, counts[at]) - max(start - base, 0))
            at += 1
        return total

    def end_offsets(self, topic: str) -> list[int]:
        found = self._get(topic)
        with self._lock:
            self._watched[found.info.name] = found
        return self._stable_ends(found)

    def data_version(self) -> tuple[int, ...]:
        """A value that changes when a record is stored in a topic whose ``end_offsets`` this object
        was asked, or the decision log grows (an attempt opened, committed or aborted): what a started
        job's idle source watches instead of reading every queue's end. One request per such topic
        and broker (``GET_TOPIC_STATS_INFO``) and one for the log (which it reads on, as ``_refresh`` does)."""
        with self._lock:
            watched = list(self._watched.values())
        self.maintain()  # a job waiting for input keeps its state past the retention too
        version = [self._refresh().next_offset]  # the log first: what it says of a record is stored after it
        for topic in watched:
            for broker in topic.by_broker:
                stats = self._at(broker, self._client.topic_offsets, topic.info.name,
                                 what=f"watch {topic.info.name} for input")
                version += [end for _first, end in stats] if stats is not None else [-1]
        return tuple(version)

    def commits_version(self) -> int:
        """A value that changes when the decision log grows, so whenever a commit tag may have: what a
        task that waits for the other ranges of its batch to commit watches (one request, which reads
        the log on), rather than ``data_version``, which asks every topic this object read the ends of."""
        return self._refresh().next_offset

    def search_offset(self, topic: str, queue: int, timestamp_ms: int) -> int:
        found = self._queue(topic, queue)
        broker, queue_id = found.queue_ids[queue]
        lo = self._at(broker, self._client.min_offset, topic, queue_id)
        hi = self._stable_ends(found, [queue])[0] >> found.shift  # a packed topic's: at a message's start
        while lo < hi:  # the first offset stored at or after timestamp_ms: store times never go back
            mid = (lo + hi) // 2
            messages, _, _end = self._pull(broker, topic, queue_id, mid, 1, f"read {topic}/{queue}")
            if messages and messages[0].store_timestamp >= timestamp_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo << found.shift

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
                    attempt: str | None, snapshot: str | None = None) -> tuple[int, int]:
        """Append ``records`` to one queue in batch requests of at most ``_MAX_BATCH_BYTES`` and
        ``_MAX_BATCH_MESSAGES``, a packed topic's packed into messages (``_packs``); ``(first offset,
        end offset)``: the first request's first, the last request's end (-1, -1: nothing sent).

        Records of an attempt return at once: readers see them once the attempt's commit is in the
        decision log, which RocketMQ makes readable after them (it makes the messages of its commit
        log readable in order). Records sent without one are readable when it returns."""
        if topic.packed:
            first, end = self._send_messages(topic, queue, _packs(records), attempt, None, f"{_PACK}\x011\x02")
            if end > 0:
                first, end = first << _PACK_BITS, end << _PACK_BITS
        else:
            first, end = self._send_messages(topic, queue, records, attempt, snapshot)
        if end > 0 and attempt is None:
            self._await(topic, queue, end)
        return first, end

    def _send_messages(self, topic: _Topic, queue: int, records: Iterable[RecordTuple], attempt: str | None,
                       snapshot: str | None = None, own: str = "") -> tuple[int, int]:
        """``_send_queue`` of one message a record: ``(first, end)`` message offsets, not waited for;
        ``own``: properties text of rstream's own that every message carries."""
        first = last_end = -1
        where, queue_id = topic.queue_ids[queue]
        if attempt is not None:
            own += f"{_TXN}\x01{attempt}\x02"
        if snapshot is not None:  # a record of a compact queue's snapshot (``snapshot``)
            own += f"{_SNAP}\x01{snapshot}\x02"
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
                at = self._at(where, self._client.send_batch, name, queue_id, batch, born0, what=f"write to {name}/{queue}")
                first = at if first < 0 else first
                batch, born0, field = BatchBody(), born, own_field
                data, count, size = batch.data, 0, 20 + n + len(own_field)
            data += message_head(size, 0, 0, 0, n)
            data += body
            data += field
            count += 1
        if count:
            batch.count = count
            at = self._at(where, self._client.send_batch, name, queue_id, batch, born0, what=f"write to {name}/{queue}")
            first = at if first < 0 else first
            last_end = at + count
        return first, last_end

    def append(self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None = None) -> bool:
        targets = {(t, q): self._queue(t, q) for (t, q) in records}  # every queue checked before any write
        writes = {tq: recs for tq, recs in records.items() if len(recs)}
        self._wrote = {}
        if tag is None and len(writes) <= 1 and all(len(recs) < 1000 for recs in writes.values()):
            for (t, q), recs in writes.items():  # one batch request: atomic as it is
                self._wrote[(t, q)] = self._send_queue(targets[(t, q)], q, list(recs), None)[1]
            self.maintain(self._wrote)
            return True
        given_up = 0
        while True:
            try:
                won = self._append_attempt(targets, writes, tag)
            except OutcomeUnknownError:  # the broker went away mid-send: that attempt is aborted, try anew
                continue
            if won is not None:
                if won and tag is not None:
                    self._mirror_progress(tag)
                self.maintain(self._wrote if won else {})
                return won
            given_up += 1
            if given_up >= _GIVEN_UP_MAX:
                what = "an append" if tag is None else f"the append of {tag.job}'s {tag.topic}/{tag.queue} from {tag.start_offset}"
                raise BrokerError(
                    f"readers gave up on {what} {given_up} times in a row: each attempt took longer between its open "
                    "and its commit than a reader's txn_timeout_ms, so it never commits. Give the readers (every "
                    "RocketMQBroker that reads its topics) a longer txn_timeout_ms, or append less at once")

    def _append_attempt(self, targets: Mapping[tuple[str, int], _Topic],
                        writes: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None) -> bool | None:
        """One attempt of ``append``: open, records, commit. Whether it committed (False: another attempt
        of the range did first); None when a reader aborted it meanwhile (it waited past ``txn_timeout_ms``,
        a broker being away) and nothing else committed the range: to be tried again. Raises
        ``OutcomeUnknownError`` (after aborting the attempt) when the broker went away while its records
        were under way."""
        if tag is not None and (tag.job, tag.topic, tag.queue, tag.start_offset) in self._refresh().winners:
            return False
        attempt = uuid.uuid4().hex
        half = [tq for tq, recs in writes.items() if visible_on_commit(recs)]  # visible on commit (``visible``)
        lows = {}
        by_topic: dict[str, list[int]] = {}
        for (t, q) in writes:
            if (t, q) not in half:
                by_topic.setdefault(t, []).append(q)
        for t, queues in by_topic.items():  # one request per topic and broker (``_raw_ends``)
            for q, low in zip(queues, self._raw_ends(targets[(t, queues[0])], queues)):
                lows[f"{t}/{q}"] = low
        rng_list = None if tag is None else [tag.job, tag.topic, tag.queue, tag.start_offset]
        log_broker = self._txn_topic().queue_ids[0][0]
        # records on the log's own broker are readable after the open record (its commit log's order);
        # records on another broker only once the open record was read back (the module's docstring)
        elsewhere = [(t, q) for (t, q) in writes if targets[(t, q)].queue_ids[q][0] != log_broker and (t, q) not in half]
        opening: dict[str, Any] = {"t": "open", "a": attempt, "range": rng_list, "at": lows}
        if half:
            opening["half"] = [f"{t}/{q}" for t, q in half]
            self.answer_checks()  # this process answers the broker's check-backs of the half messages it sends
        # readable before a half message exists: a check-back then finds the attempt in the log
        self._log_append(opening, wait=bool(elsewhere) or bool(half))
        outputs = {}
        halves: dict[tuple[str, int], list[HalfMessage]] = {}
        try:
            for (t, q), recs in writes.items():
                if (t, q) in half:
                    halves[(t, q)] = []
                    self._send_half(targets[(t, q)], q, recs, attempt, halves[(t, q)])
                    continue
                first, end = self._send_queue(targets[(t, q)], q, recs, attempt)
                outputs[f"{t}/{q}"] = (first, end)
            away: dict[str, list[int]] = {}
            for t, q in elsewhere:
                away.setdefault(t, []).append(q)
            for t, queues in away.items():  # readable there before the commit is readable here
                self._await_ends(targets[(t, queues[0])], queues, [outputs[f"{t}/{q}"][1] for q in queues])
        except BaseException:
            try:  # where its records went, so far as it knows, lets a checkpoint forget it once they are gone
                self._log_append({"t": "abort", "a": attempt, "out": outputs})
            finally:
                self._end_halves(targets, writes, halves, attempt, commit=False)  # never to commit: this writer breaks off
                raise
        self._wrote = {(t, q): outputs[f"{t}/{q}"][1] for (t, q) in writes if (t, q) not in half}
        entry: dict[str, Any] = {"t": "commit", "a": attempt, "range": rng_list, "out": outputs}
        if tag is not None:
            entry["tag"] = {"job": tag.job, "topic": tag.topic, "queue": tag.queue, "start_offset": tag.start_offset,
                            "end_offset": tag.end_offset, "meta": tag.meta, "batch_id": tag.batch_id,
                            "info": tag.info, "outputs": outputs}
        self._log_append(entry)  # read back up to the commit: decided
        won = self._log.decided.get(attempt, False)
        self._end_halves(targets, writes, halves, attempt, commit=won)
        if won:
            return True
        if tag is not None and (tag.job, tag.topic, tag.queue, tag.start_offset) in self._log.winners:
            return False
        return None

    # -- records visible on commit (rstream.rocketmq.visible) ------------------------------------------
    def answer_checks(self) -> Any:
        """Answer RocketMQ's check-backs of rstream's half messages from this process, from now on (one
        ``visible.CheckAnswerer`` per process and cluster; its threads end with the process). The writer
        of half messages calls it; so does a job's driver when its topology has an on-commit sink."""
        from rstream.rocketmq.visible import answer_for

        return answer_for(self)

    def _send_half(self, topic: _Topic, queue: int, records: Iterable[RecordTuple], attempt: str,
                   sent: list[HalfMessage]) -> None:
        """Send ``records`` to one queue as half messages of ``attempt`` (``Client.send_half``), appending
        each as sent to ``sent``. A message's born time is now (the broker times its check-back from it,
        and skips one born before its retention); the record's own born time travels in ``RSTREAM_BORN``, its
        place among the records (``HALF_SEQ``) and the queue's end before them (``HALF_AT``) with it, so that
        a check-back can tell a message already committed (``visible.CheckAnswerer``)."""
        from rstream.rocketmq.visible import TXN_GROUP

        where, queue_id = topic.queue_ids[queue]
        name = topic.info.name
        # its copies, once committed, lie after the queue's end now: a check-back looks there before it commits
        own = f"{_TXN}\x01{attempt}\x02{HALF_AT}\x01{self._raw_ends(topic, [queue])[0]}\x02"
        texts: dict[Any, str] = {}  # (key, headers' id, tags) -> properties text without the born time
        batch: list[tuple[bytes, str, int]] = []
        self._half_sent_ms.setdefault(attempt, now_ms())
        for seq, (k, body, born, hdrs, tags) in enumerate(records):
            if type(body) is not bytes and not isinstance(body, bytes):
                raise BrokerError(f"message body must be bytes, got {type(body).__name__}")
            at = (k, id(hdrs), tags)
            text = texts.get(at)
            if text is None:
                text = own if k is None else own + _key_property(k)
                if hdrs:
                    _check_headers(hdrs)
                    text += properties_string(hdrs)
                if tags is not None:
                    text += f"TAGS\x01{tags}\x02"
                texts[at] = text
            batch.append((body, f"{text}{_BORN}\x01{born}\x02{HALF_SEQ}\x01{seq}\x02", now_ms()))
            if len(batch) >= _HALF_PIPELINE:
                sent += self._at(where, self._client.send_half, name, queue_id, batch, TXN_GROUP, self.check_after_s,
                                 what=f"write to {name}/{queue}")
                batch = []
        if batch:
            sent += self._at(where, self._client.send_half, name, queue_id, batch, TXN_GROUP, self.check_after_s,
                             what=f"write to {name}/{queue}")

    def _end_halves(self, targets: Mapping[tuple[str, int], _Topic],
                    writes: Mapping[tuple[str, int], Sequence[RecordTuple]],
                    halves: Mapping[tuple[str, int], Sequence[HalfMessage]], attempt: str, commit: bool) -> None:
        """End the half messages of ``attempt``: commit them (its append won) in an order that keeps each
        key's records in order (the broker ends transactions on several threads: a commit waits for the
        one of its key's record before), then wait until they are readable; or roll them back (oneway).

        Never raises: a message not ended here is ended by the broker's check-back (``visible``), which
        begins ``check_after_s`` after it was sent. So that a check-back never commits what this writer
        commits too (RocketMQ writes an ended message's mark a moment later, ``transactionOpBatchInterval``,
        and a check meanwhile would commit it again), the writer commits only within the first half of that
        time; the broker refuses its commits after all of it."""
        from rstream.rocketmq.visible import TXN_GROUP

        began = self._half_sent_ms.pop(attempt, None)
        if not any(halves.values()):
            return
        if commit and began is not None and now_ms() - began > self.check_after_s * 500:
            LOG.info("the half messages of attempt %s were sent %.1f s ago: the broker's check-back commits them",
                     attempt, (now_ms() - began) / 1000)
            return
        before: dict[tuple[str, int], int] = {}
        committed: dict[tuple[str, int], int] = {}
        try:
            if commit:
                by_topic: dict[str, list[int]] = {}
                for t, q in halves:
                    by_topic.setdefault(t, []).append(q)
                for t, queues in by_topic.items():
                    before.update({(t, q): end for q, end in zip(queues, self._raw_ends(targets[(t, queues[0])], queues))})
            for (t, q), sent in halves.items():
                if not sent:
                    continue
                where, _queue_id = targets[(t, q)].queue_ids[q]
                after: list[int | None] | None = None
                if commit:
                    last: dict[Any, int] = {}
                    after = []
                    for i, record in enumerate(writes[(t, q)][:len(sent)]):
                        after.append(last.get(record[0]))
                        last[record[0]] = i
                done = self._at(where, self._client.end_transactions, t, sent, commit, TXN_GROUP, after, not commit,
                                what=f"{'commit' if commit else 'roll back'} the records of {t}/{q}")
                committed[(t, q)] = sum(done)
            if commit:
                self._await_committed(targets, committed, before, attempt)
        except (BrokerError, OSError) as exc:
            LOG.warning("rstream could not %s the half messages of attempt %s (%s): the broker asks back within its "
                        "transactionCheckInterval, and an rstream process answers", "commit" if commit else "roll back",
                        attempt, exc)

    def _await_committed(self, targets: Mapping[tuple[str, int], _Topic], committed: Mapping[tuple[str, int], int],
                         before: Mapping[tuple[str, int], int], attempt: str) -> None:
        """Wait until the ``committed`` half messages of ``attempt`` (per queue, how many) are readable in their
        queues (RocketMQ answers a commit once the message is stored, and makes it readable a moment later),
        reading each queue on from where it ended before the commits."""
        deadline = time.monotonic() + self.timeout
        for (t, q), count in committed.items():
            topic = targets[(t, q)]
            broker, queue_id = topic.queue_ids[q]
            offset, found = before[(t, q)], 0
            pause = 0.0005
            while found < count:
                messages, nxt, _end = self._pull(broker, t, queue_id, offset, _PULL, f"read {t}/{q}")
                found += sum(_parsed(m.properties_text)[4] == attempt for m in messages)
                offset = max(nxt, messages[-1].offset + 1) if messages else offset
                if found >= count:
                    break
                if not messages:
                    if time.monotonic() > deadline:
                        raise BrokerError(f"RocketMQ committed {count} messages of {t}/{q} but made only {found} "
                                          f"readable within {self.timeout} s")
                    time.sleep(pause)
                    pause = min(pause * 2, 0.02)

    # -- a job's progress in RocketMQ's own tools ------------------------------------------------------
    def _mirror_progress(self, tag: CommitTag) -> None:
        """Commit ``tag``'s end as consumer group ``progress_group(job)``'s offset of its input queue, so
        ``mqadmin consumerProgress -g rstream-<job>`` and RocketMQ Dashboard show the job's lag. The group is
        made on the queue's broker, and its retry topic (``%RETRY%<group>``, which mqadmin finds the group's
        brokers by). rstream never reads these offsets (its progress is the commit tags): what fails is
        logged, once per job."""
        if not self.mirror_progress:
            return
        try:
            topic = self._lookup(tag.topic)
            if topic is None or not 0 <= tag.queue < topic.info.queues:
                return  # a tag of no topic of this cluster's (a test's made-up input): nothing to show
            broker, queue_id = topic.queue_ids[tag.queue]
            group = progress_group(tag.job)
            if (broker, group) not in self._mirrored:
                self._group(broker, group)
                retry = f"%RETRY%{group}"
                route = self._client.route(retry)
                if broker not in {str(d["brokerName"]) for d in (route or {}).get("queueDatas") or []}:
                    self._at(broker, self._client.create_topic, retry, 1, what=f"create {retry}")
                self._mirrored.add((broker, group))
            end = -(-tag.end_offset >> topic.shift)  # RocketMQ's own offset: a packed topic's next message
            self._at(broker, self._client.update_consumer_offset, group, tag.topic, queue_id, end,
                     what=f"commit {group}'s offset of {tag.topic}/{tag.queue}")
        except (BrokerError, OSError) as exc:
            if tag.job not in self._mirror_failed:
                self._mirror_failed.add(tag.job)
                LOG.warning("rstream could not show job %s's progress as consumer group %s in RocketMQ (%s): its "
                            "results are not affected", tag.job, progress_group(tag.job), exc)

    def mirror_progress_of(self, job: str) -> None:
        """``_mirror_progress`` of the last commit of each of ``job``'s input queues: what a writer that died
        right after its commit left behind. A job's driver calls it as the job starts (``prepare_topics``)."""
        last: dict[tuple[str, int], CommitTag] = {}
        for tag in self._refresh().by_job.get(job, []):
            at = (tag.topic, tag.queue)
            if at not in last or last[at].start_offset < tag.start_offset:
                last[at] = tag
        for tag in last.values():
            self._mirror_progress(tag)

    # -- reading --------------------------------------------------------------------------------
    def _pulled(self, topic: _Topic, queue: int, start: int, end: int) -> Iterator[PulledMessage]:
        """The committed messages of ``[start, end)`` (end clipped at the stable end); of a packed topic,
        the messages that hold a record of it (``_records`` unpacks them)."""
        end = min(end, self._stable_ends(topic, [queue])[0])
        decided = self._log.decided
        # what a crash recovery put back from the topic's life before its last deletion (module docstring)
        before = self._log.deleted_ms.get(topic.info.name, -1)
        broker, queue_id = topic.queue_ids[queue]
        name = topic.info.name
        shift = topic.shift
        offset = max(start, 0) >> shift
        end = (end + (1 << shift) - 1) >> shift
        while offset < end:
            messages, nxt, _end = self._pull(broker, name, queue_id, offset, min(_PULL, end - offset), f"read {name}/{queue}")
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

    def _records(self, topic: _Topic, queue: int, start: int, end: int) -> Iterator[tuple[Any, ...]]:
        """The committed records of ``[start, end)``: ``(offset, key, body, born, store time, headers, tags)``,
        a packed topic's unpacked from their messages."""
        for m in self._pulled(topic, queue, start, end):
            if topic.packed and _PACK in m.properties_text:
                yield from _unpacked(m, start, end)
                continue
            k, born, hdrs, tags = _unpack(m)
            yield (m.offset << topic.shift, k, m.body, born, m.store_timestamp, hdrs, tags)

    def read_records(self, topic: str, queue: int, start: int, end: int) -> Iterator[ReadRecord]:
        for rec in self._records(self._queue(topic, queue), queue, start, end):
            yield rec[:6]

    def read(self, topic: str, queue: int | None = None, start: int = 0, end: int | None = None) -> list[Message]:
        found = self._get(topic)
        if queue is not None:
            self._queue(topic, queue)
        out = []
        for q in range(found.info.queues) if queue is None else [queue]:
            for offset, k, body, born, store, hdrs, tags in self._records(found, q, start, 2**62 if end is None else end):
                out.append(Message(topic, q, offset, k, body, born, store, hdrs or {}, tags))
        return out

    committed_only = read

    def to_pandas(self, topic: str, queue: int | None = None, decode: bool = True) -> Any:
        """The topic's committed messages as a DataFrame, one row per message."""
        return messages_frame(self.read(topic, queue), decode)

    # -- compact topics -------------------------------------------------------------------------
    def _compacted(self, topic: str, queue: int, end: int | None) -> tuple[list[tuple[PulledMessage, bool]], int]:
        """How compact queue ``queue`` of ``topic`` reads below ``end``: the records of its newest snapshot
        taken at or below ``end`` whose tail RocketMQ still has (True: no key twice), then every committed
        record from the offset it was taken at (False), in order; and the end read to. Raises
        ``BrokerError`` when RocketMQ deleted records that no snapshot stands for."""
        found = self._queue(topic, queue)
        stable = self._stable_ends(found, [queue])[0]
        end = stable if end is None else min(end, stable)
        for _ in range(3):  # again if RocketMQ deleted what it read while it read
            first = self._first_offsets(found)[queue]
            note = next((n for n in reversed(self._log.snapshots.get(f"{topic}/{queue}", []))
                         if first <= n["as_of"] <= end), None)
            if note is None and first > 0:
                raise BrokerError(
                    f"{topic} queue {queue}: RocketMQ deleted its records below offset {first} (the broker's retention, "
                    f"fileReservedTime) and rstream holds no snapshot of it taken from there up to offset {end}, so its "
                    "latest value per key cannot be read: that state is lost. While a job runs, rstream writes a "
                    "snapshot of each compact queue within a third of the retention (RocketMQBroker(retention_s=...) "
                    "if the brokers keep files for less than their fileReservedTime says); a queue no rstream process "
                    "looked after for longer than the retention cannot be rebuilt")
            start = 0 if note is None else int(note["as_of"])
            out: list[tuple[PulledMessage, bool]] = []
            kept = True
            if note is not None and note["keys"]:
                snaps = self._get(snapshot_topic(topic))
                out += [(m, True) for m in self._pulled(snaps, queue, note["first"], note["end"])
                        if _parsed(m.properties_text)[5] == note["id"]]
                kept = self._first_offsets(snaps)[queue] <= note["first"]  # after the read: it may delete meanwhile
            out += [(m, False) for m in self._pulled(found, queue, start, end)]
            if kept and self._first_offsets(found)[queue] <= start:
                return out, end
        raise BrokerError(f"{topic} queue {queue}: RocketMQ deleted its records faster than rstream could read them "
                          "(three times over): its retention is far shorter than rstream was told")

    def read_compacted(self, topic: str, queue: int, end: int | None = None) -> Iterator[tuple[RecordBlock, bool]]:
        """A compact queue as it reads below ``end`` (the ``Broker`` contract): its newest snapshot's
        records (True), then every record after the offset the snapshot was taken at (False)."""
        pairs, _end = self._compacted(topic, queue, end)
        for base in (True, False):
            rows = []
            for m, snapshotted in pairs:
                if snapshotted is base:
                    k, born, hdrs, _tags = _unpack(m)
                    rows.append((m.offset, k, m.body, born, m.store_timestamp, hdrs))
            for block in blocks_of(rows):
                yield block, base

    def read_latest(self, topic: str, queue: int, end: int | None = None) -> dict[MessageKey, tuple[Any, ...]]:
        """Per key, the latest committed record below ``end``: rstream reads it itself (from its newest
        snapshot of the queue on), so a result never depends on whether RocketMQ's compaction ran."""
        latest: dict[MessageKey, tuple[Any, ...]] = {}
        for m, _snapshotted in self._compacted(topic, queue, end)[0]:
            k, born, hdrs, tags = _unpack(m)
            latest[k] = (k, m.body, born, hdrs, tags)
        return latest

    def compacted_below(self, topic: str, queue: int) -> int:
        """From where the queue reads as it was at an offset: 0 until RocketMQ deleted records (its
        retention), then the offset its oldest snapshot still usable was taken at (the first offset
        RocketMQ has when there is none: what lies below is lost)."""
        found = self._queue(topic, queue)
        first = self._first_offsets(found)[queue]
        if first == 0:
            return 0
        usable = [int(n["as_of"]) for n in self._refresh().snapshots.get(f"{topic}/{queue}", []) if n["as_of"] >= first]
        return min(usable, default=first)

    def snapshot(self, topic: str, queue: int) -> dict[str, Any]:
        """Write a snapshot of compact queue ``queue`` of ``topic``: its latest record per key (deletes
        left out) as of its stable end, into ``snapshot_topic(topic)``, then a note of it in the
        decision log, which makes it count. Returns the note. ``maintain()`` calls it when due."""
        found = self._queue(topic, queue)
        if not found.info.compact:
            raise BrokerError(f"topic {topic!r} is not compact: only a compact topic's queues have snapshots")
        pairs, as_of = self._compacted(topic, queue, None)
        latest: dict[MessageKey, PulledMessage] = {}
        for m, _snapshotted in pairs:
            latest[_parsed(m.properties_text)[0]] = m
        records: list[RecordTuple] = []
        for m in latest.values():
            k, born, hdrs, tags = _unpack(m)
            if k is not None and m.body:
                records.append((k, m.body, born, hdrs, tags))
        sid = uuid.uuid4().hex
        first = end = -1
        if records:
            name = snapshot_topic(topic)
            snaps = self._lookup(name)
            if snaps is None:
                self.create_topic(name, queues=found.info.queues, brokers=sorted(found.by_broker))
                snaps = self._get(name)
            first, end = self._send_queue(snaps, queue, records, None, snapshot=sid)  # readable when it returns
        note = {"t": "snap", "topic": topic, "q": queue, "id": sid, "as_of": as_of, "first": first, "end": end,
                "keys": len(records)}
        self._log_append(note)
        return note

    def retention_ms(self) -> int:
        """How long the brokers keep a commit-log file (ms): ``retention_s``, else the shortest
        ``fileReservedTime`` of the masters (hours; asked once; at least a minute)."""
        if self._retention_ms is None:
            masters = self._masters_now("read the brokers' settings")
            hours = min(float(self._client.broker_config(addr).get("fileReservedTime") or _FILE_RESERVED_HOURS)
                        for addr in masters.values())
            self._retention_ms = max(int(hours * 3_600_000), 60_000)
        return self._retention_ms

    def maintain(self, wrote: Mapping[tuple[str, int], int] | None = None) -> None:
        """Keep what rstream needs readable past RocketMQ's retention (the module's docstring): a
        snapshot of each compact queue of ``wrote`` (queue -> its end after an append) that
        ``compact_min`` records (and as many as its last snapshot holds) came after; a checkpoint of
        the decision log when twice ``checkpoint_every`` entries came since the last (the process
        whose entry landed on the boundary died before it wrote one); and, every twelfth of the
        retention (at most every 10 minutes), a new checkpoint or snapshot wherever the last is older
        than a third of it. ``append`` calls it, and so does ``data_version`` (a job waiting for input).
        What fails is logged and tried again later: the append it follows has committed."""
        try:
            self._maintain(wrote or {})
        except (BrokerError, RemotingError) as exc:
            LOG.warning("rstream could not write a snapshot or checkpoint that keeps its state past RocketMQ's "
                        "retention (it tries again at the next append): %s", exc)

    def _maintain(self, wrote: Mapping[tuple[str, int], int]) -> None:
        log = self._log
        if log.loaded and log.next_offset - max(log.checkpoint[0], 0) >= 2 * self.checkpoint_every:
            self.checkpoint()  # the process elected for the last one (``_log_append``) died before it wrote it
        for (name, q), end in wrote.items():
            if name in log.compact:
                notes = log.snapshots.get(f"{name}/{q}")
                base, keys = (int(notes[-1]["as_of"]), int(notes[-1]["keys"])) if notes else (0, 0)
                if end - base >= max(self.compact_min, keys):
                    self.snapshot(name, q)
        every = min(_SCAN_EVERY_S, (self._retention_ms or 2**62) / 12_000)
        if time.monotonic() - self._maintained < every:
            return
        self._maintained = time.monotonic()
        limit = self.retention_ms() // 3
        log = self._refresh()
        now = now_ms()  # this host's clock against store times: skew is nothing beside a third of the retention
        if log.next_offset > 0 and now - log.checkpoint[1] > limit:
            self.checkpoint()
        for name in sorted(log.compact):
            topic = self._lookup(name)
            if topic is None:
                continue
            ends = self._raw_ends(topic, range(topic.info.queues))
            firsts = self._first_offsets(topic)
            for q in range(topic.info.queues):
                notes = log.snapshots.get(f"{name}/{q}")
                note = notes[-1] if notes else None
                start = int(note["as_of"]) if note is not None else firsts[q]
                oldest = int(note["ms"]) if note is not None and note["keys"] else now
                if start < ends[q]:  # its tail's first record: RocketMQ deletes it first
                    broker, queue_id = topic.queue_ids[q]
                    messages, _, _end = self._pull(broker, name, queue_id, max(start, firsts[q]), 1, f"read {name}/{q}")
                    if messages:
                        oldest = min(oldest, messages[0].store_timestamp)
                if now - oldest > limit:
                    self.snapshot(name, q)

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

    def _pull(self, broker: str, topic: str, queue_id: int, offset: int, max_messages: int,
              what: str) -> tuple[list[PulledMessage], int, int]:
        """``Client.pull_log`` on broker ``broker`` (a name) as ``READER_GROUP``, made on a broker that lacks
        it: a broker with ``autoCreateSubscriptionGroup=false`` refuses a pull by a group it does not know."""
        try:
            return self._at(broker, self._client.pull_log, topic, queue_id, offset, max_messages, READER_GROUP, what=what)
        except RemotingError as exc:
            if exc.code != SUBSCRIPTION_GROUP_NOT_EXIST:
                raise
        self._groups.discard((broker, READER_GROUP))
        self._group(broker, READER_GROUP)
        return self._at(broker, self._client.pull_log, topic, queue_id, offset, max_messages, READER_GROUP, what=what)

    # -- consumer offsets -----------------------------------------------------------------------
    def _group(self, broker: str, group: str) -> None:
        if (broker, group) not in self._groups:
            self._at(broker, self._client.create_group, group)
            self._groups.add((broker, group))

    def commit_offset(self, group: str, topic: str, queue: int, next_offset: int) -> None:
        found = self._queue(topic, queue)
        broker, queue_id = found.queue_ids[queue]
        self._group(broker, group)
        self._at(broker, self._client.update_consumer_offset, group, topic, queue_id, next_offset)

    def committed_offset(self, group: str, topic: str, queue: int) -> int | None:
        found = self._queue(topic, queue)
        broker, queue_id = found.queue_ids[queue]
        try:
            return self._at(broker, self._client.query_consumer_offset, group, topic, queue_id)
        except RemotingError as exc:
            if exc.code in (24, 26):  # no such subscription or group: never committed
                return None
            raise


def _tag_fields(tag: CommitTag) -> dict[str, Any]:
    return {"job": tag.job, "topic": tag.topic, "queue": tag.queue, "start_offset": tag.start_offset,
            "end_offset": tag.end_offset, "meta": tag.meta, "batch_id": tag.batch_id, "info": tag.info,
            "outputs": {k: list(v) for k, v in tag.outputs.items()}, "seq": tag.seq, "committed_ms": tag.committed_ms}


def _dump(log: _Log) -> dict[str, Any]:
    """What a checkpoint of the decision log holds: ``log``'s state that still counts. Of the commit
    tags, each input queue's last and those committed since the previous checkpoint (a job's recent
    history); committed attempts are not named (an attempt the log does not know is committed)."""
    since = log.checkpoint[2]
    last: dict[tuple[Any, ...], CommitTag] = {}
    for tag in log.winners.values():
        at = (tag.job, tag.topic, tag.queue)
        if at not in last or last[at].start_offset < tag.start_offset:
            last[at] = tag
    kept = {id(t): t for t in log.winners.values() if t.seq > since}
    kept.update({id(t): t for t in last.values()})
    return {
        "v": 1,
        "tags": [_tag_fields(t) for t in sorted(kept.values(), key=lambda t: t.seq)],
        "undecided": {a: [ms, list(wrote)] for a, (ms, wrote) in log.undecided.items()},
        "pending": {where: {a: list(v) for a, v in waiting.items()} for where, waiting in log.pending.items() if waiting},
        "opened": [[list(rng), sorted(attempts & set(log.undecided))] for rng, attempts in log.opened.items()
                   if attempts & set(log.undecided)],
        "lost": log.lost,
        "compact": sorted(log.compact),
        "packed": sorted(log.packed),
        "deleted_ms": log.deleted_ms,
        "numbering": {name: [list(q) for q in queues] for name, queues in log.numbering.items()},
        "snapshots": log.snapshots,
        "last_ms": log.last_ms,
    }


def _restore(log: _Log, data: Mapping[str, Any]) -> None:
    """``log`` as a checkpoint (``_dump``) says it was."""
    if data.get("v") != 1:
        raise BrokerError(f"a checkpoint of {TXN_TOPIC} of version {data.get('v')!r}, which this rstream cannot "
                          "read: a newer rstream wrote it; upgrade rstream")
    for fields in data["tags"]:
        tag = CommitTag(**{**fields, "outputs": {k: (int(v[0]), int(v[1])) for k, v in fields["outputs"].items()}})
        log.winners[(tag.job, tag.topic, tag.queue, tag.start_offset)] = tag
        log.by_job.setdefault(tag.job, []).append(tag)
    log.undecided = {a: (int(ms), tuple(wrote)) for a, (ms, wrote) in data["undecided"].items()}
    log.pending = {where: {a: (int(v[0]), int(v[1])) for a, v in waiting.items()}
                   for where, waiting in data["pending"].items()}
    log.opened = {tuple(rng): set(attempts) for rng, attempts in data["opened"]}
    log.lost = {a: {w: None if e is None else int(e) for w, e in ends.items()} for a, ends in data["lost"].items()}
    log.decided = dict.fromkeys(log.lost, False)
    log.compact = set(data["compact"])
    log.packed = set(data.get("packed", ()))
    log.deleted_ms = {k: int(v) for k, v in data["deleted_ms"].items()}
    log.numbering = {name: tuple((str(b), int(q)) for b, q in queues) for name, queues in data["numbering"].items()}
    log.snapshots = {k: list(v) for k, v in data["snapshots"].items()}
    log.last_ms = max(log.last_ms, int(data.get("last_ms", 0)))


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
    log.undecided.pop(attempt, None)


def _lost_at(log: _Log, attempt: str, out: Mapping[str, Any]) -> None:
    """Note where a lost attempt's records end, per queue, as its writer said (``out``: queue -> (first, end))."""
    ends = log.lost[attempt]
    for where, (_first, end) in out.items():
        ends[where] = int(end)


def _system_topic(name: str) -> bool:
    return name in {"TBW102", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "BenchmarkTest", "DefaultCluster",
                    "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
                    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
                    "DefaultHeartBeatSyncerTopic"} \
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
    key, born, headers, tags, _attempt, _snapshot = _parsed(m.properties_text)
    return key, m.born_timestamp if born is None else born, None if headers is None else dict(headers), tags


@functools.lru_cache(maxsize=16384)
def _parsed(text: str) -> tuple[MessageKey, int | None, dict[str, str] | None, str | None, str | None, str | None]:
    """What rstream reads from a message's properties text: its key, its own born time (None: the
    message's), the client's headers (None: none), tags, attempt and snapshot. Cached: a batch's messages share
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
    return key, born, headers or None, props.get("TAGS"), props.get(_TXN), props.get(_SNAP)


def _packs(records: Iterable[RecordTuple]) -> Iterator[RecordTuple]:
    """A packed topic's records as messages (``create_topic(packed=True)``): each up to ``_PACK_RECORDS``
    records and about ``_PACK_BYTES`` of keys and bodies, its body their columns marshalled (keys, bodies,
    born times, headers, tags), its born time its first record's."""
    keys: list[MessageKey] = []
    bodies: list[bytes] = []
    borns: list[int] = []
    headers: list[Mapping[str, str] | None] = []
    tags: list[str | None] = []
    checked: dict[int, dict[str, str]] = {}  # id -> a headers mapping checked and copied (a batch shares a few)
    size = 0
    for k, body, born, hdrs, tag in records:
        if type(body) is not bytes and not isinstance(body, bytes):
            raise BrokerError(f"message body must be bytes, got {type(body).__name__}")
        if k is not None and not isinstance(k, (str, bytes)):
            raise BrokerError(f"message key must be str, bytes or None, got {type(k).__name__}: {k!r}")
        copied = None
        if hdrs:
            copied = checked.get(id(hdrs))
            if copied is None:
                _check_headers(hdrs)
                copied = checked[id(hdrs)] = dict(hdrs)
        keys.append(k)
        bodies.append(bytes(body))
        borns.append(int(born))
        headers.append(copied)
        tags.append(tag)
        size += len(body) + (len(k) if k is not None else 0) + 16
        if len(keys) >= _PACK_RECORDS or size >= _PACK_BYTES:
            yield None, marshal.dumps((keys, bodies, borns, headers, tags)), borns[0], None, None
            keys, bodies, borns, headers, tags, size = [], [], [], [], [], 0
    if keys:
        yield None, marshal.dumps((keys, bodies, borns, headers, tags)), borns[0], None, None


def _pack_count(m: PulledMessage) -> int:
    """How many records a packed message holds (``_packs``), read from the head of its body: a marshalled
    tuple (a type byte, its size in 1 byte or 4) whose first item is the list of keys (a type byte, its
    length in 4 bytes); the whole body unmarshalled where the head is not that."""
    body = m.body
    head = (body[0] & 0x7F) if body else 0
    at = 2 if head == ord(")") else 5 if head == ord("(") else 0  # a small tuple's size takes 1 byte, else 4
    if at and len(body) >= at + 5 and body[at] & 0x7F == ord("["):
        return int.from_bytes(body[at + 1:at + 5], "little")
    try:
        return len(marshal.loads(body)[0])
    except (ValueError, EOFError, TypeError, IndexError):
        return 0


def _unpacked(m: PulledMessage, start: int, end: int) -> Iterator[tuple[Any, ...]]:
    """The records of a packed message (``_packs``) whose offsets lie in ``[start, end)``: ``(offset, key,
    body, born, store time, headers, tags)``."""
    try:
        keys, bodies, borns, headers, tags = marshal.loads(m.body)
    except (ValueError, EOFError, TypeError):
        raise ProtocolError(f"message {m.offset} of a packed topic holds no records that rstream packed (another "
                            "client's, or garbled): only rstream writes a packed topic (a shuffle topic)") from None
    base = m.offset << _PACK_BITS
    store = m.store_timestamp
    for i in range(max(start - base, 0), min(end - base, len(keys))):
        yield base + i, keys[i], bodies[i], borns[i], store, headers[i], tags[i]
