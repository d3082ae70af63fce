"""The embedded broker's storage: its SQLite schema, how a connection is opened (WAL mode, page
size), write transactions, and the thread that copies the write-ahead log into the database file
(the checkpointer)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
#: ``after_commit``).
_WAL_INLINE = 3


def now_ms() -> int:
    """The broker's clock (ms)."""
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


def connect(db_file: Path, busy_timeout_s: float, checkpoint_wal_bytes: int | None) -> sqlite3.Connection:
    """A connection to a broker's database file (created if missing), in WAL mode, in autocommit
    (transactions are explicit: ``Transaction``)."""
    conn = sqlite3.connect(db_file, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    # a new broker file gets 64 KiB pages (SQLite's default is 4 KiB): a stored batch is a blob of
    # tens to hundreds of KiB, which small pages chain over dozens of overflow pages; an older file
    # keeps its page size (this pragma does nothing once the file has a table)
    conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    if checkpoint_wal_bytes is not None:  # checkpoints on a thread of their own, not in commits
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA journal_size_limit={min(_WAL_KEEP_BYTES, checkpoint_wal_bytes)}")
    return conn


class Transaction:
    """``with Transaction(conn, after_commit) as conn:`` one ``BEGIN IMMEDIATE`` write transaction
    (it takes the write lock at once, waiting for it up to the busy timeout); committed when the
    block ends, rolled back when it raises. ``after_commit(conn)`` runs once it committed."""

    def __init__(self, conn: sqlite3.Connection, after_commit: Callable[[sqlite3.Connection], Any]) -> None:
        self.conn, self.after_commit = conn, after_commit

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
            self.after_commit(self.conn)
        else:
            self.conn.execute("ROLLBACK")


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the broker's tables, or bring a file written by an earlier rstream up to them. Run
    inside a write transaction."""
    _migrate(conn)
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            conn.execute(statement)


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


def after_commit(conn: sqlite3.Connection, db_file: Path, wal_file: Path, limit: int | None,
                 busy_timeout_s: float) -> None:
    """Ask this process's checkpoint thread for a checkpoint once the log holds more than ``limit``
    bytes (its file's size: see ``_WAL_KEEP_BYTES``; None: SQLite checkpoints inside commits).
    SQLite starts the log over only when a checkpoint copied all of it; a writer that appends
    without a pause keeps a checkpoint on another thread from ever catching up, so past
    ``_WAL_INLINE`` times the limit the committing connection checkpoints itself, as SQLite would
    (its own appends wait)."""
    if limit is None:
        return
    try:  # the write is committed: nothing here may make it look failed (a retry would write it twice)
        size = os.stat(wal_file).st_size
        if size > _WAL_INLINE * limit:  # this process's thread first: the two would not run at once
            _CHECKPOINTER.wait(busy_timeout_s)
            _passive_checkpoint(conn)
        elif size > limit:
            _CHECKPOINTER.request(db_file, busy_timeout_s)
    except Exception:  # no log file (yet), or no thread to be had: a later commit asks again
        pass


def wait_for_checkpoints(timeout_s: float) -> bool:
    """Wait until the checkpoints this process asked for are done (False on timeout)."""
    return _CHECKPOINTER.wait(timeout_s)
