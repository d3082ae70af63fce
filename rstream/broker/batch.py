"""Record batches: the records one append puts in one queue, kept as columns, and the *batch
formats* a broker may store them in without knowing what their bodies hold.

Any sequence of ``RecordTuple`` is a batch every broker can append record by record. A batch may
also offer ``pack(lo, hi) -> (format name, payload) | None``: records ``lo:hi`` as one opaque
payload. A broker that stores record batches (the embedded one) keeps that payload with its format
name and, when it reads the batch, asks this module's registry for the format's ``unpack`` to turn
it back into columns (``BatchColumns``); a broker that stores one message per record (RocketMQ)
ignores ``pack``. The formats themselves live with what writes them (``rstream.shuffle.batches``): the
broker never learns what a payload holds.
"""

from __future__ import annotations

import importlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, Union, overload, runtime_checkable

from rstream.broker.base import BrokerError, MessageKey, RecordTuple

__all__ = [
    "BatchColumns",
    "BodyRecords",
    "OnCommitRecords",
    "PackedBatch",
    "Payload",
    "RecordColumns",
    "register_format",
    "unpack",
]


class BatchColumns(NamedTuple):
    """A batch's records as parallel columns, what a format's ``unpack`` gives. A column that is
    None holds None for every record (no key, no headers, no tags)."""

    keys: Sequence[MessageKey] | None
    bodies: Sequence[bytes]
    borns: Sequence[int]
    headers: Sequence[dict[str, str] | None] | None
    tags: Sequence[str | None] | None
    #: What each body decodes to, as the format kept it (a reader then decodes no body); None when
    #: the format keeps only the bodies. Becomes ``RecordBlock.items``.
    items: Sequence[Any] | None = None


@runtime_checkable
class PackedBatch(Protocol):
    """A batch that can pack some of its records into one payload of a registered format."""

    def pack(self, lo: int, hi: int) -> tuple[str, bytes] | None:
        """Records ``lo:hi`` as ``(format name, payload)``; None when this format cannot hold them
        (the broker then stores them record by record, from the sequence)."""
        ...


#: A stored payload as a format's ``unpack`` gets it: bytes, or a view of the bytes a broker read.
Payload = Union[bytes, memoryview]

#: Format name -> unpack: payload -> columns.
_FORMATS: dict[str, Callable[[Payload], BatchColumns]] = {}


def register_format(name: str, unpack: Callable[[Payload], BatchColumns]) -> None:
    """Make ``name`` readable. A name is ``"module:format"``: a process that reads a payload of a
    format nobody registered there imports ``module`` (which registers it) first, if it is one of
    rstream's (a broker file never makes a reader import any other module)."""
    if ":" not in name:
        raise BrokerError(f"batch format name {name!r} must be 'module:format', the module registering it")
    _FORMATS[name] = unpack


#: Modules of rstream's formats that moved: a name stored before the move imports the module now
#: registering it (which registers the older name too).
MOVED = {"rstream.serde.batches": "rstream.shuffle.batches"}


def unpack(name: str, payload: Payload) -> BatchColumns:
    """The columns of a payload of format ``name``; ``BrokerError`` if no module registers it."""
    unpack_format = _FORMATS.get(name)
    if unpack_format is None:
        module = name.partition(":")[0]
        module = MOVED.get(module, module)
        if module.split(".")[0] != "rstream":  # a stored name never makes a reader import anything else
            raise BrokerError(f"no batch format {name!r}: only rstream's modules are imported for a format; "
                              "import the module that registers it before reading")
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise BrokerError(f"no batch format {name!r}: cannot import its module ({exc})") from exc
        unpack_format = _FORMATS.get(name)
        if unpack_format is None:
            raise BrokerError(f"no batch format {name!r}: its module does not register it")
    return unpack_format(payload)


class RecordColumns(Sequence[RecordTuple]):
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

    def __iter__(self) -> Iterator[RecordTuple]:  # what a broker that appends tuples walks: no index per record
        whole, body, borns = self.whole, self._body, self.borns
        for i, key in enumerate(self.keys):
            record = whole.get(i) if whole else None
            yield record if record is not None else (key, body(i), borns[i], None, None)

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


class BodyRecords(RecordColumns):
    """Records kept as three columns, keys, bodies and born times (what a sink writes: no headers,
    no tags); a record with headers or tags sits in between. A broker that stores columns stores
    them as they are, with no tuple made per record and none taken apart again."""

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

    def __iter__(self) -> Iterator[RecordTuple]:
        if self.whole:
            return super().__iter__()
        return ((k, b, t, None, None) for k, b, t in zip(self.keys, self.bodies, self.borns))

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


class OnCommitRecords(BodyRecords):
    """A sink's records that consumers outside rstream may see only once their append commits
    (``sink(topic, serializer, visible="on_commit")``): the marker a broker reads (``visible_on_commit``).
    The embedded broker's appends are atomic (nothing is visible before the commit): it stores them
    as any ``BodyRecords``. ``RocketMQBroker`` sends them as RocketMQ half messages, committed when
    the decision log says the append won, rolled back when it lost."""

    __slots__ = ()


def visible_on_commit(records: object) -> bool:
    """Whether an append's records for one queue are to be visible only once the append commits."""
    return isinstance(records, OnCommitRecords)
