"""SQLite's write-ahead log is checkpointed on a thread of its own, not inside the commit that
makes it pass its threshold, and nothing is lost or reordered while checkpoints run next to
writers and readers in other processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import sqlite3
from pathlib import Path

import pytest

from rstream import EmbeddedBroker
from rstream.broker import BrokerError
from rstream.broker.embedded import CHECKPOINT_WAL_BYTES, checkpoint

KIB = 1024


def _wal_size(broker: EmbeddedBroker) -> int:
    return os.stat(broker.path / "broker.sqlite-wal").st_size


def test_commits_leave_the_checkpoint_to_a_thread(tmp_path: Path) -> None:
    limit = 4096 * KIB
    broker = EmbeddedBroker(tmp_path / "b", checkpoint_wal_bytes=limit)
    assert broker._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # no commit checkpoints
    broker.create_topic("t", queues=2)
    bodies = [os.urandom(1000) for _ in range(2000)]  # 2 MB in appends of 100 KB
    for i in range(0, len(bodies), 100):
        broker.send_batch("t", bodies[i:i + 100], queue=i // 100 % 2)
    # at most about 9 MB of log (each commit writes whole 64 KiB pages): past the limit, short of
    # where a commit checkpoints itself
    assert _wal_size(broker) < 3 * limit
    assert broker.wait_for_checkpoints(60)
    # the thread copied the log into the database file (with no checkpoint, it holds the schema only)
    assert os.stat(broker.db_file).st_size > len(bodies) * 1000
    busy, logged, copied = checkpoint(broker.db_file)
    assert busy == 0 and logged == copied
    assert [m.body for q in range(2) for m in broker.read("t", q)] == [
        b for q in range(2) for i in range(0, len(bodies), 100) if i // 100 % 2 == q for b in bodies[i:i + 100]]


def test_a_writer_that_never_pauses_keeps_the_log_bounded(tmp_path: Path) -> None:
    """A checkpoint on another thread never catches up with a writer that appends without a pause
    (SQLite starts the log over only once a checkpoint copied all of it): past three times the
    limit, the committing connection checkpoints itself."""
    limit = 1024 * KIB
    broker = EmbeddedBroker(tmp_path / "b", checkpoint_wal_bytes=limit)
    broker.create_topic("t", queues=1)
    body = os.urandom(1000)
    sizes = []
    for _ in range(300):  # 38 MB of log, 38 times the limit
        broker.send_batch("t", [body] * 128)
        sizes.append(_wal_size(broker))
    assert max(sizes) < 4 * limit  # three times the limit, and one append
    assert broker.end_offsets("t") == [300 * 128]


def test_none_leaves_checkpoints_to_sqlite_and_the_setting_is_checked(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", checkpoint_wal_bytes=None)
    assert broker._conn().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000  # SQLite's default
    assert EmbeddedBroker(tmp_path / "c").checkpoint_wal_bytes == CHECKPOINT_WAL_BYTES == 1000 * 65536
    clone = pickle.loads(pickle.dumps(EmbeddedBroker(tmp_path / "d", checkpoint_wal_bytes=12345)))
    assert clone.checkpoint_wal_bytes == 12345  # Spark tasks get the same setting
    for bad in (-1, 1.5, "64M", True):
        with pytest.raises(BrokerError, match="checkpoint_wal_bytes"):
            EmbeddedBroker(tmp_path / "e", checkpoint_wal_bytes=bad)  # type: ignore[arg-type]


def test_a_committed_write_never_fails_for_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint comes after the commit: when it cannot be had, the write still succeeds
    (an error would make the caller send it again) and is there once."""
    from rstream.broker.embedded import sqlite as embedded

    def no_thread(*args: object) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(embedded._CHECKPOINTER, "request", no_thread)
    monkeypatch.setattr(embedded, "_WAL_INLINE", 10**9)  # the thread's turn, however long the log
    broker = EmbeddedBroker(tmp_path / "b", checkpoint_wal_bytes=1)  # every commit asks for one
    broker.create_topic("t", queues=1)
    assert [r.offset for r in broker.send_batch("t", [b"a", b"b"])] == [0, 1]
    assert [m.body for m in broker.read("t")] == [b"a", b"b"]


def test_a_checkpoint_never_creates_a_missing_broker_file(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.Error):
        checkpoint(tmp_path / "gone" / "broker.sqlite")
    assert not (tmp_path / "gone").exists()


def _append(path: str, worker: int, rounds: int) -> None:
    broker = EmbeddedBroker(path, checkpoint_wal_bytes=64 * KIB)  # a checkpoint after almost every append
    for r in range(rounds):
        broker.send_batch("shared", [f"{worker}-{r}-{i}-".encode() + bytes(500) for i in range(40)],
                           queue=worker % 2)
    assert broker.wait_for_checkpoints(60)


def test_checkpoints_next_to_writers_and_readers_in_other_processes_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "broker")
    broker = EmbeddedBroker(path, checkpoint_wal_bytes=64 * KIB)
    broker.create_topic("shared", queues=2)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_append, args=(path, w, 60)) for w in range(3)]
    for p in procs:
        p.start()
    reads = 0
    while any(p.is_alive() for p in procs):  # read while they append and checkpoint
        for q in range(2):
            msgs = broker.read("shared", q)
            assert [m.offset for m in msgs] == list(range(len(msgs)))
        reads += 1
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert reads > 0
    for w in range(3):  # each writer's records in one queue, in the order appended
        mine = [m.body.split(b"-")[:3] for m in broker.read("shared", w % 2) if m.body.startswith(f"{w}-".encode())]
        assert mine == [[str(w).encode(), str(r).encode(), str(i).encode()] for r in range(60) for i in range(40)]
    assert sum(broker.end_offsets("shared")) == 3 * 60 * 40
