"""The embedded broker: RocketMQ's model (topics, queues, offsets, broker time, compact topics,
consumer offsets) in one SQLite file in WAL mode, safe when several processes append at once.

Records are stored in *record batches* (one row holds many consecutive records and their base
offset), as Kafka and Pulsar do: one row per record is far too slow for shuffles. A batch holds its
records as columns (``_Columns``), and tasks read them as column blocks (``read_blocks``).
"""

from __future__ import annotations

import bisect
import json
import marshal
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, overload

from rstream.broker.base import (
    BodyRecords,
    BrokerError,
    BrokerPathError,
    CommitTag,
    Fields,
    FrameRecords,
    ItemRecords,
    Message,
    MessageKey,
    RawValues,
    RecordBlock,
    RecordTuple,
    SendResult,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    validate_topic_name,
)
from rstream.progressbar import progress_bar

__all__ = ["EmbeddedBroker", "SendResults"]

#: Records per stored batch row: big enough to be cheap, small enough that reading a short range
#: does not decode much more than it needs.
BATCH_RECORDS = 4096

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY, queues INTEGER NOT NULL, compact INTEGER NOT NULL, created_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS queues (
    topic TEXT NOT NULL, queue INTEGER NOT NULL, next_offset INTEGER NOT NULL, last_store_ms INTEGER NOT NULL,
    compacted_below INTEGER NOT NULL DEFAULT 0, clean_records INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, queue)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    topic TEXT NOT NULL, queue INTEGER NOT NULL, base_offset INTEGER NOT NULL, span INTEGER NOT NULL,
    store_ms INTEGER NOT NULL, payload BLOB NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS batches_by_offset ON batches (topic, queue, base_offset);
CREATE TABLE IF NOT EXISTS commit_tags (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL, topic TEXT NOT NULL, queue INTEGER NOT NULL,
    start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, committed_ms INTEGER NOT NULL,
    meta TEXT NOT NULL DEFAULT '', batch_id INTEGER, info TEXT NOT NULL DEFAULT '',
    outputs TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS commit_tags_by_range ON commit_tags (job, topic, queue, start_offset);
CREATE TABLE IF NOT EXISTS consumer_offsets (
    grp TEXT NOT NULL, topic TEXT NOT NULL, queue INTEGER NOT NULL, next_offset INTEGER NOT NULL,
    PRIMARY KEY (grp, topic, queue)
) WITHOUT ROWID;
"""


#: SQLite page size of a new broker file (bytes). With 4 KiB pages, the window count of the bench
#: (1 M clicks, in one process) took 3.6-4.1 s against 3.4-3.7 s with 64 KiB pages; 32 KiB: 3.5-3.6 s.
_PAGE_SIZE = 65536


#: How much write-ahead log (bytes) makes a commit ask for a checkpoint by default: SQLite's own
#: threshold (1 000 pages) at the broker's page size.
CHECKPOINT_WAL_BYTES = 1000 * _PAGE_SIZE

#: The size (bytes) the first commit after SQLite starts its log over cuts the log file down to
#: (``PRAGMA journal_size_limit``; ``checkpoint_wal_bytes`` if that is less); SQLite keeps the file at
#: its largest otherwise, and then its size would not say how much log there is.
_WAL_KEEP_BYTES = 4 * 1024 * 1024


#: Past this many times ``checkpoint_wal_bytes`` of log, a commit checkpoints itself (see
#: ``EmbeddedBroker._after_commit``).
_WAL_INLINE = 3


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Checkpointer:
    """Copies a broker's write-ahead log into its database file on a thread of its own (one per
    process), so that no commit waits for it. SQLite's automatic checkpoint runs inside whichever
    commit makes the log pass its threshold: on Spark that commit's task stalled for 80 to 250 ms
    (copying and syncing 64 MB) while the batch's other tasks waited for it. A checkpoint here is
    SQLite's ``PASSIVE`` one, the same as its automatic one: it copies what no reader still needs,
    never blocks a reader or a writer, and lets the next commit start the log over once it copied
    all of it. A process that dies during one loses nothing (SQLite finishes or redoes it)."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)  # the thread and its lock stay with the parent

    def _reset(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Path, float] = {}  # database file -> busy timeout (s)
        self._running = 0
        self._thread: threading.Thread | None = None

    def request(self, db_file: Path, busy_timeout_s: float) -> None:
        with self._cond:
            self._due[db_file] = busy_timeout_s
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rstream-broker-checkpoint", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def wait(self, timeout_s: float = 60.0) -> bool:
        """Wait until no checkpoint is due or running in this process; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._due or self._running:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    return False
        return True

    def _run(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._due:
                    cond.wait()
                db_file, busy_timeout_s = self._due.popitem()
                self._running += 1
            try:
                checkpoint(db_file, busy_timeout_s)
            except Exception:  # the folder is gone, or the file is not a broker's: a later commit asks again
                pass
            finally:
                with cond:
                    self._running -= 1
                    cond.notify_all()


def checkpoint(db_file: Path, busy_timeout_s: float = 5.0) -> tuple[int, int, int]:
    """A ``PASSIVE`` checkpoint of a broker's database file: (busy, frames in the log, frames
    copied), SQLite's answer. Opens the file read-write and never creates it."""
    conn = sqlite3.connect(f"{db_file.absolute().as_uri()}?mode=rw", uri=True, timeout=busy_timeout_s,
                           isolation_level=None)
    try:
        return _passive_checkpoint(conn)
    finally:
        conn.close()


def _passive_checkpoint(conn: sqlite3.Connection) -> tuple[int, int, int]:
    row = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(row[0]), int(row[1]), int(row[2])


_CHECKPOINTER = _Checkpointer()


#: First item of a stored batch in the columnar format. A batch written before it is a pair
#: ``(offsets, records)`` whose first item is None or a list, never this int.
_COLUMNS = 2


_Column = TypeVar("_Column", tuple[Any, ...], list[Any])

#: First item of a stored batch of ``ItemRecords``: the records' items instead of their bodies.
_ITEMS = 3
#: marshal's version for a stored batch of items: 2, which has no back-references, so every record
#: reads back as objects of its own, as if its body had been decoded alone (with references, a dict
#: that two records shared in the writing task would be one dict in the reading task too).
_PAYLOAD_VERSION = 2
#: First item of a stored batch of ``FrameRecords`` as rstream wrote it before ``_SPLIT_FRAMES``
#: (still read): the records' parts (each value encoded on its own, decoded when read: ``_Encoded``)
#: instead of their bodies, all in marshal version 4.
_FRAMES = 4
#: First item of a stored batch of ``FrameRecords``: as ``_FRAMES``, but the parts and born times
#: are a marshal blob of their own (``_FRAMES_COLUMNS_VERSION``) inside the batch (version 4).
_SPLIT_FRAMES = 5
#: marshal's version for a stored batch of frames: 4, whose back-references write each key of the
#: batch once (a shuffle's keys repeat), and read back as one object per key.
_FRAMES_VERSION = 4
#: marshal's version for the parts and born times inside it: 2. Version 4 looks every object that
#: has more than one reference up in a table (a queue's watermarks, source offsets and born times
#: are shared with the task's own columns), for a few bytes less: the bench's window count wrote
#: its 1 M frames in 240 ms that way against 175 ms so, and read them back in 108 against 92 ms.
_FRAMES_COLUMNS_VERSION = 2


class _ItemBodies(Sequence[bytes]):
    """The bodies of a stored batch of items, each encoded when it is read: ``marshal.dumps(item,
    version)``, or the body of a record that was appended whole."""

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


class _Columns(NamedTuple):
    """A stored batch's records as parallel columns. ``offsets`` is None while the records sit at
    ``base, base + 1, ...`` as appended, and lists the offsets kept once compaction removed some. A
    column that is None holds None for every record (no key, no headers, no tags)."""

    offsets: Sequence[int] | None
    keys: Sequence[MessageKey] | None
    bodies: Sequence[bytes]
    borns: Sequence[int]
    headers: Sequence[dict[str, str] | None] | None
    tags: Sequence[str | None] | None
    #: A batch of ``ItemRecords``: each record's item (what its body decodes to; None for a record
    #: appended whole), ``bodies`` then encodes them when read. None: bodies are stored.
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
    """A stored batch: columns, not a tuple per record, so reading it back makes no tuple per record
    (``marshal.loads`` of 4096 records is two to three times faster), and columns that are all None
    take one byte. marshal: fast, and it cannot run code when read back (unlike pickle)."""
    keys, bodies, borns, headers, tags = zip(*records, strict=True)
    return marshal.dumps((_COLUMNS, offsets, _all_none(keys), bodies, borns, _all_none(headers), _all_none(tags)), 2)


def _encode_columns(records: BodyRecords, lo: int, hi: int) -> bytes:
    """A stored batch of records ``lo:hi`` of ``records``: ``_encode_payload``'s, from the columns."""
    keys, bodies, borns, headers, tags = records.columns(lo, hi)
    return marshal.dumps((_COLUMNS, None, _all_none(keys), bodies, borns, headers, tags), 2)


def _encode_batch(records: Sequence[RecordTuple], lo: int, hi: int) -> bytes:
    if isinstance(records, ItemRecords):
        return _encode_items(records, lo, hi)
    if isinstance(records, FrameRecords):
        return _encode_frames(records, lo, hi)
    if isinstance(records, BodyRecords):
        return _encode_columns(records, lo, hi)
    return _encode_payload(records[lo:hi])


def _encode_items(records: ItemRecords, lo: int, hi: int) -> bytes:
    """A stored batch of records ``lo:hi`` of ``records``: their items, not their bodies (one
    marshal call for the batch); as ``_encode_payload`` when marshal cannot write an item (its
    body is then whatever ``records.encode`` makes of it, e.g. a pickle)."""
    keys, items, borns, whole = records.columns(lo, hi)
    kept = {i: (r[1], r[3], r[4]) for i, r in whole.items()}  # index -> (body, headers, tags)
    try:
        return marshal.dumps((_ITEMS, None, _all_none(keys), items, borns, kept or None, records.marshal_version),
                             _PAYLOAD_VERSION)
    except ValueError:
        return _encode_payload(records[lo:hi])


def _encode_frames(records: FrameRecords, lo: int, hi: int) -> bytes:
    """A stored batch of records ``lo:hi`` of ``records``: their parts as they are (each value
    encoded on its own); as ``_encode_payload`` when marshal cannot write a value."""
    keys, borns, whole, parts = records.columns(lo, hi)
    kept = {i: (r[1], r[3], r[4]) for i, r in whole.items()}  # index -> (body, headers, tags)
    if any(part is not None and type(part[0]) is RawValues for part in parts):
        return _encode_payload(records[lo:hi])  # values kept as they are: marshal cannot write one
    columns = marshal.dumps((parts, borns), _FRAMES_COLUMNS_VERSION)
    return marshal.dumps((_SPLIT_FRAMES, None, _all_none(keys), columns, kept or None, records.marshal_version),
                         _FRAMES_VERSION)


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


def _decode_payload(payload: bytes) -> _Columns:
    data = marshal.loads(payload)
    if data[0] == _COLUMNS:
        return _Columns(*data[1:])
    if data[0] == _ITEMS:
        _, offsets, keys, items, borns, kept, version = data
        whole, heads, tags = _kept_columns(len(items), kept)
        return _Columns(offsets, keys, _ItemBodies(items, whole, version), borns, heads, tags, items)
    if data[0] == _FRAMES or data[0] == _SPLIT_FRAMES:
        if data[0] == _SPLIT_FRAMES:
            _, offsets, keys, columns, kept, version = data
            parts, borns = marshal.loads(columns)
        else:
            _, offsets, keys, parts, borns, kept, version = data
        frames = _decode_frames(parts)
        whole, heads, tags = _kept_columns(len(borns), kept)
        # a data record appended whole (no headers) has no fields: then the batch is read as bodies
        fielded = not kept or all(hdrs is not None for _, hdrs, _ in kept.values())
        return _Columns(offsets, keys, _ItemBodies(frames, whole, version), borns, heads, tags,
                        frames if fielded else None)
    offsets, records = data  # a batch stored by an rstream before the columnar format
    keys, bodies, borns, headers, tags = zip(*records)
    return _Columns(offsets, keys, bodies, borns, headers, tags)


class SendResults(Sequence[SendResult]):
    """Where each message of a ``send_batch`` landed, in the order sent; each ``SendResult`` is
    made when it is read (a million sends should not cost a million objects nobody looks at)."""

    def __init__(self, topic: str, queues: list[int], index: list[int], starts: dict[int, int]) -> None:
        self._topic, self._queues, self._index, self._starts = topic, queues, index, starts

    def __len__(self) -> int:
        return len(self._queues)

    @overload
    def __getitem__(self, i: int) -> SendResult: ...

    @overload
    def __getitem__(self, i: slice) -> list[SendResult]: ...

    def __getitem__(self, i: int | slice) -> SendResult | list[SendResult]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        q = self._queues[i]
        return SendResult(self._topic, q, self._starts[q] + self._index[i])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"SendResults({len(self)} messages to {self._topic!r})"


class EmbeddedBroker:
    """A RocketMQ-shaped broker in a folder: ``EmbeddedBroker("data/broker")``.

    Safe across processes and threads: every write is one ``BEGIN IMMEDIATE`` transaction. The
    object pickles as its path and settings, so Spark tasks reopen the same broker in their own
    process. Raises ``BrokerPathError`` when the folder cannot be created or written.

    Compact topics are compacted automatically, like Kafka's log cleaner: after an append to a
    compact topic commits, the appending process compacts a queue when its *dirty* part (records
    appended since its last compaction, minus a tail that stays as written) holds at least
    ``compact_min_dirty`` records and at least ``compact_dirty_ratio`` of the records below the
    compaction point. Settings (per queue):

    - ``compact_min_dirty`` (50 000 records): a workshop-size job (thousands of records) never
      loses the history that ``job.state(batch=N)``, ``job.state_diff`` and ``job.trace`` read;
      ``None`` turns automatic compaction off.
    - ``compact_dirty_ratio`` (0.3): dirty records / (dirty + records kept by the last compaction).
      A replay then reads at most about ``1 / (1 - ratio)`` (1.43) times the live keys, plus the
      lag and ``compact_min_dirty``; a lower ratio compacts more often.
    - ``compact_min_lag`` (10 000 records) and ``compact_min_lag_ms`` (0 ms, as Kafka's
      ``min.compaction.lag.ms``): the newest records, and those appended less than that long ago,
      are never compacted, so the recent past stays readable.
    - ``compact_delete_retention_ms`` (60 000 ms): a delete (empty body) is kept that long after it
      was appended, so a reader that follows the topic in steps and saw a key's value also sees
      its delete (Kafka's ``delete.retention.ms``).

    Compaction keeps the latest message per key below the compaction point; offsets never change.
    Readers of one queue range see one snapshot, so compaction never changes what a read returns
    below ``compacted_below``'s old value.

    SQLite's write-ahead log is copied into the database file (a checkpoint) on a thread of its own
    in each process that writes, once a commit finds more than ``checkpoint_wal_bytes`` (64 MiB) of
    log, rather than inside that commit, which would stall it (and on Spark the batch's other
    tasks with it); ``None`` leaves it to SQLite, inside the commit.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        busy_timeout_s: float = 120.0,
        *,
        compact_min_dirty: int | None = 50_000,
        compact_dirty_ratio: float = 0.3,
        compact_min_lag: int = 10_000,
        compact_min_lag_ms: int = 0,
        compact_delete_retention_ms: int = 60_000,
        checkpoint_wal_bytes: int | None = CHECKPOINT_WAL_BYTES,
    ) -> None:
        self.path = Path(path).absolute()
        self.busy_timeout_s = busy_timeout_s
        if checkpoint_wal_bytes is not None and (type(checkpoint_wal_bytes) is not int or checkpoint_wal_bytes < 0):
            raise BrokerError(f"checkpoint_wal_bytes must be a number of bytes >= 0 or None, got {checkpoint_wal_bytes!r}")
        self.checkpoint_wal_bytes = checkpoint_wal_bytes
        if compact_min_dirty is not None and compact_min_dirty < 1:
            raise BrokerError(f"compact_min_dirty must be a positive number of records or None, got {compact_min_dirty!r}")
        if not 0.0 <= compact_dirty_ratio <= 1.0:
            raise BrokerError(f"compact_dirty_ratio must be between 0 and 1, got {compact_dirty_ratio!r}")
        for name, value in (("compact_min_lag", compact_min_lag), ("compact_min_lag_ms", compact_min_lag_ms),
                            ("compact_delete_retention_ms", compact_delete_retention_ms)):
            if value < 0:
                raise BrokerError(f"{name} must be >= 0, got {value!r}")
        self.compact_min_dirty = compact_min_dirty
        self.compact_dirty_ratio = compact_dirty_ratio
        self.compact_min_lag = compact_min_lag
        self.compact_min_lag_ms = compact_min_lag_ms
        self.compact_delete_retention_ms = compact_delete_retention_ms
        self._local = threading.local()
        self._compact_topics: dict[str, bool] = {}
        self._not_before: dict[tuple[str, int], int] = {}  # no automatic compaction of a queue before (ms)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            probe = self.path / f".write-probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise BrokerPathError(
                f"broker path {str(self.path)!r} is not writable ({exc.strerror or exc}); "
                "pass a folder you can write to"
            ) from exc
        self.db_file = self.path / "broker.sqlite"
        self._wal_file = self.path / "broker.sqlite-wal"
        try:
            self._ensure_schema(self._conn())
        except sqlite3.Error as exc:
            raise BrokerPathError(f"broker file {str(self.db_file)!r} cannot be opened: {exc}") from exc

    # -- connections --------------------------------------------------------------------------
    _SETTINGS = ("busy_timeout_s", "compact_min_dirty", "compact_dirty_ratio", "compact_min_lag",
                 "compact_min_lag_ms", "compact_delete_retention_ms", "checkpoint_wal_bytes")

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), **{name: getattr(self, name) for name in self._SETTINGS}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        settings = {name: state[name] for name in self._SETTINGS if name in state}
        self.__init__(state["path"], **settings)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"EmbeddedBroker({str(self.path)!r})"

    def _conn(self, name: str = "conn") -> sqlite3.Connection:
        local = self._local
        conn = getattr(local, name, None)
        if conn is None or getattr(local, name + "_pid", None) != os.getpid():
            conn = sqlite3.connect(
                self.path / "broker.sqlite",
                timeout=self.busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            # a new broker file gets 64 KiB pages (SQLite's default is 4 KiB): a stored batch is a blob
            # of tens to hundreds of KiB, which small pages chain over dozens of overflow pages; an
            # older file keeps its page size (this pragma does nothing once the file has a table)
            conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if self.checkpoint_wal_bytes is not None:  # checkpoints on a thread of their own, not in commits
                conn.execute("PRAGMA wal_autocheckpoint=0")
                conn.execute(f"PRAGMA journal_size_limit={min(_WAL_KEEP_BYTES, self.checkpoint_wal_bytes)}")
            setattr(local, name, conn)
            setattr(local, name + "_pid", os.getpid())
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        with self._write(conn):
            self._migrate(conn)
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Bring a broker file written by an earlier rstream up to this schema, keeping its data."""
        def columns(table: str) -> set[str]:
            return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}

        queue_columns = columns("queues")
        if queue_columns and "compacted_below" not in queue_columns:
            conn.execute("ALTER TABLE queues ADD COLUMN compacted_below INTEGER NOT NULL DEFAULT 0")
        if queue_columns and "clean_records" not in queue_columns:
            conn.execute("ALTER TABLE queues ADD COLUMN clean_records INTEGER NOT NULL DEFAULT 0")
        tag_columns = columns("commit_tags")
        if tag_columns and "seq" not in tag_columns:  # tags without order, batch id, progress or outputs
            conn.execute("ALTER TABLE commit_tags RENAME TO commit_tags_before_seq")
            for statement in _SCHEMA.split(";"):
                if "commit_tags" in statement:
                    conn.execute(statement)
            conn.execute(
                "INSERT INTO commit_tags (job, topic, queue, start_offset, end_offset, committed_ms, meta) "
                "SELECT job, topic, queue, start_offset, end_offset, committed_ms, meta FROM commit_tags_before_seq "
                "ORDER BY committed_ms, start_offset"
            )
            conn.execute("DROP TABLE commit_tags_before_seq")

    class _Tx:
        def __init__(self, conn: sqlite3.Connection, broker: EmbeddedBroker) -> None:
            self.conn, self.broker = conn, broker

        def __enter__(self) -> sqlite3.Connection:
            self.conn.execute("BEGIN IMMEDIATE")
            return self.conn

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            if exc_type is None:
                self.conn.execute("COMMIT")
                self.broker._after_commit(self.conn)
            else:
                self.conn.execute("ROLLBACK")

    def _write(self, conn: sqlite3.Connection | None = None) -> EmbeddedBroker._Tx:
        return EmbeddedBroker._Tx(conn or self._conn(), self)

    def _after_commit(self, conn: sqlite3.Connection) -> None:
        """Ask this process's checkpoint thread for a checkpoint once the log holds more than
        ``checkpoint_wal_bytes`` (its file's size: see ``_WAL_KEEP_BYTES``). SQLite starts the log
        over only when a checkpoint copied all of it; a writer that appends without a pause keeps a
        checkpoint on another thread from ever catching up, so past ``_WAL_INLINE`` times the limit
        the committing connection checkpoints itself, as SQLite would (its own appends wait)."""
        limit = self.checkpoint_wal_bytes
        if limit is None:
            return
        try:  # the write is committed: nothing here may make it look failed (a retry would write it twice)
            size = os.stat(self._wal_file).st_size
            if size > _WAL_INLINE * limit:  # this process's thread first: the two would not run at once
                _CHECKPOINTER.wait(self.busy_timeout_s)
                _passive_checkpoint(conn)
            elif size > limit:
                _CHECKPOINTER.request(self.db_file, self.busy_timeout_s)
        except Exception:  # no log file (yet), or no thread to be had: a later commit asks again
            pass

    def wait_for_checkpoints(self, timeout_s: float = 60.0) -> bool:
        """Wait until the checkpoints this process asked for are done (False on timeout). Nothing
        needs to: a reader sees every commit whether or not it was copied out of the log yet."""
        return _CHECKPOINTER.wait(timeout_s)

    # -- topics -------------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 8, compact: bool = False) -> TopicInfo:
        """Create a topic with ``queues`` queues (idempotent when the settings match)."""
        validate_topic_name(name)
        if not isinstance(queues, int) or isinstance(queues, bool) or queues < 1:
            raise BrokerError(f"topic {name!r}: queues must be a positive int, got {queues!r}")
        with self._write() as conn:
            row = conn.execute("SELECT queues, compact FROM topics WHERE name=?", (name,)).fetchone()
            if row is not None:
                if row[0] != queues or bool(row[1]) != compact:
                    raise TopicExistsError(
                        f"topic {name!r} exists with queues={row[0]}, compact={bool(row[1])}; "
                        f"asked for queues={queues}, compact={compact}"
                    )
                return TopicInfo(name, row[0], bool(row[1]))
            conn.execute(
                "INSERT INTO topics (name, queues, compact, created_ms) VALUES (?, ?, ?, ?)",
                (name, queues, int(compact), _now_ms()),
            )
            conn.executemany(
                "INSERT INTO queues (topic, queue, next_offset, last_store_ms) VALUES (?, ?, 0, 0)",
                [(name, q) for q in range(queues)],
            )
        return TopicInfo(name, queues, compact)

    def topic(self, name: str) -> TopicInfo:
        """The topic's settings; ``UnknownTopicError`` if it does not exist."""
        row = self._conn().execute("SELECT queues, compact FROM topics WHERE name=?", (name,)).fetchone()
        if row is None:
            raise UnknownTopicError(
                f"topic {name!r} does not exist in the broker at {str(self.path)!r}; "
                f"create it first: broker.create_topic({name!r}, queues=4)"
            )
        return TopicInfo(name, row[0], bool(row[1]))

    def has_topic(self, name: str) -> bool:
        return self._conn().execute("SELECT 1 FROM topics WHERE name=?", (name,)).fetchone() is not None

    def topics(self) -> list[TopicInfo]:
        rows = self._conn().execute("SELECT name, queues, compact FROM topics ORDER BY name").fetchall()
        return [TopicInfo(n, q, bool(c)) for n, q, c in rows]

    def delete_topic(self, name: str) -> None:
        """Remove a topic and all its messages."""
        self.topic(name)
        self._compact_topics.pop(name, None)
        with self._write() as conn:
            conn.execute("DELETE FROM topics WHERE name=?", (name,))
            for table in ("queues", "batches", "commit_tags", "consumer_offsets"):
                conn.execute(f"DELETE FROM {table} WHERE topic=?", (name,))

    # -- offsets ------------------------------------------------------------------------------
    def data_version(self) -> int:
        """A number that changes whenever another connection (another thread or process) has
        committed to the broker since this thread last asked: SQLite's ``data_version``, cheaper
        than reading any table. A started job's source watches it while it waits for input."""
        return int(self._conn().execute("PRAGMA data_version").fetchone()[0])

    def end_offsets(self, topic: str) -> list[int]:
        """Per queue, the offset the next message will get (so also the number ever appended)."""
        info = self.topic(topic)
        rows = self._conn().execute(
            "SELECT queue, next_offset FROM queues WHERE topic=? ORDER BY queue", (topic,)
        ).fetchall()
        ends = [0] * info.queues
        for q, off in rows:
            ends[q] = off
        return ends

    def search_offset(self, topic: str, queue: int, timestamp_ms: int) -> int:
        """The first offset in ``queue`` stored at or after broker time ``timestamp_ms``
        (the queue's end offset if none is)."""
        self._check_queue(topic, queue)
        conn = self._conn()
        row = conn.execute(
            "SELECT base_offset, payload FROM batches WHERE topic=? AND queue=? AND store_ms>=? "
            "ORDER BY base_offset LIMIT 1",
            (topic, queue, int(timestamp_ms)),
        ).fetchone()
        if row is None:
            return self.end_offsets(topic)[queue]
        offsets = _decode_payload(row[1]).offsets
        return offsets[0] if offsets else int(row[0])

    # -- writing ------------------------------------------------------------------------------
    def send(
        self,
        topic: str,
        body: bytes | str,
        key: MessageKey = None,
        headers: Mapping[str, str] | None = None,
        queue: int | None = None,
        born_timestamp: int | None = None,
        tags: str | None = None,
    ) -> SendResult:
        """Append one message; the queue is ``queue``, else a stable hash of ``key``, else round robin."""
        return self.send_batch(topic, [body], key=key, headers=headers, queue=queue,
                               born_timestamp=born_timestamp, tags=tags)[0]

    def send_batch(
        self,
        topic: str,
        bodies: Iterable[bytes | str],
        key: MessageKey = None,
        headers: Mapping[str, str] | None = None,
        queue: int | None = None,
        born_timestamp: int | None = None,
        tags: str | None = None,
        keys: Sequence[MessageKey] | None = None,
        born_timestamps: Sequence[int] | None = None,
        progress: bool = True,
    ) -> SendResults:
        """Append many messages in one transaction. ``keys`` / ``born_timestamps`` give one value
        per body; ``key`` / ``born_timestamp`` one for all. Returns where each landed, in order.
        A send that takes longer than half a second shows a progress bar (``progress=False``: none)."""
        info = self.topic(topic)
        n_queues = info.queues
        if queue is not None and not 0 <= queue < n_queues:
            raise BrokerError(f"topic {topic!r} has queues 0..{n_queues - 1}, not {queue!r}")
        now = _now_ms()
        hdrs = dict(headers) if headers else None
        if hdrs is not None:
            for name, text in hdrs.items():
                if not isinstance(name, str) or not isinstance(text, str):
                    raise BrokerError(f"headers must map str to str, got {name!r}: {text!r}")
        encoded: list[bytes] = [b.encode() if type(b) is str else b for b in bodies]  # type: ignore[misc]
        for body in encoded:
            if type(body) is not bytes and not isinstance(body, bytes):
                raise BrokerError(f"message body must be bytes or str, got {type(body).__name__}")
        count = len(encoded)
        key_list: Sequence[MessageKey] = keys if keys is not None else [key] * count
        for kind in {type(k) for k in key_list}:
            if kind is not type(None) and kind is not str and kind is not bytes:
                bad = next(x for x in key_list if type(x) is kind)
                raise BrokerError(f"message key must be str, bytes or None, got {kind.__name__}: {bad!r}")
        stamps = [int(t) for t in born_timestamps] if born_timestamps is not None else \
            [int(born_timestamp if born_timestamp is not None else now)] * count
        if queue is not None:
            placed = [queue] * count
        else:
            rr = self._round_robin_start(topic, n_queues)
            placed = [(rr + i) % n_queues if k is None else zlib.crc32(k.encode() if isinstance(k, str) else k) % n_queues
                      for i, k in enumerate(key_list)]
        per_queue: dict[tuple[str, int], list[RecordTuple]] = {(topic, q): [] for q in sorted(set(placed))}
        index = []
        for q, msg_key, body, ts in zip(placed, key_list, encoded, stamps):
            recs = per_queue[(topic, q)]
            index.append(len(recs))
            recs.append((msg_key, body, ts, hdrs, tags))
        with progress_bar(count, f"sending to {topic}", enabled=progress) as bar:
            firsts = self._append(per_queue, None, bar.update)
        assert firsts is not None  # only a tagged append can be a no-op
        return SendResults(topic, placed, index, {q: firsts[(topic, q)] for (_t, q) in per_queue})

    def _round_robin_start(self, topic: str, queues: int) -> int:
        counter = getattr(self._local, "rr", 0)
        self._local.rr = counter + 1
        return (counter + os.getpid()) % queues

    def append(
        self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None = None
    ) -> bool:
        """Append records to several (topic, queue)s in one transaction.

        With a ``tag``, the transaction also records it; if that tag was committed before, nothing
        is written and ``False`` is returned (a retry of work already done).
        """
        return self._append(records, tag) is not None

    def _append(
        self, records: Mapping[tuple[str, int], Sequence[RecordTuple]], tag: CommitTag | None,
        written: Callable[[int], Any] | None = None,
    ) -> dict[tuple[str, int], int] | None:
        conn = self._conn()
        firsts: dict[tuple[str, int], int] = {}
        outputs: dict[str, list[int]] = {}
        dirty: list[tuple[str, int, int, int, int]] = []  # (topic, queue, end, compacted_below, clean)
        # encoded before the write lock is taken: a payload does not depend on its offsets, and another
        # process's append (a Spark task on the other core) need not wait while this one encodes
        payloads = {key: [_encode_batch(recs, i, i + BATCH_RECORDS) for i in range(0, len(recs), BATCH_RECORDS)]
                    for key, recs in records.items()}
        with self._write(conn):
            if tag is not None:
                done = conn.execute(
                    "SELECT 1 FROM commit_tags WHERE job=? AND topic=? AND queue=? AND start_offset=?",
                    (tag.job, tag.topic, tag.queue, tag.start_offset),
                ).fetchone()
                if done is not None:
                    return None
            now = _now_ms()
            rows = []
            for (topic, q), recs in records.items():
                row = conn.execute(
                    "SELECT next_offset, last_store_ms, compacted_below, clean_records FROM queues "
                    "WHERE topic=? AND queue=?", (topic, q)
                ).fetchone()
                if row is None:
                    self.topic(topic)
                    raise BrokerError(f"topic {topic!r} has no queue {q!r}")
                next_offset, last_ms, compacted, clean = row
                firsts[(topic, q)] = next_offset
                if not recs:
                    continue
                store_ms = max(now, last_ms)  # broker time never goes back within a queue
                for i, payload in zip(range(0, len(recs), BATCH_RECORDS), payloads[(topic, q)]):
                    span = min(BATCH_RECORDS, len(recs) - i)
                    rows.append((topic, q, next_offset, span, store_ms, payload))
                    next_offset += span
                    if written is not None:
                        written(span)
                conn.execute(
                    "UPDATE queues SET next_offset=?, last_store_ms=? WHERE topic=? AND queue=?",
                    (next_offset, store_ms, topic, q),
                )
                outputs[f"{topic}/{q}"] = [firsts[(topic, q)], next_offset]
                dirty.append((topic, q, next_offset, compacted, clean))
            conn.executemany(
                "INSERT INTO batches (topic, queue, base_offset, span, store_ms, payload) VALUES (?,?,?,?,?,?)",
                rows,
            )
            if tag is not None:
                conn.execute(
                    "INSERT INTO commit_tags (job, topic, queue, start_offset, end_offset, committed_ms, meta, "
                    "batch_id, info, outputs) VALUES (?,?,?,?,?,?,?,?,?,?)",
                    (tag.job, tag.topic, tag.queue, tag.start_offset, tag.end_offset, now, tag.meta,
                     tag.batch_id, tag.info, json.dumps(outputs, separators=(",", ":"))),
                )
        if self.compact_min_dirty is not None:
            for topic, q, end, compacted, clean in dirty:
                if self._compaction_due(end, compacted, clean) and self._is_compact(topic):
                    try:
                        self._compact_queue(topic, q, None, self.compact_delete_retention_ms, auto=True)
                    except sqlite3.OperationalError:
                        pass  # busy or locked past the timeout: the append itself is done; a later one retries
        return firsts

    # -- commit tags --------------------------------------------------------------------------
    _TAG_COLUMNS = ("job, topic, queue, start_offset, end_offset, meta, batch_id, info, outputs, seq, "
                    "committed_ms")

    @staticmethod
    def _tag(row: Sequence[Any]) -> CommitTag:
        outputs = {k: (int(v[0]), int(v[1])) for k, v in json.loads(row[8]).items()} if row[8] else {}
        return CommitTag(row[0], row[1], int(row[2]), int(row[3]), int(row[4]), row[5],
                         None if row[6] is None else int(row[6]), row[7], outputs, int(row[9]), int(row[10]))

    def _tags(self, where: str, args: Sequence[Any], order: str = "seq", limit: int | None = None) -> list[CommitTag]:
        sql = f"SELECT {self._TAG_COLUMNS} FROM commit_tags WHERE {where} ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._tag(row) for row in self._conn().execute(sql, tuple(args))]

    def last_commit(self, job: str, topic: str, queue: int) -> CommitTag | None:
        """The latest committed tag of ``job`` for an input queue, if any."""
        found = self._tags("job=? AND topic=? AND queue=?", (job, topic, queue), "start_offset DESC", 1)
        return found[0] if found else None

    def find_commit(self, job: str, topic: str, queue: int, start_offset: int) -> CommitTag | None:
        """The committed tag of ``job`` for an input queue that starts at ``start_offset``, if any."""
        found = self._tags("job=? AND topic=? AND queue=? AND start_offset=?", (job, topic, queue, start_offset))
        return found[0] if found else None

    def commit_covering(self, job: str, topic: str, queue: int, offset: int) -> CommitTag | None:
        """The committed tag of ``job`` whose input range holds ``offset`` of ``topic``/``queue``."""
        found = self._tags("job=? AND topic=? AND queue=? AND start_offset<=?", (job, topic, queue, offset),
                           "start_offset DESC", 1)
        return found[0] if found and offset < found[0].end_offset else None

    def commits(self, job: str, after_seq: int = 0) -> list[CommitTag]:
        """Every committed tag of ``job`` with ``seq > after_seq``, in commit order: a reader that
        remembers the last ``seq`` it saw reads only what is new."""
        return self._tags("job=? AND seq>?", (job, after_seq))

    def delete_commits(self, job: str) -> None:
        """Forget every commit tag of ``job`` (used when a job is reset)."""
        with self._write() as conn:
            conn.execute("DELETE FROM commit_tags WHERE job=?", (job,))

    # -- reading ------------------------------------------------------------------------------
    def _check_queue(self, topic: str, queue: int) -> TopicInfo:
        info = self.topic(topic)
        if not isinstance(queue, int) or not 0 <= queue < info.queues:
            raise BrokerError(f"topic {topic!r} has queues 0..{info.queues - 1}, not {queue!r}")
        return info

    def _batches(self, topic: str, queue: int, start: int, end: int) -> Iterator[tuple[int, int, _Columns]]:
        """``(base offset, store ms, columns)`` of the stored batches that may hold offsets in
        ``[start, end)``: a seek to the batch holding ``start``, then in order."""
        if end <= start:
            return
        # One statement, so one snapshot: a compaction that commits while this reads (in another
        # process, between two chunks) cannot make it see a key's value but miss its later delete.
        cursor = self._conn().execute(
            "SELECT base_offset, store_ms, payload FROM batches "
            "WHERE topic=?1 AND queue=?2 AND base_offset<?4 AND base_offset>=COALESCE("
            "(SELECT MAX(base_offset) FROM batches WHERE topic=?1 AND queue=?2 AND base_offset<=?3), ?3) "
            "ORDER BY base_offset",
            (topic, queue, start, end),
        )
        for base, store_ms, payload in cursor:
            yield base, store_ms, _decode_payload(payload)

    def read_blocks(self, topic: str, queue: int, start: int, end: int | None = None) -> Iterator[RecordBlock]:
        """The hot path: the records in ``[start, end)`` as column blocks, one per stored batch."""
        if end is None:
            end = self.end_offsets(topic)[queue]
        for base, store_ms, cols in self._batches(topic, queue, start, end):
            offsets, lo, hi = cols.span(base, start, end)
            n = hi - lo
            if n > 0:
                yield RecordBlock(offsets, cols.keys[lo:hi] if cols.keys is not None else (None,) * n,
                                  cols.bodies[lo:hi], cols.borns[lo:hi], (store_ms,) * n,
                                  cols.headers[lo:hi] if cols.headers is not None else (None,) * n,
                                  None if cols.items is None else cols.items[lo:hi])

    def read_records(
        self, topic: str, queue: int, start: int, end: int | None = None
    ) -> Iterator[tuple[int, MessageKey, bytes, int, int, dict[str, str] | None]]:
        """``(offset, key, body, born_ms, store_ms, headers)`` for offsets in ``[start, end)``."""
        for block in self.read_blocks(topic, queue, start, end):
            yield from block.rows()

    def read(
        self, topic: str, queue: int | None = None, start: int = 0, end: int | None = None
    ) -> list[Message]:
        """Messages of one queue (or of every queue when ``queue`` is None) from ``start`` to ``end``."""
        info = self.topic(topic)
        if queue is not None:
            self._check_queue(topic, queue)
        ends = self.end_offsets(topic)
        out: list[Message] = []
        for q in range(info.queues) if queue is None else [queue]:
            stop = ends[q] if end is None else end
            for base, store_ms, cols in self._batches(topic, q, start, stop):
                offsets, lo, hi = cols.span(base, start, stop)
                for off, (k, body, born, hdrs, tags) in zip(offsets, cols.records(lo, hi)):
                    out.append(Message(topic, q, off, k, body, born, store_ms, hdrs or {}, tags))
        return out

    def to_pandas(self, topic: str, queue: int | None = None, decode: bool = True) -> Any:
        """The topic as a DataFrame (one row per message); ``decode`` turns utf-8 bodies into str."""
        import pandas as pd

        rows = []
        for m in self.read(topic, queue):
            body: Any = m.body
            if decode:
                try:
                    body = m.body.decode()
                except UnicodeDecodeError:
                    pass
            rows.append({
                "queue_id": m.queue_id, "offset": m.offset, "key": m.key, "body": body,
                "born_timestamp": m.born_timestamp, "store_timestamp": m.store_timestamp,
                "headers": dict(m.headers), "tags": m.tags,
            })
        cols = ["queue_id", "offset", "key", "body", "born_timestamp", "store_timestamp", "headers", "tags"]
        return pd.DataFrame(rows, columns=cols)

    # -- compact topics -----------------------------------------------------------------------
    def read_latest(self, topic: str, queue: int, end: int | None = None) -> dict[MessageKey, tuple[Any, ...]]:
        """Per key, the latest record ``(key, body, born_ms, headers, tags)`` of ``queue`` below
        ``end``: what a compact topic's reader (state replay) needs, read batch by batch."""
        if end is None:
            end = self.end_offsets(topic)[queue]
        latest: dict[MessageKey, tuple[Any, ...]] = {}
        for base, _store_ms, cols in self._batches(topic, queue, 0, end):
            _offsets, lo, hi = cols.span(base, 0, end)
            latest.update(zip(cols.column("keys", lo, hi), cols.records(lo, hi)))  # later records win
        return latest

    def latest_by_key(self, topic: str, queue: int) -> dict[MessageKey, bytes]:
        """The view a compact topic keeps: per key, the body of its latest message; keys whose
        latest message has an empty body (a delete) are left out."""
        return {k: rec[1] for k, rec in self.read_latest(topic, queue).items() if rec[1]}

    def compact(self, topic: str, queue: int | None = None, below: int | None = None,
                delete_retention_ms: int = 0) -> int:
        """Compact a compact topic now: below ``below`` (default: the queue's end), keep only the
        latest message per key; drop messages without key and deletes (empty bodies) appended more
        than ``delete_retention_ms`` ago (0: every delete). Offsets never change; the queue's
        ``compacted_below`` becomes the compaction point. One queue or (``queue=None``) every queue,
        each in its own short write transaction. Returns the messages removed.

        The broker also compacts on its own (see the class docstring); this is for tests and for
        a user who wants it now."""
        info = self.topic(topic)
        if not info.compact:
            raise BrokerError(f"topic {topic!r} is not a compact topic; create it with compact=True")
        queues = range(info.queues) if queue is None else [queue]
        if queue is not None:
            self._check_queue(topic, queue)
        return sum(self._compact_queue(topic, q, below, delete_retention_ms) for q in queues)

    def _is_compact(self, topic: str) -> bool:
        known = self._compact_topics.get(topic)
        if known is None:
            known = self._compact_topics[topic] = self.has_topic(topic) and self.topic(topic).compact
        return known

    def _compaction_due(self, end: int, compacted: int, clean: int) -> bool:
        """The log cleaner's policy: enough dirty records below the lag, and a large enough share."""
        assert self.compact_min_dirty is not None
        dirty = end - self.compact_min_lag - compacted
        return dirty >= self.compact_min_dirty and dirty >= self.compact_dirty_ratio * (dirty + clean)

    def _compact_queue(self, topic: str, queue: int, below: int | None, delete_retention_ms: int,
                       auto: bool = False) -> int:
        """Compact one queue below ``below`` (rounded down to a stored batch's start). Reads and
        decides in a read transaction without the write lock, then applies in a short write
        transaction if nobody compacted the queue meanwhile. Returns the messages removed."""
        conn = self._conn("compact_conn")  # its own connection: the caller may hold an open cursor
        conn.execute("BEGIN")
        try:
            row = conn.execute(
                "SELECT q.next_offset, q.compacted_below, q.clean_records, t.created_ms, t.compact FROM queues q "
                "JOIN topics t ON t.name=q.topic WHERE q.topic=? AND q.queue=?", (topic, queue)).fetchone()
            if row is None or not row[4]:
                return 0  # gone, or replaced by a topic that is not compact
            end, compacted, clean, created, _compact = row
            now = _now_ms()
            if auto and self._not_before.get((topic, queue), 0) > now:
                return 0
            point = end if below is None else min(int(below), end)
            if auto:
                point = min(point, end - self.compact_min_lag)
                if self.compact_min_lag_ms > 0:
                    first_young = conn.execute(
                        "SELECT base_offset, store_ms FROM batches WHERE topic=? AND queue=? AND store_ms>? "
                        "ORDER BY base_offset LIMIT 1", (topic, queue, now - self.compact_min_lag_ms)).fetchone()
                    if first_young is not None and first_young[0] < point:
                        point, born = first_young
                        # until that batch is old enough, the appends' checks need not look again
                        if not self._compaction_due(point + self.compact_min_lag, compacted, clean):
                            self._not_before[(topic, queue)] = born + self.compact_min_lag_ms + 1
            # a stored batch is compacted whole or not at all: round down to the start of the batch
            # holding the point (rows that compaction rewrote have explicit offsets at or above base)
            if point < end:
                start_of = conn.execute(
                    "SELECT MAX(base_offset) FROM batches WHERE topic=? AND queue=? AND base_offset<=?",
                    (topic, queue, point)).fetchone()[0]
                if start_of is not None and start_of < point:
                    first_after = conn.execute(
                        "SELECT payload FROM batches WHERE topic=? AND queue=? AND base_offset=?",
                        (topic, queue, start_of)).fetchone()[0]
                    cols = _decode_payload(first_after)
                    last = cols.offsets[-1] if cols.offsets else start_of + len(cols.bodies) - 1
                    if last >= point:
                        point = start_of
            if point < compacted or (point == compacted and (auto or point == 0)):
                return 0  # never backwards; a manual call at the same point still drops expired deletes
            if auto and not self._compaction_due(point + self.compact_min_lag, compacted, clean):
                return 0
            rows = conn.execute(
                "SELECT base_offset, store_ms, payload FROM batches WHERE topic=? AND queue=? AND base_offset<? "
                "ORDER BY base_offset", (topic, queue, point)).fetchall()
        finally:
            conn.execute("COMMIT")
        # Two passes over the stored batches, keeping only their encoded payloads in between: the
        # decoded records of a big state topic would not fit in a Spark worker's memory.
        latest: dict[MessageKey, int] = {}
        shapes = []  # per stored batch: (first offset, last offset, records, holds a delete)
        for base, _store_ms, payload in rows:
            cols = _decode_payload(payload)
            offs = cols.offsets if cols.offsets is not None else range(base, base + len(cols.bodies))
            latest.update(zip(cols.column("keys"), offs))
            shapes.append((offs[0], offs[-1], len(cols.bodies), not all(cols.bodies)))
            del cols, offs
        latest.pop(None, None)  # a compact topic keeps no message without key
        survivors = sorted(latest.values())
        del latest
        horizon = now - delete_retention_ms
        changes: list[tuple[int, bytes | None]] = []  # (base offset, new payload or None: delete the row)
        removed = kept_total = 0
        for (base, store_ms, payload), (first, last, count, has_delete) in zip(rows, shapes):
            # the batch's surviving offsets, by bisection: no per-record work for a batch left as is
            lo = bisect.bisect_left(survivors, first)
            hi = bisect.bisect_right(survivors, last)
            keep_deletes = store_ms > horizon
            if hi - lo == count and (keep_deletes or not has_delete):
                kept_total += count  # the usual clean batch: left as it is
                continue
            if hi == lo:
                removed += count
                changes.append((base, None))
                continue
            cols = _decode_payload(payload)
            offsets = cols.offsets
            if offsets is None:
                at = [o - base for o in survivors[lo:hi]]
            else:
                index = {o: i for i, o in enumerate(offsets)}
                at = [index[o] for o in survivors[lo:hi]]
            offs = offsets if offsets is not None else range(base, base + count)
            recs = list(cols.records())
            keep = [(offs[i], recs[i]) for i in at if keep_deletes or recs[i][1]]
            kept_total += len(keep)
            removed += count - len(keep)
            changes.append((base, _encode_payload([r for _, r in keep], [o for o, _ in keep]) if keep else None))
        with self._write(conn):
            now_row = conn.execute(
                "SELECT q.compacted_below, t.created_ms FROM queues q JOIN topics t ON t.name=q.topic "
                "WHERE q.topic=? AND q.queue=?", (topic, queue)).fetchone()
            if now_row is None or tuple(now_row) != (compacted, created):
                return 0  # another process compacted this queue meanwhile (or the topic was replaced)
            for base, payload in changes:
                if payload is None:
                    conn.execute("DELETE FROM batches WHERE topic=? AND queue=? AND base_offset=?", (topic, queue, base))
                else:
                    conn.execute("UPDATE batches SET payload=? WHERE topic=? AND queue=? AND base_offset=?",
                                 (payload, topic, queue, base))
            conn.execute("UPDATE queues SET compacted_below=?, clean_records=? WHERE topic=? AND queue=?",
                         (point, kept_total, topic, queue))
        return removed

    def compacted_below(self, topic: str, queue: int) -> int:
        """Where the queue's last compaction stopped (0: never compacted). Below it, only the latest
        message per key below it is left, so the topic as it was at an earlier offset can no longer
        be read; from it on, every offset reads as written. It only ever grows."""
        self._check_queue(topic, queue)
        row = self._conn().execute(
            "SELECT compacted_below FROM queues WHERE topic=? AND queue=?", (topic, queue)).fetchone()
        return int(row[0])

    # -- consumer groups ----------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue: int, next_offset: int) -> None:
        """Remember where consumer ``group`` goes on in ``topic``/``queue``."""
        self._check_queue(topic, queue)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO consumer_offsets (grp, topic, queue, next_offset) VALUES (?,?,?,?) "
                "ON CONFLICT (grp, topic, queue) DO UPDATE SET next_offset=excluded.next_offset",
                (group, topic, queue, int(next_offset)),
            )

    def committed_offset(self, group: str, topic: str, queue: int) -> int | None:
        """Where consumer ``group`` goes on in ``topic``/``queue``, or None if it never committed."""
        row = self._conn().execute(
            "SELECT next_offset FROM consumer_offsets WHERE grp=? AND topic=? AND queue=?",
            (group, topic, queue),
        ).fetchone()
        return None if row is None else int(row[0])
