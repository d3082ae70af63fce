"""The broker seam: what rstream needs from a RocketMQ-shaped log, whatever implements it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, NamedTuple, Protocol, Union, runtime_checkable

from rstream.errors import RStreamError

MessageKey = Union[str, bytes, None]

#: RocketMQ's rule for topic names (TopicValidator): letters, digits, ``%|_-``, at most 127 chars.
_TOPIC_NAME = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")


class BrokerError(RStreamError):
    """The broker refused an operation."""


class InvalidTopicNameError(BrokerError, ValueError):
    """A topic name breaks RocketMQ's naming rule."""


class UnknownTopicError(BrokerError, KeyError):
    """A topic that does not exist was used."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown topic"


class TopicExistsError(BrokerError):
    """A topic was created twice with different settings."""


class BrokerPathError(BrokerError, OSError):
    """The broker's folder cannot be created or written."""


def validate_topic_name(name: Any) -> str:
    """Return ``name`` if it is a valid RocketMQ topic name, else raise ``InvalidTopicNameError``."""
    if not isinstance(name, str) or not _TOPIC_NAME.match(name):
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: use 1 to 127 characters from letters, digits, '%', '|', '_' and '-'"
        )
    return name


@dataclass(frozen=True)
class TopicInfo:
    """A topic's settings."""

    name: str
    queues: int
    compact: bool = False


@dataclass(frozen=True)
class Message:
    """A stored message. ``offset`` and ``store_timestamp`` are broker metadata (PIP-70): the broker
    stamps them at append time and they are never mixed into the client's ``headers``."""

    topic: str
    queue_id: int
    offset: int
    key: MessageKey
    body: bytes
    born_timestamp: int
    store_timestamp: int
    headers: Mapping[str, str] = field(default_factory=dict)
    tags: str | None = None


class SendResult(NamedTuple):
    """Where a sent message landed (a tuple: cheap to make a million of)."""

    topic: str
    queue_id: int
    offset: int


#: One record to append: (key, body, born_timestamp, headers or None, tags or None).
RecordTuple = tuple[MessageKey, bytes, int, "dict[str, str] | None", "str | None"]


#: One record as a task reads it: (offset, key, body, born_timestamp, store_timestamp, headers or None).
ReadRecord = tuple[int, MessageKey, bytes, int, int, "dict[str, str] | None"]


class RecordBlock:
    """Consecutive records of one queue as parallel columns, what a task reads (``read_blocks``):
    a chunk of records with no tuple per record. ``rows()`` gives them as ``ReadRecord`` tuples, and
    ``block[lo:hi]`` is a block of some of them."""

    __slots__ = ("offsets", "keys", "bodies", "borns", "stores", "headers", "items")

    def __init__(self, offsets: Sequence[int], keys: Sequence[MessageKey], bodies: Sequence[bytes],
                 borns: Sequence[int], stores: Sequence[int], headers: Sequence[dict[str, str] | None],
                 items: Sequence[Any] | None = None) -> None:
        self.offsets, self.keys, self.bodies = offsets, keys, bodies
        self.borns, self.stores, self.headers = borns, stores, headers
        #: What each body decodes to, when the records were stored in a batch format that keeps it
        #: (``rstream.broker.batch``; None for a record appended whole); None when the broker has
        #: only the bodies. The broker never looks inside: it is whatever the format's unpack gave.
        self.items = items

    @classmethod
    def of(cls, records: Sequence[ReadRecord]) -> RecordBlock:
        """The block of some ``ReadRecord`` tuples."""
        if not records:
            return cls((), (), (), (), (), ())
        return cls(*zip(*records, strict=True))

    def __len__(self) -> int:
        return len(self.bodies)

    def __getitem__(self, at: slice) -> RecordBlock:
        return RecordBlock(self.offsets[at], self.keys[at], self.bodies[at], self.borns[at], self.stores[at],
                           self.headers[at], None if self.items is None else self.items[at])

    def rows(self) -> Iterator[ReadRecord]:
        return zip(self.offsets, self.keys, self.bodies, self.borns, self.stores, self.headers)

    def __repr__(self) -> str:
        return f"RecordBlock({len(self)} records from offset {self.offsets[0]})" if len(self) else "RecordBlock(empty)"


def read_blocks(broker: Broker, topic: str, queue: int, start: int, end: int,
                size: int = 4096) -> Iterator[RecordBlock]:
    """The records ``[start, end)`` of a queue in blocks: the broker's own ``read_blocks`` if it has
    one (the embedded broker reads its stored batches as columns), else ``read_records`` in blocks
    of ``size``."""
    own = getattr(broker, "read_blocks", None)
    if own is not None:
        return iter(own(topic, queue, start, end))
    return blocks_of(broker.read_records(topic, queue, start, end), size)


def range_end(broker: Broker, topic: str, queue: int, start: int, end: int, max_records: int) -> int:
    """Where a range of a queue that starts at ``start`` ends when it holds ``max_records`` records at
    most, up to ``end``: the broker's own ``range_end`` if it has one (a packed topic's ranges end where
    a message does, ``RocketMQBroker``), else ``start + max_records``."""
    own = getattr(broker, "range_end", None)
    if own is not None:
        return int(own(topic, queue, start, end, max_records))
    return min(end, start + max_records)


def records_between(broker: Broker, topic: str, queue: int, start: int, end: int) -> int:
    """How many records a queue holds at offsets ``[start, end)``: the broker's own ``records_between``
    if it has one (a packed topic's messages leave offsets unused, ``RocketMQBroker``), else
    ``end - start``. What a progress bar and ``job.lag()`` count."""
    own = getattr(broker, "records_between", None)
    if own is not None:
        return int(own(topic, queue, start, end))
    return max(0, end - start)


def blocks_of(records: Iterable[ReadRecord], size: int = 4096) -> Iterator[RecordBlock]:
    """``ReadRecord`` tuples in blocks of ``size``."""
    it = iter(records)
    while part := list(islice(it, size)):
        yield RecordBlock.of(part)


def messages_frame(messages: Iterable[Message], decode: bool = True) -> Any:
    """Messages as a DataFrame, one row per message; ``decode`` turns utf-8 bodies into str (what a
    broker's ``to_pandas`` gives)."""
    import pandas as pd

    rows = []
    for m in messages:
        body: Any = m.body
        if decode:
            try:
                body = m.body.decode()
            except UnicodeDecodeError:
                pass
        rows.append({"queue_id": m.queue_id, "offset": m.offset, "key": m.key, "body": body,
                     "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
                     "headers": dict(m.headers), "tags": m.tags})
    cols = ["queue_id", "offset", "key", "body", "born_timestamp", "store_timestamp", "headers", "tags"]
    return pd.DataFrame(rows, columns=cols)


@dataclass(frozen=True)
class CommitTag:
    """Identifies the writes of one task's micro-batch on one input queue: a second append with
    the same tag is a no-op, which makes task retries and batch reruns exactly-once.

    The tag is stored with the writes, in the same transaction, so what it carries is visible no
    later than they are: the job's batch id, the queue's progress (``info``), and, filled in by the
    broker, where every record of the append landed (``outputs``)."""

    job: str
    topic: str
    queue: int
    start_offset: int
    end_offset: int
    #: What the task wants back at its next batch, as JSON text (the broker never reads it).
    meta: str = ""
    #: The job's micro-batch this range belongs to (None for tags written without one).
    batch_id: int | None = None
    #: The queue's progress in this batch, as JSON text (``QueueProgress.from_info``).
    info: str = ""
    #: Set by the broker: per ``"topic/queue"`` written, the ``(first, end)`` offsets appended.
    outputs: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: Set by the broker: the order in which tags were committed (increasing, never reused).
    seq: int = 0
    #: Set by the broker: its clock when the tag was committed (ms).
    committed_ms: int = 0

    def output_range(self, topic: str, queue: int) -> tuple[int, int] | None:
        """``(first, end)`` offsets this append wrote to ``topic``/``queue``, or None."""
        rng = self.outputs.get(f"{topic}/{queue}")
        return None if rng is None else (int(rng[0]), int(rng[1]))


@runtime_checkable
class Broker(Protocol):
    """What rstream's runtime needs from a RocketMQ-shaped log, and what a broker guarantees.

    ``EmbeddedBroker`` implements it; a RocketMQ client can too. ``tests/broker/test_conformance.py``
    checks every guarantee below against every implementation.

    A broker holds *records* and nothing else: a record is a key (str, bytes or None), a body
    (bytes), a client born time (ms), client headers (str -> str) and tags, plus the broker's own
    metadata, kept apart from the client's (PIP-70): its queue offset and its store time. It never
    encodes or decodes a body; a batch may offer its records packed in a format the broker stores
    as it is (``rstream.broker.batch``).

    Topics have N queues. In each queue, offsets are dense and start at 0: the k-th record ever
    appended to a queue has offset k, whichever process appended it, and no offset is skipped or
    given twice. Store times never go back within a queue. A broker that cannot append to several
    queues atomically (RocketMQ) sets ``gapless = False``: there, an append that lost its race
    (another attempt of the same tag committed first) or died halfway leaves offsets that no
    reader sees, so offsets increase but may skip.

    A broker object pickles as a handle to the same log (a Spark task gets its broker so): the
    copy, in any process, reads and writes the same topics, and appends from many processes at
    once keep every guarantee here.

    Optional methods that a broker may add and the runtime uses when present: ``read_blocks(topic,
    queue, start, end)`` (the records as ``RecordBlock`` columns; see ``read_blocks`` here),
    ``data_version()`` (a value, compared with ``==``, that changes when another connection
    committed: a cheap look for a watcher that waits for input; ``RocketMQBroker``'s covers the
    topics whose end offsets it was asked and its decision log), ``commits_version()`` (the same for
    commit tags alone, where that is cheaper than ``data_version``) and
    ``delete_commits(job)`` (forget a job's commit tags when it is reset) and ``range_end(topic, queue,
    start, end, max_records)`` (see ``range_end`` here: a broker whose offsets are not dense).
    """

    # -- topics ---------------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 8, compact: bool = False, *, packed: bool = False) -> TopicInfo:
        """Create a topic of ``queues`` queues, each empty (end offset 0). Idempotent when a topic
        of that name exists with the same settings; ``TopicExistsError`` when its settings differ;
        ``InvalidTopicNameError`` for a name RocketMQ refuses; ``BrokerError`` for ``queues < 1``.
        ``packed``: only rstream reads the topic (a shuffle topic), so the broker may store many of its
        records in one message of its own format; each record keeps an offset of its own, in order, but
        offsets may then skip (``range_end`` says where a range ends). A broker free to ignore it does
        (the embedded broker stores record batches anyway); a topic that exists keeps how it was made."""
        ...

    def topic(self, name: str) -> TopicInfo:
        """The topic's settings; ``UnknownTopicError`` when it does not exist."""
        ...

    def topics(self) -> list[TopicInfo]:
        """Every topic, by name."""
        ...

    def has_topic(self, name: str) -> bool:
        """Whether the topic exists."""
        ...

    def delete_topic(self, name: str) -> None:
        """Remove a topic, its records, consumer offsets and commit tags whose input it is;
        ``UnknownTopicError`` when it does not exist. A topic created again under the name starts empty."""
        ...

    # -- offsets ----------------------------------------------------------------------------------
    def end_offsets(self, topic: str) -> list[int]:
        """Per queue, the offset the next record will get: the number of records ever appended to
        it (compaction never lowers it). ``UnknownTopicError`` for an unknown topic."""
        ...

    def search_offset(self, topic: str, queue: int, timestamp_ms: int) -> int:
        """The first offset of ``queue`` whose record was stored at or after broker time
        ``timestamp_ms`` (the queue's end offset when none was), as RocketMQ's search by time:
        every record below it was stored before ``timestamp_ms``. ``BrokerError`` for a queue the
        topic does not have."""
        ...

    # -- writing ---------------------------------------------------------------------------------
    def send_batch(self, topic: str, bodies: Iterable[bytes | str], key: MessageKey = None,
                   headers: Mapping[str, str] | None = None, queue: int | None = None,
                   born_timestamp: int | None = None, tags: str | None = None,
                   keys: Sequence[MessageKey] | None = None, born_timestamps: Sequence[int] | None = None,
                   progress: bool = True) -> Sequence[SendResult]:
        """Append ``bodies`` (str is sent utf-8) as a producer does, untagged, and return where each
        landed, in order. Each goes to ``queue`` if given, else queue ``crc32(key) % queues`` for a
        record with a key (so one key always lands in one queue), else round robin. ``keys`` and
        ``born_timestamps`` give one value per body, ``key`` and ``born_timestamp`` one for all
        (default born time: now). ``BrokerError`` for a body that is not bytes or str, a key that
        is not str, bytes or None, headers that are not str -> str, or a queue out of range."""
        ...

    def append(
        self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None = None
    ) -> bool:
        """Append ``records`` per (topic, queue), each in its order at the queue's end, and ``tag``
        with them: all of it or nothing (atomic across every (topic, queue) of the call, also when
        other processes append to the same queues at once; a reader never sees part of it).

        With a ``tag`` whose (job, topic, queue, start_offset) was committed before, nothing is
        written and False is returned: the same task's retry, rerun or zombie attempt counts once.
        The committed tag records, per ``"topic/queue"`` it wrote records to, the ``(first, end)``
        offsets written (``CommitTag.outputs``), its ``seq`` and ``committed_ms``.

        The sequences may be any ``Sequence[RecordTuple]``; a broker may use what a batch offers
        (``rstream.broker.batch``) instead of its tuples. The caller may empty the sequences once it
        returns (a task does, so a batch's outputs are freed at once): keep copies, never the lists.
        ``UnknownTopicError`` or ``BrokerError`` for a topic or queue that does not exist (nothing
        written)."""
        ...

    # -- reading ---------------------------------------------------------------------------------
    def read_records(self, topic: str, queue: int, start: int, end: int) -> Iterable[ReadRecord]:
        """The records of ``queue`` with offsets in ``[start, end)``, in offset order, as
        ``(offset, key, body, born_ms, store_ms, headers or None)``: every record appended there
        (below ``compacted_below`` of a compact topic, only those compaction kept). Empty when
        ``end <= start``; an ``end`` past the queue's end reads to the end."""
        ...

    def read(self, topic: str, queue: int | None = None, start: int = 0, end: int | None = None) -> list[Message]:
        """As ``read_records``, as ``Message`` objects (headers a dict, tags kept), of one queue or
        (``queue=None``) of every queue in queue order; ``end=None`` reads to each queue's end."""
        ...

    # -- compact topics --------------------------------------------------------------------------
    def read_latest(self, topic: str, queue: int, end: int | None = None) -> dict[MessageKey, tuple[Any, ...]]:
        """Per key, the latest record ``(key, body, born_ms, headers, tags)`` of ``queue`` below
        ``end`` (default: its end): how a compact topic reads, compacted or not. A record with an
        empty body is a delete: a reader drops its key."""
        ...

    def compacted_below(self, topic: str, queue: int) -> int:
        """Where compaction of the queue stopped (0: never; it only grows). Below it, only the
        latest record per key below it may be left, so the queue as it was at an earlier offset can
        no longer be read; from it on, every offset reads as written. Compaction never changes
        offsets, end offsets or what ``read_latest`` gives; a broker may compact whenever it likes."""
        ...

    def read_compacted(self, topic: str, queue: int, end: int | None = None) -> Iterable[tuple[RecordBlock, bool]]:
        """How a compact queue reads below ``end`` (default: its end), for a reader that rebuilds its
        latest record per key fast (state replay): blocks of records in the order they apply, a key's
        last record in that order being its latest (what ``read_latest`` gives), each with True when
        the block is compacted: it holds no key twice and comes before every block marked False. A
        broker whose retention deleted old records (RocketMQ) starts from a snapshot of the queue it
        keeps itself, and raises ``BrokerError`` when it deleted records no snapshot stands for."""
        ...

    # -- commit tags -----------------------------------------------------------------------------
    def last_commit(self, job: str, topic: str, queue: int) -> CommitTag | None:
        """The committed tag of ``job`` on input ``topic``/``queue`` with the highest
        ``start_offset``, or None."""
        ...

    def find_commit(self, job: str, topic: str, queue: int, start_offset: int) -> CommitTag | None:
        """The committed tag of ``job`` on input ``topic``/``queue`` that starts at
        ``start_offset``, or None."""
        ...

    def commit_covering(self, job: str, topic: str, queue: int, offset: int) -> CommitTag | None:
        """The committed tag of ``job`` whose input range ``[start_offset, end_offset)`` holds
        ``offset`` (of those starting at or below it, the one starting last), or None."""
        ...

    def commits(self, job: str, after_seq: int = 0) -> list[CommitTag]:
        """Every committed tag of ``job`` with ``seq > after_seq``, in commit order (``seq``
        increases with each commit and is never reused), with the fields as committed and the
        broker's ``outputs``, ``seq`` and ``committed_ms``."""
        ...

    # -- consumer offsets ------------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue: int, next_offset: int) -> None:
        """Remember where consumer ``group`` goes on in ``topic``/``queue`` (the last commit wins)."""
        ...

    def committed_offset(self, group: str, topic: str, queue: int) -> int | None:
        """Where consumer ``group`` goes on in ``topic``/``queue``; None if it never committed."""
        ...
