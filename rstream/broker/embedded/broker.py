"""The embedded broker's API: topics, appends, reads, commit tags, consumer offsets, over the
storage of ``sqlite`` (schema, connections, checkpoints), the stored batch format of ``format``
and the compaction of ``compaction``."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from rstream.broker.base import (
    BrokerError,
    BrokerPathError,
    CommitTag,
    Message,
    MessageKey,
    RecordBlock,
    RecordTuple,
    SendResult,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
    messages_frame,
    validate_topic_name,
)
from rstream.broker.embedded import compaction, sqlite
from rstream.broker.embedded.format import StoredBatch, decode_payload, encode_batches
from rstream.broker.embedded.sqlite import CHECKPOINT_WAL_BYTES, now_ms
from rstream.progressbar import progress_bar

__all__ = ["EmbeddedBroker", "SendResults"]


def host_identity() -> tuple[str, str, int]:
    """What tells this host from another: its name, its boot and its network namespace (a test's
    second "host" is a network namespace on the same machine)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:  # not Linux: the name alone
        boot, netns = "", 0
    return socket.gethostname(), boot, netns


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
            with self._write() as conn:
                sqlite.ensure_schema(conn)
        except sqlite3.Error as exc:
            raise BrokerPathError(f"broker file {str(self.db_file)!r} cannot be opened: {exc}") from exc

    # -- connections --------------------------------------------------------------------------
    _SETTINGS = ("busy_timeout_s", "compact_min_dirty", "compact_dirty_ratio", "compact_min_lag",
                 "compact_min_lag_ms", "compact_delete_retention_ms", "checkpoint_wal_bytes")

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "host": host_identity(),
                **{name: getattr(self, name) for name in self._SETTINGS}}

    def __setstate__(self, state: dict[str, Any]) -> None:
        here = host_identity()
        there = tuple(state.get("host", here))
        if there != here:  # a Spark executor on another machine: the file is not there
            if there[0] != here[0]:
                where = f"on host {there[0]!r}, but this process runs on {here[0]!r}"
            elif there[1] != here[1]:
                where = (f"on host {there[0]!r} (boot {there[1][:8]}), but this process runs on a host of that "
                         f"name booted as {here[1][:8]} (another machine, or after a reboot)")
            else:
                where = (f"on host {there[0]!r} in network namespace {there[2]}, but this process runs in "
                         f"network namespace {here[2]} (another host, as far as the network goes)")
            raise BrokerError(
                f"EmbeddedBroker({state['path']!r}) is a SQLite file {where}, where it would read nothing. "
                "Executors on other hosts need a broker they reach over the network: "
                "RocketMQBroker('namesrv-host:9876') (rstream.rocketmq), or LocalRocketMQ(host=...) to start one.")
        settings = {name: state[name] for name in self._SETTINGS if name in state}
        self.__init__(state["path"], **settings)  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"EmbeddedBroker({str(self.path)!r})"

    def _conn(self, name: str = "conn") -> sqlite3.Connection:
        """This thread's connection ``name`` (each thread and process opens its own)."""
        local = self._local
        conn = getattr(local, name, None)
        if conn is None or getattr(local, name + "_pid", None) != os.getpid():
            conn = sqlite.connect(self.db_file, self.busy_timeout_s, self.checkpoint_wal_bytes)
            setattr(local, name, conn)
            setattr(local, name + "_pid", os.getpid())
        return conn

    def _write(self, conn: sqlite3.Connection | None = None) -> sqlite.Transaction:
        return sqlite.Transaction(conn or self._conn(), self._after_commit)

    def _after_commit(self, conn: sqlite3.Connection) -> None:
        sqlite.after_commit(conn, self.db_file, self._wal_file, self.checkpoint_wal_bytes, self.busy_timeout_s)

    def wait_for_checkpoints(self, timeout_s: float = 60.0) -> bool:
        """Wait until the checkpoints this process asked for are done (False on timeout). Nothing
        needs to: a reader sees every commit whether or not it was copied out of the log yet."""
        return sqlite.wait_for_checkpoints(timeout_s)

    # -- topics -------------------------------------------------------------------------------
    def create_topic(self, name: str, queues: int = 8, compact: bool = False, *, packed: bool = False) -> TopicInfo:
        """Create a topic with ``queues`` queues (idempotent when the settings match). ``packed`` changes
        nothing here: every append is stored as record batches, offsets dense."""
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
                (name, queues, int(compact), now_ms()),
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
        offsets = decode_payload(row[1]).offsets
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
        now = now_ms()
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
        payloads = {key: encode_batches(recs) for key, recs in records.items()}
        with self._write(conn):
            if tag is not None:
                done = conn.execute(
                    "SELECT 1 FROM commit_tags WHERE job=? AND topic=? AND queue=? AND start_offset=?",
                    (tag.job, tag.topic, tag.queue, tag.start_offset),
                ).fetchone()
                if done is not None:
                    return None
            now = now_ms()
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
                for span, payload in payloads[(topic, q)]:
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
                if compaction.compaction_due(self, end, compacted, clean) and self._is_compact(topic):
                    try:
                        compaction.compact_queue(self, topic, q, None, self.compact_delete_retention_ms, auto=True)
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

    def _batches(self, topic: str, queue: int, start: int, end: int) -> Iterator[tuple[int, int, StoredBatch]]:
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
            yield base, store_ms, decode_payload(payload)

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
        return messages_frame(self.read(topic, queue), decode)

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

    def read_compacted(self, topic: str, queue: int, end: int | None = None) -> Iterator[tuple[RecordBlock, bool]]:
        """The queue's records below ``end`` (the ``Broker`` contract), each stored batch below the
        compaction point marked compacted. Nothing is ever deleted by age here."""
        compacted = self.compacted_below(topic, queue)  # read before the records: it only grows
        for block in self.read_blocks(topic, queue, 0, end):
            yield block, block.offsets[-1] < compacted

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
        return sum(compaction.compact_queue(self, topic, q, below, delete_retention_ms) for q in queues)

    def _is_compact(self, topic: str) -> bool:
        known = self._compact_topics.get(topic)
        if known is None:
            known = self._compact_topics[topic] = self.has_topic(topic) and self.topic(topic).compact
        return known

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
