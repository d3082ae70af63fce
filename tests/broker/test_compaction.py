"""Compaction of compact topics: the policy that triggers it on append, what it keeps, and that
readers and writers in other processes never see a wrong view while it runs."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker
from rstream.broker import BrokerError

#: Compaction as soon as a few records are dirty, no tail kept, deletes dropped at once.
EAGER: dict[str, Any] = {"compact_min_dirty": 20, "compact_dirty_ratio": 0.5, "compact_min_lag": 0,
                         "compact_min_lag_ms": 0, "compact_delete_retention_ms": 0}


def _reference(writes: list[tuple[str, bytes]], end: int | None = None) -> dict[str, bytes]:
    """Per key the latest body below ``end``, deletes (empty bodies) left out."""
    latest: dict[str, bytes] = {}
    for key, body in writes[:end]:
        latest[key] = body
    return {k: v for k, v in latest.items() if v}


def test_default_policy_leaves_workshop_sized_topics_alone(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("state", queues=1, compact=True)
    for r in range(20):
        broker.send_batch("state", [str(r)] * 500, keys=[f"k{i}" for i in range(500)], queue=0)
    assert broker.compacted_below("state", 0) == 0  # 10 000 records: every batch's state stays readable
    assert len(broker.read("state", 0)) == 10_000


def test_policy_needs_min_dirty_records_beyond_the_lag(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", compact_min_dirty=100, compact_min_lag=30, compact_min_lag_ms=0)
    broker.create_topic("state", queues=1, compact=True)
    writes = []
    for r in range(15):  # 10 keys, 10 records per append
        recs = [(f"k{i}", f"{r}".encode()) for i in range(10)]
        writes += recs
        broker.send_batch("state", [b for _, b in recs], keys=[k for k, _ in recs], queue=0)
        end = len(writes)
        if end - 30 < 100:
            assert broker.compacted_below("state", 0) == 0, end
    compacted = broker.compacted_below("state", 0)
    assert 100 <= compacted <= len(writes) - 30  # the 30 newest records are left as written
    kept = broker.read("state", 0)
    below = [m for m in kept if m.offset < compacted]
    assert len(below) == len({m.key for m in below}) == 10  # one per key below the compaction point
    assert [m.offset for m in kept if m.offset >= compacted] == list(range(compacted, len(writes)))
    assert broker.latest_by_key("state", 0) == _reference(writes)
    for end in range(compacted, len(writes) + 1):  # the topic as it was at any offset from there on
        latest = {k: rec[1] for k, rec in broker.read_latest("state", 0, end).items() if rec[1]}
        assert latest == _reference(writes, end)


def test_dirty_ratio_waits_for_enough_new_records_over_the_live_ones(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", **{**EAGER, "compact_min_dirty": 10})
    broker.create_topic("state", queues=1, compact=True)
    broker.send_batch("state", [b"1"] * 200, keys=[f"k{i}" for i in range(200)], queue=0)
    assert broker.compacted_below("state", 0) == 200  # first compaction: nothing clean yet
    broker.send_batch("state", [b"2"] * 150, keys=[f"k{i}" for i in range(150)], queue=0)
    assert broker.compacted_below("state", 0) == 200  # 150 dirty / (150 + 200 clean) < 0.5
    broker.send_batch("state", [b"3"] * 60, keys=[f"k{i}" for i in range(60)], queue=0)
    assert broker.compacted_below("state", 0) == 410  # 210 / 410 >= 0.5
    assert len(broker.read("state", 0)) == 200


def test_min_lag_ms_keeps_recent_appends(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", **{**EAGER, "compact_min_lag_ms": 300})
    broker.create_topic("state", queues=1, compact=True)
    broker.send_batch("state", [b"1"] * 50, keys=["k"] * 50, queue=0)
    broker.send_batch("state", [b"2"] * 50, keys=["k"] * 50, queue=0)
    assert broker.compacted_below("state", 0) == 0  # all younger than 300 ms
    time.sleep(0.35)
    broker.send_batch("state", [b"3"] * 50, keys=["k"] * 50, queue=0)
    assert broker.compacted_below("state", 0) == 100  # the two old appends, not the new one
    assert [m.offset for m in broker.read("state", 0)][0] == 99


def test_automatic_compaction_can_be_turned_off(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", **{**EAGER, "compact_min_dirty": None})
    broker.create_topic("state", queues=1, compact=True)
    for _ in range(2):
        broker.send_batch("state", [b"1"] * 250, keys=["k"] * 250, queue=0)
    assert broker.compacted_below("state", 0) == 0
    assert broker.compact("state", queue=0, below=300) == 249  # a stored batch is compacted whole
    assert broker.compacted_below("state", 0) == 250
    assert broker.compacted_below("state", 0) == 250 and len(broker.read("state", 0)) == 251


def test_plain_topics_are_never_compacted(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", **EAGER)
    broker.create_topic("plain", queues=1)
    broker.send_batch("plain", [b"1"] * 100, keys=["k"] * 100, queue=0)
    assert len(broker.read("plain", 0)) == 100


def test_settings_are_checked_and_survive_pickling(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", busy_timeout_s=5.0, **EAGER)
    clone = pickle.loads(pickle.dumps(broker))
    for name in EmbeddedBroker._SETTINGS:
        assert getattr(clone, name) == getattr(broker, name), name
    with pytest.raises(BrokerError, match="compact_dirty_ratio"):
        EmbeddedBroker(tmp_path / "b", compact_dirty_ratio=2.0)
    with pytest.raises(BrokerError, match="compact_min_dirty"):
        EmbeddedBroker(tmp_path / "b", compact_min_dirty=0)


def test_compact_below_an_offset_keeps_the_history_above_it(broker: EmbeddedBroker) -> None:
    broker.create_topic("state", queues=1, compact=True)
    writes = [("a", b"1"), ("b", b"1"), ("a", b"2"), ("b", b""), ("c", b"1"), ("a", b"3"), ("c", b"")]
    for key, body in writes:
        broker.send("state", body, key=key, queue=0)
    assert broker.compact("state", 0, below=5) == 3  # a@0, b@1 superseded below 5; the delete b@3 dropped
    assert broker.compacted_below("state", 0) == 5
    assert [m.offset for m in broker.read("state", 0)] == [2, 4, 5, 6]
    for end in range(5, len(writes) + 1):
        latest = {k: rec[1] for k, rec in broker.read_latest("state", 0, end).items() if rec[1]}
        assert latest == _reference(writes, end)
    assert broker.compact("state", 0, below=3) == 0  # never backwards
    assert broker.compacted_below("state", 0) == 5


def test_deletes_are_kept_for_the_retention_time(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b", **{**EAGER, "compact_min_dirty": None})
    broker.create_topic("state", queues=1, compact=True)
    broker.send("state", b"1", key="a", queue=0)
    broker.send("state", b"", key="a", queue=0)
    broker.send("state", b"1", key="b", queue=0)
    assert broker.compact("state", delete_retention_ms=60_000) == 1  # the value goes, its delete stays
    assert [(m.key, m.body) for m in broker.read("state", 0)] == [("a", b""), ("b", b"1")]
    assert broker.compact("state", delete_retention_ms=0) == 1
    assert [(m.key, m.body) for m in broker.read("state", 0)] == [("b", b"1")]


def test_a_follower_that_saw_a_value_sees_its_delete(tmp_path: Path) -> None:
    """Kafka's delete.retention.ms: a reader that reads in steps keeps a correct view when a
    compaction between two steps removes a key's value and later delete."""
    broker = EmbeddedBroker(tmp_path / "b", **{**EAGER, "compact_min_dirty": 3,
                                               "compact_delete_retention_ms": 60_000})
    broker.create_topic("state", queues=1, compact=True)
    view: dict[Any, bytes] = {}
    broker.send("state", b"1", key="a", queue=0)
    broker.send("state", b"1", key="b", queue=0)
    for m in broker.read("state", 0):  # the follower reads [0, 2)
        view[m.key] = m.body
    seen = 2
    broker.send_batch("state", [b"", b"2", b"2"], keys=["a", "b", "b"], queue=0)  # compacts [0, 5)
    assert broker.compacted_below("state", 0) == 5
    for m in broker.read("state", 0, start=seen):
        view[m.key] = m.body
    assert {k: v for k, v in view.items() if v} == {"b": b"2"}  # 'a' is not resurrected


def test_a_reader_sees_one_snapshot_while_another_connection_compacts(tmp_path: Path) -> None:
    """The dangerous case: a reader got a key's value from an early stored batch; compaction then
    removes that value and the key's later delete. The rest of the read must still hold the delete."""
    path = tmp_path / "b"
    broker = EmbeddedBroker(path, **{**EAGER, "compact_min_dirty": None})
    broker.create_topic("state", queues=1, compact=True)
    broker.send("state", b"1", key="a", queue=0)
    for r in range(5):  # several stored batches between the value and the delete
        broker.send_batch("state", [str(r).encode()] * 10, keys=[f"k{i}" for i in range(10)], queue=0)
    broker.send("state", b"", key="a", queue=0)
    reader = broker.read_records("state", 0, 0, broker.end_offsets("state")[0])
    first = next(reader)
    assert first[1] == "a" and first[2] == b"1"
    other = EmbeddedBroker(path)  # as another process would: its own connection
    assert other.compact("state") == 41 + 10 * 0 + 1  # a@0, 40 superseded k*, the delete of a
    rest = list(reader)
    assert rest[-1][1] == "a" and rest[-1][2] == b""  # the delete is still seen by this read
    assert len(rest) == 51
    assert other.latest_by_key("state", 0) == {f"k{i}": b"4" for i in range(10)}


def _write_updates(path: str, worker: int, rounds: int, keys: int) -> None:
    broker = EmbeddedBroker(path, **{**EAGER, "compact_min_dirty": 50})
    for r in range(rounds):
        ks = [f"w{worker}-k{(r * 7 + i) % keys}" for i in range(5)]
        bodies = [b"" if (r + i) % 11 == 0 else f"{r}".encode() for i in range(5)]
        broker.send_batch("state", bodies, keys=ks)


def _expected(workers: int, rounds: int, keys: int) -> dict[str, bytes]:
    latest: dict[str, bytes] = {}
    for w in range(workers):
        for r in range(rounds):
            for i in range(5):
                latest[f"w{w}-k{(r * 7 + i) % keys}"] = b"" if (r + i) % 11 == 0 else f"{r}".encode()
    return {k: v for k, v in latest.items() if v}


def _watch(path: str, rounds: int, out: Any) -> None:
    """Reads the latest view over and over: per key, a value's round must never go back."""
    broker = EmbeddedBroker(path, compact_min_dirty=None)
    seen: dict[Any, int] = {}
    reads = 0
    deadline = time.time() + 120
    while time.time() < deadline:
        done = all(end > 0 for end in broker.end_offsets("state")) and out.get("stop")
        for q in range(broker.topic("state").queues):
            for key, rec in broker.read_latest("state", q).items():
                if rec[1]:
                    r = int(rec[1])
                    if r < seen.get(key, -1):
                        out["error"] = f"{key} went back from round {seen[key]} to {r}"
                        return
                    seen[key] = r
        reads += 1
        if done:
            break
    out["reads"] = reads


def test_concurrent_writers_and_readers_while_compacting(tmp_path: Path) -> None:
    path = str(tmp_path / "broker")
    broker = EmbeddedBroker(path, compact_min_dirty=None)
    broker.create_topic("state", queues=2, compact=True)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        shared = manager.dict()
        watcher = ctx.Process(target=_watch, args=(path, 60, shared))
        watcher.start()
        writers = [ctx.Process(target=_write_updates, args=(path, w, 60, 13)) for w in range(3)]
        for p in writers:
            p.start()
        for p in writers:
            p.join(120)
            assert p.exitcode == 0
        shared["stop"] = True
        watcher.join(120)
        assert watcher.exitcode == 0
        assert "error" not in shared, shared.get("error")
        assert shared.get("reads", 0) > 0
    assert any(broker.compacted_below("state", q) > 0 for q in range(2))
    view = {k: v for q in range(2) for k, v in broker.latest_by_key("state", q).items()}
    assert view == _expected(3, 60, 13)
    for q in range(2):  # offsets stay dense above the compaction point, increasing below it
        offsets = [m.offset for m in broker.read("state", q)]
        assert offsets == sorted(set(offsets))
        below = broker.compacted_below("state", q)
        assert offsets[-(broker.end_offsets("state")[q] - below) or len(offsets):] == \
            list(range(below, broker.end_offsets("state")[q]))


@settings(max_examples=30, deadline=None)
@given(writes=st.lists(st.tuples(st.sampled_from("abcdef"), st.sampled_from([b"", b"1", b"2", b"3"])),
                       min_size=1, max_size=60),
       appends=st.lists(st.integers(1, 9), min_size=1, max_size=20),
       min_dirty=st.integers(1, 30), lag=st.integers(0, 10))
def test_latest_view_and_history_above_the_compaction_point_match_a_dict(
        tmp_path_factory: pytest.TempPathFactory, writes: list[tuple[str, bytes]], appends: list[int],
        min_dirty: int, lag: int) -> None:
    broker = EmbeddedBroker(tmp_path_factory.mktemp("b"), **{**EAGER, "compact_min_dirty": min_dirty,
                                                             "compact_min_lag": lag})
    broker.create_topic("state", queues=1, compact=True)
    i = 0
    sizes = iter(appends * 60)
    while i < len(writes):
        chunk = writes[i:i + next(sizes)]
        broker.send_batch("state", [b for _, b in chunk], keys=[k for k, _ in chunk], queue=0, progress=False)
        i += len(chunk)
    assert broker.latest_by_key("state", 0) == _reference(writes)
    compacted = broker.compacted_below("state", 0)
    assert compacted <= max(0, len(writes) - lag)
    for end in range(compacted, len(writes) + 1):
        latest = {k: rec[1] for k, rec in broker.read_latest("state", 0, end).items() if rec[1]}
        assert latest == _reference(writes, end)


def test_a_compaction_that_lost_the_race_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compaction decides without the write lock; if another process compacted the queue meanwhile,
    it must not apply what it decided from the older snapshot."""
    from rstream.broker.embedded import compaction as embedded

    path = tmp_path / "b"
    broker = EmbeddedBroker(path, compact_min_dirty=None)
    broker.create_topic("state", queues=1, compact=True)
    writes = [("a", b"1"), ("b", b"1"), ("a", b"2"), ("b", b""), ("a", b"3"), ("c", b"1")]
    for key, body in writes:
        broker.send("state", body, key=key, queue=0)
    other = EmbeddedBroker(path, compact_min_dirty=None)
    real = embedded._decode_payload
    raced: list[int] = []

    def decode(payload: bytes) -> Any:
        if not raced:  # the first decode is in the read phase: the other process compacts now
            raced.append(-1)
            raced[0] = other.compact("state", 0, below=3)
        return real(payload)

    monkeypatch.setattr(embedded, "_decode_payload", decode)
    assert broker.compact("state", 0) == 0  # lost the race: nothing applied
    assert raced == [1] and broker.compacted_below("state", 0) == 3
    assert [m.offset for m in broker.read("state", 0)] == [1, 2, 3, 4, 5]
    assert broker.compact("state", 0) == 3  # a@2, b@1 and the delete b@3 (a@4 is the latest a)
    assert broker.latest_by_key("state", 0) == _reference(writes)
