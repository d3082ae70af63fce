from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, StateStore
from rstream.broker import CommitTag
from rstream.state import MISSING
from rstream.state.store import StateError, timer_key


def _persist(broker: EmbeddedBroker, store: StateStore, offset: int) -> None:
    """What a task does at the end of a batch: changelog to the state topic, then local commit."""
    broker.append({(store.state_topic, store.queue): store.changelog()}, CommitTag("j", "in", store.queue, offset, offset + 1))
    store.commit(offset + 1)


def test_put_commit_get_and_applied_offset(tmp_path: Path, broker: EmbeddedBroker) -> None:
    broker.create_topic("in-stateTopic", queues=2, compact=True)
    with StateStore(tmp_path / "s", "in-stateTopic", 1).open() as store:
        assert store.applied_offset is None and store.get("COUNT-1", "a") is MISSING
        store.put("COUNT-1", "a", 3)
        store.put("COUNT-1", ("x", 1), {"n": 2})
        store.put("SUM-2", "a", 1.5)
        _persist(broker, store, 0)
        assert store.applied_offset == 1 and store.key_count == 3
        assert store.get("COUNT-1", "a") == 3 and store.get("SUM-2", "a") == 1.5
        assert {(op, k) for op, k, _ in store.items()} == {("COUNT-1", "a"), ("COUNT-1", ("x", 1)), ("SUM-2", "a")}
        assert [k for _, k, _ in store.items("SUM-2")] == ["a"]


def test_a_store_opened_once_per_batch_keeps_its_folder_small(tmp_path: Path, broker: EmbeddedBroker) -> None:
    # a task opens its queue's store for every range: a long-running job opens it thousands of times
    broker.create_topic("in-stateTopic", queues=1, compact=True)
    for batch in range(12):
        with StateStore(tmp_path / "s", "in-stateTopic", 0).open() as store:
            store.put("COUNT-1", "a", batch)
            _persist(broker, store, batch)
    names = [p.name for p in (tmp_path / "s").iterdir()]
    assert len([n for n in names if n.startswith("LOG")]) <= 2, names  # RocksDB's info log, and one old one
    with StateStore(tmp_path / "s", "in-stateTopic", 0).open(read_only=True) as store:
        assert store.get("COUNT-1", "a") == 11 and store.applied_offset == 12


def test_replay_rebuilds_latest_values_and_skips_deletes(tmp_path: Path, broker: EmbeddedBroker) -> None:
    broker.create_topic("in-stateTopic", queues=1, compact=True)
    store = StateStore(tmp_path / "s", "in-stateTopic", 0).open()
    store.put("C", "a", 1)
    store.put("C", "b", 1)
    _persist(broker, store, 0)
    store.put("C", "a", 2)
    store.delete("C", "b")
    store.put("C", "c", 7)
    _persist(broker, store, 1)
    before = sorted(store.items())
    store.close()
    other = StateStore(tmp_path / "elsewhere", "in-stateTopic", 0)
    loaded = other.replay(broker, 2)
    assert loaded == 2 and sorted(other.items()) == before == [("C", "a", 2), ("C", "c", 7)]
    assert other.applied_offset == 2 and other.key_count == 2
    other.close()


class _RecordsOnly:
    """A broker with no ``read_blocks`` of its own (as a remote broker may be): replay reads its
    ``read_records`` in blocks of many appends, so a key can be twice in one block."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self._broker = broker

    def __getattr__(self, name: str) -> object:
        if name == "read_blocks":
            raise AttributeError(name)
        return getattr(self._broker, name)


#: One batch of changes: (key, value) with None for a delete, then where to compact after it
#: (None: no compaction; else a fraction of the queue's end) and whether deletes expire at once.
_CHANGES = st.lists(st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.integers(-5, 5))), max_size=8)
_COMPACTION = st.one_of(st.none(), st.tuples(st.floats(0, 1), st.booleans()))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_CHANGES, _COMPACTION), max_size=6), st.booleans())
def test_replay_equals_the_live_store(tmp_path_factory, batches, records_only) -> None:  # type: ignore[no-untyped-def]
    """Replay after puts, deletes and compactions at any point (deletes expired or kept) equals
    the live store, from the embedded broker's stored batches or from plain ``read_records``."""
    root = tmp_path_factory.mktemp("replay")
    broker = EmbeddedBroker(root / "broker", compact_min_dirty=None)
    broker.create_topic("t-stateTopic", queues=1, compact=True)
    live = StateStore(root / "live", "t-stateTopic", 0).open()
    expected: dict[str, int] = {}
    for i, (batch, compaction) in enumerate(batches):
        for key, value in batch:
            if value is None:
                live.delete("OP", key)
                expected.pop(key, None)
            else:
                live.put("OP", key, value)
                expected[key] = value
        _persist(broker, live, i)
        if compaction is not None:
            where, expire = compaction
            broker.compact("t-stateTopic", 0, below=int(where * broker.end_offsets("t-stateTopic")[0]),
                           delete_retention_ms=0 if expire else 10**9)
    assert {k: v for _, k, v in live.items()} == expected
    assert live.key_count == len(expected)
    live.close()
    replayed = StateStore(root / "replayed", "t-stateTopic", 0)
    source = _RecordsOnly(broker) if records_only else broker
    assert replayed.replay(source, len(batches)) == len(expected)  # type: ignore[arg-type]
    assert {k: v for _, k, v in replayed.items()} == expected
    assert replayed.key_count == len(expected)
    replayed.close()


#: One timer operation: (set or cancel, operator, end, payload key); operators whose names share a prefix.
_TIMER_OP = st.tuples(st.sampled_from(["set", "cancel"]), st.sampled_from(["W-1", "W-10"]),
                      st.integers(-3, 6), st.sampled_from("abc"))


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.lists(_TIMER_OP, max_size=10), min_size=1, max_size=5), watermark=st.integers(-4, 7))
def test_timers_due_equal_a_dict_of_the_timers_set(tmp_path_factory, batches, watermark) -> None:  # type: ignore[no-untyped-def]
    """Timers set and cancelled over batches (committed ones and this batch's staged ones, a timer
    set and cancelled within one batch): ``timers`` and ``timers_due`` list what a plain set of the
    live timers says, earliest first, per operator; so does a store replayed from the state topic."""
    root = tmp_path_factory.mktemp("timers")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("t-stateTopic", queues=1, compact=True)
    store = StateStore(root / "live", "t-stateTopic", 0).open()
    live: set[tuple[str, int, str]] = set()
    committed: set[tuple[str, int, str]] = set()
    for i, batch in enumerate(batches):
        for what, op, end, key in batch:
            if what == "set":
                store.set_timer(op, end, (key, end - 1))
                live.add((op, end, key))
            elif (op, end, key) in live:
                store.cancel_timer(op, end, (key, end - 1), new=(op, end, key) not in committed)
                live.discard((op, end, key))
            for name in ("W-1", "W-10"):
                expected = sorted((e, (k, e - 1)) for o, e, k in live if o == name)
                assert store.timers(name) == expected
                assert store.timers_due(name, watermark) == [t for t in expected if t[0] <= watermark]
        _persist(broker, store, i)
        committed = set(live)
    store.close()
    other = StateStore(root / "replayed", "t-stateTopic", 0)
    other.replay(broker, len(batches))
    for name in ("W-1", "W-10"):
        assert other.timers(name) == sorted((e, (k, e - 1)) for o, e, k in live if o == name)
    other.close()


def _hold(folder: str, seconds: float, opened: Any) -> None:
    """In another process: open the store, say so, keep it for ``seconds``."""
    with StateStore(folder, "in-stateTopic", 0).open():
        opened.set()
        time.sleep(seconds)



def test_has_timers_sees_committed_timers_of_one_operator_only(tmp_path: Path, broker: EmbeddedBroker) -> None:
    broker.create_topic("in-stateTopic", queues=1, compact=True)
    with StateStore(tmp_path / "s", "in-stateTopic", 0).open() as store:
        store.put("COUNT-1", ("a", 0, 10), 1)  # a value is not a timer
        store.stage_timer(timer_key("COUNT-1", 10, ("a", 0)))
        assert not store.has_timers("COUNT-1")  # staged, not committed
        assert store.timers_due("COUNT-1", 10) == [(10, ("a", 0))]  # as set_timer would have staged it
        _persist(broker, store, 0)
        assert store.has_timers("COUNT-1") and not store.has_timers("COUNT-") and not store.has_timers("COUNT-2")
        store.cancel_timer("COUNT-1", 10, ("a", 0))
        _persist(broker, store, 1)
        assert not store.has_timers("COUNT-1") and store.get("COUNT-1", ("a", 0, 10)) == 1

def test_open_waits_for_another_process_that_holds_the_store(tmp_path: Path) -> None:
    folder = str(tmp_path / "s")
    with StateStore(folder, "in-stateTopic", 0).open() as store:  # a store with a value in it
        store.put("C", "a", 1)
        store.commit(1)
    ctx = multiprocessing.get_context("spawn")
    opened = ctx.Event()
    holder = ctx.Process(target=_hold, args=(folder, 1.0, opened))
    holder.start()
    try:
        assert opened.wait(60)
        with pytest.raises(StateError, match=r"another process holds it \(waited 0\.05 s\)"):
            StateStore(folder, "in-stateTopic", 0).open(wait_s=0.05)
        with pytest.raises(StateError, match="another process holds it"):
            StateStore(folder, "in-stateTopic", 0).open()  # no wait: at once
        with StateStore(folder, "in-stateTopic", 0).open(wait_s=60) as store:
            assert store.was_held
            assert store.get("C", "a") == 1 and store.applied_offset == 1
    finally:
        holder.join(60)
    with StateStore(folder, "in-stateTopic", 0).open(wait_s=60) as store:
        assert not store.was_held
