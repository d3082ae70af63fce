"""How the embedded broker stores a *record batch* (one row of consecutive records of one queue):
its payload, and reading it back as columns.

A payload is one of two kinds:

- the broker's own columnar format: one ``marshal`` (version 2) of ``(2, offsets, keys, bodies,
  borns, headers, tags)``, columns rather than a tuple per record, so reading it back makes no tuple
  per record (``marshal.loads`` of 4096 records is two to three times faster) and a column that is
  all None takes one byte. marshal: fast, and it cannot run code when read back (unlike pickle). It
  holds only bytes, str, ints and the headers' str -> str dicts: never a decoded value;
- a *packed* batch, what a batch gave as ``pack(lo, hi)`` (``rstream.broker.batch``): a zero byte
  (never the first byte of a marshal), the format's name, a zero byte, and the format's payload as
  it is. Its format's ``unpack`` reads it back.
"""

from __future__ import annotations

import bisect
import marshal
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, NamedTuple, TypeVar

from rstream.broker.base import MessageKey, RecordTuple
from rstream.broker.batch import BodyRecords, unpack

#: Records per stored batch row: big enough to be cheap, small enough that reading a short range
#: does not decode much more than it needs.
BATCH_RECORDS = 4096

#: First item of a stored batch in the columnar format. A batch written before it is a pair
#: ``(offsets, records)`` whose first item is None or a list, never this int.
_COLUMNS = 2

#: First byte of a packed batch's payload.
_PACKED = 0

_Column = TypeVar("_Column", tuple[Any, ...], list[Any])


class StoredBatch(NamedTuple):
    """A stored batch's records as parallel columns. ``offsets`` is None while the records sit at
    ``base, base + 1, ...`` as appended, and lists the offsets kept once compaction removed some. A
    column that is None holds None for every record (no key, no headers, no tags)."""

    offsets: Sequence[int] | None
    keys: Sequence[MessageKey] | None
    bodies: Sequence[bytes]
    borns: Sequence[int]
    headers: Sequence[dict[str, str] | None] | None
    tags: Sequence[str | None] | None
    #: A packed batch's ``BatchColumns.items`` (what each body decodes to, as its format kept it);
    #: None: the broker has only the bodies.
    items: Sequence[Any] | None = None

    def span(self, base: int, start: int, end: int) -> tuple[Sequence[int], int, int]:
        """The offsets in ``[start, end)`` of this batch (stored at ``base``) and their index range."""
        offsets = self.offsets
        if offsets is None:
            lo, hi = max(start - base, 0), max(min(end - base, len(self.bodies)), 0)
            return range(base + lo, base + hi), lo, hi
        lo, hi = bisect.bisect_left(offsets, start), bisect.bisect_left(offsets, end)
        return offsets[lo:hi], lo, hi

    def column(self, name: str, lo: int = 0, hi: int | None = None) -> Sequence[Any] | Iterator[None]:
        """Items ``lo:hi`` of one column (a column of Nones as an iterator of None)."""
        values = getattr(self, name)
        hi = len(self.bodies) if hi is None else hi
        if values is None:
            return repeat(None, hi - lo)
        return values if lo == 0 and hi == len(values) else values[lo:hi]

    def records(self, lo: int = 0, hi: int | None = None) -> Iterator[tuple[Any, ...]]:
        """``(key, body, born_ms, headers, tags)`` of records ``lo:hi``."""
        col = self.column
        return zip(col("keys", lo, hi), col("bodies", lo, hi), col("borns", lo, hi), col("headers", lo, hi),
                   col("tags", lo, hi))


def _all_none(column: _Column) -> _Column | None:
    return None if column.count(None) == len(column) else column


def _encode_payload(records: Sequence[RecordTuple], offsets: list[int] | None = None) -> bytes:
    """A stored batch of ``records`` in the broker's columnar format (``offsets``: those compaction kept)."""
    keys, bodies, borns, headers, tags = zip(*records, strict=True)
    return marshal.dumps((_COLUMNS, offsets, _all_none(keys), bodies, borns, _all_none(headers), _all_none(tags)), 2)


def _encode_columns(records: BodyRecords, lo: int, hi: int) -> bytes:
    """A stored batch of records ``lo:hi`` of ``records``: ``_encode_payload``'s, from the columns."""
    keys, bodies, borns, headers, tags = records.columns(lo, hi)
    return marshal.dumps((_COLUMNS, None, _all_none(keys), bodies, borns, headers, tags), 2)


def _encode_batch(records: Sequence[RecordTuple], lo: int, hi: int) -> bytes:
    """Records ``lo:hi`` as one stored batch: packed if they pack, else in the broker's format."""
    pack = getattr(records, "pack", None)
    if pack is not None:
        packed = pack(lo, hi)
        if packed is not None:
            name, payload = packed
            return b"".join((b"\0", name.encode(), b"\0", payload))
    if isinstance(records, BodyRecords):
        return _encode_columns(records, lo, hi)
    return _encode_payload(records[lo:hi])


def encode_records(records: Sequence[RecordTuple], offsets: list[int]) -> bytes:
    """Records kept at ``offsets`` (what compaction left of a stored batch) as one stored batch."""
    return _encode_payload(records, offsets)


def encode_batches(records: Sequence[RecordTuple]) -> list[tuple[int, bytes]]:
    """``records`` as stored batches of at most ``BATCH_RECORDS``: ``(records in it, payload)`` each."""
    n, size = len(records), BATCH_RECORDS
    return [(min(size, n - i), _encode_batch(records, i, i + size)) for i in range(0, n, size)]


def decode_payload(payload: bytes) -> StoredBatch:
    """A stored batch's columns."""
    if payload[0] == _PACKED:
        end = payload.index(0, 1)
        return StoredBatch(None, *unpack(payload[1:end].decode(), memoryview(payload)[end + 1:]))
    data = marshal.loads(payload)
    if data[0] == _COLUMNS:
        return StoredBatch(*data[1:])
    offsets, records = data  # a batch stored by an rstream before the columnar format
    keys, bodies, borns, headers, tags = zip(*records)
    return StoredBatch(offsets, keys, bodies, borns, headers, tags)
