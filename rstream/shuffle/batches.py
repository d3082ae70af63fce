"""Shuffle record batches that keep their values as Python objects until a broker stores them, and
the batch formats (``rstream.broker.batch``) that store them so: a shuffle record is then neither
encoded nor decoded one by one. They are the shuffle's (a frame is its wire), so they live in
``rstream.shuffle``; formats stored under their older module's name (``rstream.serde.batches``) are
read as these (``rstream.broker.batch.MOVED``).

- ``ItemRecords``: records whose bodies are ``encode(item)``, kept as items (what shuffle sinks
  write); stored as one marshal of the items (format ``ITEMS``), read back as ``RecordBlock.items``.
- ``FrameRecords``: records whose bodies are ``encode(frame)``, each frame ``(value, watermark,
  producer, source offset, side)`` (what a framed shuffle sink writes), kept in parts with columns;
  stored as the parts (format ``FRAMES``), read back as ``Fields`` (one column per field).

Both are ``Sequence[RecordTuple]`` too, so a broker that appends record by record (RocketMQ) sends
the same bytes a reader decodes with ``rstream.serde.codec.decode``.
"""

from __future__ import annotations

import bisect
import marshal
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, TypeVar, Union, overload

from rstream.broker.base import MessageKey, RecordTuple
from rstream.broker.batch import BatchColumns, Payload, RecordColumns, register_format

__all__ = ["FRAMES", "ITEMS", "Fields", "FramePart", "FrameRecords", "ItemRecords", "RawValues"]

#: The batch format of ``ItemRecords``.
ITEMS = "rstream.shuffle.batches:items"
#: The batch format of ``FrameRecords``.
FRAMES = "rstream.shuffle.batches:frames"

#: marshal's version for a stored batch of items: 2, which has no back-references, so every record
#: reads back as objects of its own, as if its body had been decoded alone (with references, a dict
#: that two records shared in the writing task would be one dict in the reading task too).
_ITEMS_VERSION = 2
#: marshal's version for a stored batch of frames: 4, whose back-references write each key of the
#: batch once (a shuffle's keys repeat), and read back as one object per key.
_FRAMES_VERSION = 4
#: marshal's version for the parts and born times inside it: 2. Version 4 looks every object that
#: has more than one reference up in a table (a queue's watermarks, source offsets and born times
#: are shared with the task's own columns), for a few bytes less: the bench's window count wrote
#: its 1 M frames in 240 ms that way against 175 ms so, and read them back in 108 against 92 ms.
_FRAMES_COLUMNS_VERSION = 2

_Column = TypeVar("_Column", tuple[Any, ...], list[Any])


def _all_none(column: _Column) -> _Column | None:
    return None if column.count(None) == len(column) else column


class ItemRecords(RecordColumns):
    """Records whose bodies are ``encode(item)``, kept as *items* (what shuffle sinks write), with
    records appended whole (``append``: a control record, with headers) in between.

    As a sequence, each body is encoded when it is asked for. A broker that stores record batches
    stores the items themselves (``pack``), in one marshal call per stored batch, and hands them
    back as ``RecordBlock.items``. ``encode(item)`` must be ``marshal.dumps(item, marshal_version)``
    wherever marshal can write ``item``."""

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

    def pack(self, lo: int, hi: int) -> tuple[str, bytes] | None:
        """Records ``lo:hi`` in format ``ITEMS``: their items, not their bodies (one marshal call);
        None when marshal cannot write an item (its body is whatever ``encode`` makes of it)."""
        keys, items, borns, whole = self.columns(lo, hi)
        kept = {i: (r[1], r[3], r[4]) for i, r in whole.items()}  # index -> (body, headers, tags)
        try:
            return ITEMS, marshal.dumps((_all_none(keys), items, borns, kept or None, self.marshal_version),
                                        _ITEMS_VERSION)
        except ValueError:
            return None


#: A run of consecutive records in ``FrameRecords``: ``(values, watermarks, source offsets,
#: producer, side)``, each value encoded on its own (``RawValues`` if marshal cannot write one), or
#: None for one record appended whole.
FramePart = Union[tuple[Sequence[Any], Sequence[int], Sequence[int], str, int], None]


class RawValues(list):  # type: ignore[type-arg]
    """The values of a ``FrameRecords`` part that marshal cannot write, kept as they are (each
    record's body is then ``encode`` of its frame, a pickle)."""

    __slots__ = ()


class FrameRecords(RecordColumns):
    """Records whose bodies are ``encode(frame)``, each frame a tuple ``(value, watermark, producer,
    source offset, side)`` (what a framed shuffle sink writes), kept in *parts*: runs of records
    added together, of one producer and side, each value encoded on its own when the run is added
    (``extend``: fresh in the processor's cache, and a reader decodes only the values it reads), the
    watermarks and source offsets as columns; records appended whole (``append``: a control record)
    in between. No tuple and no body is made per record.

    As a sequence, each body is made when it is asked for, the same bytes as ``encode`` of the
    frame's tuple. A broker that stores record batches stores the parts as they are (``pack``) and
    hands the frames back as ``Fields`` (``RecordBlock.items``). ``encode(frame)`` must be
    ``marshal.dumps(frame, marshal_version)`` wherever marshal can write ``frame``."""

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

    def pack(self, lo: int, hi: int) -> tuple[str, bytes] | None:
        """Records ``lo:hi`` in format ``FRAMES``: their parts as they are (each value encoded on its
        own); None when marshal cannot write a value."""
        keys, borns, whole, parts = self.columns(lo, hi)
        if any(part is not None and type(part[0]) is RawValues for part in parts):
            return None  # values kept as they are: marshal cannot write one
        kept = {i: (r[1], r[3], r[4]) for i, r in whole.items()}  # index -> (body, headers, tags)
        columns = marshal.dumps((parts, borns), _FRAMES_COLUMNS_VERSION)
        return FRAMES, marshal.dumps((_all_none(keys), columns, kept or None, self.marshal_version), _FRAMES_VERSION)


class Fields(Sequence[tuple[Any, ...]]):
    """Tuples of one width kept as one column per field (``fields[j][i]``: field ``j`` of tuple
    ``i``): how a stored batch of ``FrameRecords`` hands back its frames (``RecordBlock.items``). As
    a sequence, each tuple is made when it is asked for; a reader that needs one field of every
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


class _ItemBodies(Sequence[bytes]):
    """The bodies of a stored batch of items or frames, each encoded when it is read:
    ``marshal.dumps(item, version)``, or the body of a record that was appended whole."""

    __slots__ = ("items", "whole", "version")

    def __init__(self, items: Sequence[Any], whole: Mapping[int, bytes], version: int) -> None:
        self.items, self.whole, self.version = items, whole, version

    def __len__(self) -> int:
        return len(self.items)

    @overload
    def __getitem__(self, at: int) -> bytes: ...

    @overload
    def __getitem__(self, at: slice) -> _ItemBodies: ...

    def __getitem__(self, at: int | slice) -> bytes | _ItemBodies:
        if isinstance(at, slice):
            lo, hi, step = at.indices(len(self.items))
            if step != 1:
                raise ValueError("a stored batch's bodies are sliced with step 1")
            whole = {i - lo: b for i, b in self.whole.items() if lo <= i < hi} if self.whole else {}
            return _ItemBodies(self.items[lo:hi], whole, self.version)
        i = range(len(self.items))[at]
        body = self.whole.get(i)
        return body if body is not None else marshal.dumps(self.items[i], self.version)

    def __iter__(self) -> Iterator[bytes]:
        whole, version, dumps = self.whole, self.version, marshal.dumps
        for i, item in enumerate(self.items):
            body = whole.get(i)
            yield body if body is not None else dumps(item, version)


class _Encoded(Sequence[Any]):
    """Values stored each encoded on its own (a stored batch of frames), decoded when read: a
    windowed count reads its records' values only to report a late one."""

    __slots__ = ("_bodies",)

    def __init__(self, bodies: Sequence[bytes | None]) -> None:
        self._bodies = bodies  # None: a record appended whole, whose value is None

    def __len__(self) -> int:
        return len(self._bodies)

    @overload
    def __getitem__(self, at: int) -> Any: ...

    @overload
    def __getitem__(self, at: slice) -> Sequence[Any]: ...

    def __getitem__(self, at: int | slice) -> Any:
        if isinstance(at, slice):
            return _Encoded(self._bodies[at])
        body = self._bodies[at]
        return None if body is None else marshal.loads(body)

    def __iter__(self) -> Iterator[Any]:
        loads = marshal.loads
        return (None if body is None else loads(body) for body in self._bodies)


def _kept_columns(n: int, kept: Mapping[int, tuple[bytes, Any, Any]] | None) -> tuple[dict[int, bytes], Any, Any]:
    """The bodies, headers and tags of the records of a stored batch of items or frames that were
    appended whole: ``(index -> body, headers column or None, tags column or None)``."""
    whole: dict[int, bytes] = {}
    heads: list[Any] = [None] * n if kept else []
    marks: list[Any] = list(heads)
    for i, (body, hdrs, tag) in (kept or {}).items():
        whole[i], heads[i], marks[i] = body, hdrs, tag
    return (whole, heads if heads.count(None) != len(heads) else None,
            marks if marks.count(None) != len(marks) else None)


def _unpack_items(payload: Payload) -> BatchColumns:
    keys, items, borns, kept, version = marshal.loads(payload)
    whole, heads, tags = _kept_columns(len(items), kept)
    return BatchColumns(keys, _ItemBodies(items, whole, version), borns, heads, tags, items)


def _decode_frames(parts: Sequence[Any]) -> Fields:
    """The frames of a stored batch's parts as ``Fields``, each value decoded when read."""
    values: list[Any] = []
    marks: list[Any] = []
    offsets: list[Any] = []
    producers: list[Any] = []
    sides: list[Any] = []
    for part in parts:
        if part is None:  # a record appended whole
            for column in (values, marks, offsets, producers, sides):
                column.append(None)
            continue
        part_values, part_marks, part_offsets, producer, side = part
        values.extend(part_values)
        marks.extend(part_marks)
        offsets.extend(part_offsets)
        producers.extend(repeat(producer, len(part_marks)))
        sides.extend(repeat(side, len(part_marks)))
    return Fields((_Encoded(values), marks, producers, offsets, sides))


def _unpack_frames(payload: Payload) -> BatchColumns:
    keys, columns, kept, version = marshal.loads(payload)
    parts, borns = marshal.loads(columns)
    frames = _decode_frames(parts)
    whole, heads, tags = _kept_columns(len(borns), kept)
    # a data record appended whole (no headers) has no fields: then the batch is read as bodies
    fielded = not kept or all(hdrs is not None for _, hdrs, _ in kept.values())
    return BatchColumns(keys, _ItemBodies(frames, whole, version), borns, heads, tags, frames if fielded else None)


register_format(ITEMS, _unpack_items)
register_format(FRAMES, _unpack_frames)
for _older in ("rstream.serde.batches:items", "rstream.serde.batches:frames"):  # batches stored before the move
    register_format(_older, _unpack_items if _older.endswith("items") else _unpack_frames)
