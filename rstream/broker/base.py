"""The broker seam: what rstream needs from a RocketMQ-shaped log, whatever implements it."""

from __future__ import annotations

import bisect
import marshal
import re
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Any, NamedTuple, Protocol, Union, overload, runtime_checkable

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


class _RecordColumns(Sequence[RecordTuple]):
    """Records to append to one queue, kept as columns until a broker writes them: message keys and
    born times here, what stands for the bodies in a subclass (``_body``), and records appended
    whole (``whole``: index -> ``(key, body, born, headers, tags)``) in between. As a sequence, the
    tuples any broker appends."""

    __slots__ = ("keys", "borns", "whole")

    def __init__(self) -> None:
        self.keys: list[MessageKey] = []
        self.borns: list[int] = []
        self.whole: dict[int, RecordTuple] = {}

    @abstractmethod
    def _body(self, i: int) -> bytes:
        """The body of record ``i`` (not one appended whole)."""

    @abstractmethod
    def _middle(self) -> list[Any]:
        """The column between keys and born times."""

    def clear(self) -> None:
        self.keys.clear()
        self._middle().clear()
        self.borns.clear()
        self.whole.clear()

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, at: int) -> RecordTuple: ...

    @overload
    def __getitem__(self, at: slice) -> list[RecordTuple]: ...

    def __getitem__(self, at: int | slice) -> RecordTuple | list[RecordTuple]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        i = range(len(self.keys))[at]  # a negative index counts from the end; out of range: IndexError
        whole = self.whole.get(i)
        if whole is not None:
            return whole
        return (self.keys[i], self._body(i), self.borns[i], None, None)


class ItemRecords(_RecordColumns):
    """Records whose bodies are ``encode(item)``, kept as *items* (what shuffle sinks write), with
    records appended whole (``append``: a control record, with headers) in between.

    As a sequence, each body is encoded when it is asked for. The embedded broker stores the items
    themselves, in one marshal call per stored batch, and hands them back as ``RecordBlock.items``:
    a shuffle record is then neither encoded nor decoded one by one. ``encode(item)`` must be
    ``marshal.dumps(item, marshal_version)`` wherever marshal can write ``item``."""

    __slots__ = ("items", "encode", "marshal_version")

    def __init__(self, encode: Callable[[Any], bytes], marshal_version: int) -> None:
        super().__init__()
        self.encode, self.marshal_version = encode, marshal_version
        self.items: list[Any] = []

    def add(self, key: MessageKey, item: Any, born: int) -> None:
        """One record whose body is ``encode(item)``."""
        self.keys.append(key)
        self.items.append(item)
        self.borns.append(born)

    def append(self, record: RecordTuple) -> None:
        """One record as it is: ``(key, body, born, headers, tags)``."""
        self.whole[len(self.keys)] = record
        self.keys.append(record[0])
        self.items.append(None)
        self.borns.append(record[2])

    def _body(self, i: int) -> bytes:
        return self.encode(self.items[i])

    def _middle(self) -> list[Any]:
        return self.items

    def columns(self, lo: int, hi: int) -> tuple[list[MessageKey], list[Any], list[int], dict[int, RecordTuple]]:
        """Records ``lo:hi`` as ``(keys, items, borns, whole)``, ``whole`` indexed from ``lo``."""
        whole = {i - lo: r for i, r in self.whole.items() if lo <= i < hi} if self.whole else {}
        return self.keys[lo:hi], self.items[lo:hi], self.borns[lo:hi], whole


class BodyRecords(_RecordColumns):
    """Records kept as three columns, keys, bodies and born times (what a sink writes: no headers,
    no tags); a record with headers or tags sits in between. The embedded broker stores the columns
    as they are, with no tuple made per record and none taken apart again."""

    __slots__ = ("bodies",)

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[bytes] = []

    def append(self, record: RecordTuple) -> None:
        """One record as it is: ``(key, body, born, headers, tags)``."""
        if record[3] is not None or record[4] is not None:
            self.whole[len(self.keys)] = record
        self.keys.append(record[0])
        self.bodies.append(record[1])
        self.borns.append(record[2])

    def _body(self, i: int) -> bytes:
        return self.bodies[i]

    def _middle(self) -> list[Any]:
        return self.bodies

    def columns(self, lo: int, hi: int) -> tuple[list[MessageKey], list[bytes], list[int],
                                                   list[Any] | None, list[Any] | None]:
        """Records ``lo:hi`` as ``(keys, bodies, borns, headers, tags)``; the last two None when no
        record among them has any."""
        whole = [(i - lo, r) for i, r in self.whole.items() if lo <= i < hi] if self.whole else []
        headers: list[Any] | None = None
        tags: list[Any] | None = None
        if whole:
            headers, tags = [None] * (hi - lo), [None] * (hi - lo)
            for i, r in whole:
                headers[i], tags[i] = r[3], r[4]
        return self.keys[lo:hi], self.bodies[lo:hi], self.borns[lo:hi], headers, tags


#: A run of consecutive records in ``FrameRecords``: ``(values, watermarks, source offsets,
#: producer, side)``, each value encoded on its own (``RawValues`` if marshal cannot write one), or
#: None for one record appended whole.
FramePart = Union[tuple[Sequence[Any], Sequence[int], Sequence[int], str, int], None]


class RawValues(list):  # type: ignore[type-arg]
    """The values of a ``FrameRecords`` part that marshal cannot write, kept as they are (each
    record's body is then ``encode`` of its frame, a pickle)."""

    __slots__ = ()


class FrameRecords(_RecordColumns):
    """Records whose bodies are ``encode(frame)``, each frame a tuple ``(value, watermark, producer,
    source offset, side)`` (what a framed shuffle sink writes), kept in *parts*: runs of records
    added together, of one producer and side, each value encoded on its own when the run is added
    (``extend``: fresh in the processor's cache, and a reader decodes only the values it reads), the
    watermarks and source offsets as columns; records appended whole (``append``: a control record)
    in between. No tuple and no body is made per record.

    As a sequence, each body is made when it is asked for, the same bytes as ``encode`` of the
    frame's tuple. The embedded broker stores the parts as they are and hands the frames back as
    ``Fields`` (``RecordBlock.items``). ``encode(frame)`` must be ``marshal.dumps(frame,
    marshal_version)`` wherever marshal can write ``frame``."""

    __slots__ = ("parts", "starts", "encode", "marshal_version")

    def __init__(self, encode: Callable[[Any], bytes], marshal_version: int) -> None:
        super().__init__()
        self.encode, self.marshal_version = encode, marshal_version
        self.parts: list[FramePart] = []
        self.starts: list[int] = []  # the index of each part's first record

    def extend(self, keys: Sequence[MessageKey], borns: Sequence[int], values: Sequence[Any],
               watermarks: Sequence[int], offsets: Sequence[int], producer: str, side: int) -> None:
        """Records of one producer and side, their frames given as columns (each as long as ``keys``)."""
        try:
            encoded: Sequence[Any] = list(map(marshal.dumps, values, repeat(self.marshal_version)))
        except ValueError:  # a value marshal cannot write: kept as they are (the bodies are pickles)
            encoded = RawValues(values)
        self.starts.append(len(self.keys))
        self.parts.append((encoded, watermarks, offsets, producer, side))
        self.keys.extend(keys)
        self.borns.extend(borns)

    def add(self, key: MessageKey, frame: tuple[Any, int, str, int, int], born: int) -> None:
        """One record whose body is ``encode(frame)``."""
        value, watermark, producer, offset, side = frame
        self.extend((key,), (born,), (value,), (watermark,), (offset,), producer, side)

    def append(self, record: RecordTuple) -> None:
        """One record as it is: ``(key, body, born, headers, tags)``."""
        self.whole[len(self.keys)] = record
        self.starts.append(len(self.keys))
        self.parts.append(None)
        self.keys.append(record[0])
        self.borns.append(record[2])

    def clear(self) -> None:
        super().clear()
        self.starts.clear()

    def _middle(self) -> list[Any]:
        return self.parts

    def _body(self, i: int) -> bytes:
        j = bisect.bisect_right(self.starts, i) - 1
        part = self.parts[j]
        assert part is not None  # a record appended whole is in ``whole``
        k = i - self.starts[j]
        value = part[0][k] if type(part[0]) is RawValues else marshal.loads(part[0][k])
        return self.encode((value, part[1][k], part[3], part[2][k], part[4]))

    def columns(self, lo: int, hi: int) -> tuple[list[MessageKey], list[int], dict[int, RecordTuple], list[FramePart]]:
        """Records ``lo:hi`` as ``(keys, borns, whole, parts)``: ``whole`` indexed from ``lo``, the
        parts cut to ``lo:hi``."""
        whole = {i - lo: r for i, r in self.whole.items() if lo <= i < hi} if self.whole else {}
        parts: list[FramePart] = []
        starts, n = self.starts, len(self.keys)
        for j in range(max(bisect.bisect_right(starts, lo) - 1, 0), bisect.bisect_left(starts, hi)):
            part, first = self.parts[j], starts[j]
            end = starts[j + 1] if j + 1 < len(starts) else n
            if part is None or (first >= lo and end <= hi):
                parts.append(part)
                continue
            a, b = max(lo, first) - first, min(hi, end) - first
            values = part[0][a:b]
            parts.append((RawValues(values) if type(part[0]) is RawValues else values, part[1][a:b], part[2][a:b],
                          part[3], part[4]))
        return self.keys[lo:hi], self.borns[lo:hi], whole, parts


class Fields(Sequence[tuple[Any, ...]]):
    """Tuples of one width kept as one column per field (``fields[j][i]``: field ``j`` of tuple
    ``i``): how a broker may hand back the frames of ``FrameRecords`` (``RecordBlock.items``). As a
    sequence, each tuple is made when it is asked for; a reader that needs one field of every
    record takes its column instead."""

    __slots__ = ("fields",)

    def __init__(self, fields: Sequence[Sequence[Any]]) -> None:
        self.fields = tuple(fields)

    def __len__(self) -> int:
        return len(self.fields[-1])

    @overload
    def __getitem__(self, at: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, at: slice) -> Fields: ...

    def __getitem__(self, at: int | slice) -> tuple[Any, ...] | Fields:
        if isinstance(at, slice):
            return Fields([column[at] for column in self.fields])
        return tuple(column[at] for column in self.fields)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return zip(*self.fields)


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
        #: Where the broker kept them (``ItemRecords``): what each body decodes to, without decoding
        #: it (None for a record appended whole); None when the broker has only the bodies.
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


def blocks_of(records: Iterable[ReadRecord], size: int = 4096) -> Iterator[RecordBlock]:
    """``ReadRecord`` tuples in blocks of ``size``."""
    it = iter(records)
    while part := list(islice(it, size)):
        yield RecordBlock.of(part)


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
    #: What the task wants back at its next batch (e.g. its source watermark), as JSON text.
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
    """What rstream's runtime uses. ``EmbeddedBroker`` implements it; a RocketMQ client can too."""

    def create_topic(self, name: str, queues: int = 8, compact: bool = False) -> TopicInfo: ...

    def topic(self, name: str) -> TopicInfo: ...

    def topics(self) -> list[TopicInfo]: ...

    def has_topic(self, name: str) -> bool: ...

    def end_offsets(self, topic: str) -> list[int]: ...

    def send_batch(self, topic: str, bodies: Iterable[bytes | str], key: MessageKey = None,
                   headers: Mapping[str, str] | None = None, queue: int | None = None,
                   born_timestamp: int | None = None, tags: str | None = None,
                   keys: Sequence[MessageKey] | None = None, born_timestamps: Sequence[int] | None = None,
                   progress: bool = True) -> Sequence[SendResult]: ...

    def search_offset(self, topic: str, queue: int, timestamp_ms: int) -> int: ...

    def read(self, topic: str, queue: int | None = None, start: int = 0, end: int | None = None) -> list[Message]: ...

    def delete_topic(self, name: str) -> None: ...

    def read_records(
        self, topic: str, queue: int, start: int, end: int
    ) -> Iterable[tuple[int, MessageKey, bytes, int, int, dict[str, str] | None]]: ...

    def read_latest(self, topic: str, queue: int, end: int | None = None) -> dict[MessageKey, tuple[Any, ...]]: ...

    def append(
        self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None = None
    ) -> bool:
        """Append ``records`` per (topic, queue) in one transaction, with ``tag`` (False: that tag was
        committed before, nothing written). The caller may empty the sequences once it returns (a
        task does, so a batch's outputs are freed at once): keep copies, never the lists."""
        ...

    def last_commit(self, job: str, topic: str, queue: int) -> CommitTag | None: ...

    def find_commit(self, job: str, topic: str, queue: int, start_offset: int) -> CommitTag | None: ...

    def commit_covering(self, job: str, topic: str, queue: int, offset: int) -> CommitTag | None: ...

    def commits(self, job: str, after_seq: int = 0) -> list[CommitTag]: ...

    def compacted_below(self, topic: str, queue: int) -> int: ...
