from __future__ import annotations

import multiprocessing as mp
import pickle
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import BrokerPathError, EmbeddedBroker, InvalidTopicNameError, UnknownTopicError
from rstream.broker import BrokerError, CommitTag, TopicExistsError
from rstream.broker.embedded import BATCH_RECORDS
from rstream.broker.embedded.broker import host_identity


def test_send_and_read_back_with_broker_metadata_apart(broker: EmbeddedBroker) -> None:
    broker.create_topic("orders", queues=2)
    before = time.time_ns() // 1_000_000
    r1 = broker.send("orders", b"a", key="k1", headers={"source": "test"}, queue=1, born_timestamp=1234)
    r2 = broker.send("orders", "b", queue=1)
    assert (r1.queue_id, r1.offset, r2.offset) == (1, 0, 1)
    msgs = broker.read("orders", 1)
    assert [m.body for m in msgs] == [b"a", b"b"]
    first = msgs[0]
    assert first.key == "k1" and first.born_timestamp == 1234
    assert dict(first.headers) == {"source": "test"}  # client headers only: no broker fields mixed in
    assert first.store_timestamp >= before and msgs[1].store_timestamp >= first.store_timestamp
    assert broker.end_offsets("orders") == [0, 2]


def test_keyed_sends_pick_a_stable_queue(broker: EmbeddedBroker) -> None:
    broker.create_topic("t", queues=8)
    queues = {broker.send("t", b"x", key="user-7").queue_id for _ in range(5)}
    assert len(queues) == 1


def test_invalid_and_unknown_topics_are_named(broker: EmbeddedBroker) -> None:
    with pytest.raises(InvalidTopicNameError, match="bad topic!"):
        broker.create_topic("bad topic!")
    with pytest.raises(UnknownTopicError, match="nope"):
        broker.send("nope", b"x")
    with pytest.raises(UnknownTopicError, match="create_topic"):
        broker.read("nope")
    broker.create_topic("t", queues=2)
    with pytest.raises(TopicExistsError, match="queues=2"):
        broker.create_topic("t", queues=3)
    with pytest.raises(BrokerError, match="queues 0..1"):
        broker.send("t", b"x", queue=5)


def test_broker_path_that_is_not_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(BrokerPathError, match="not writable"):
        EmbeddedBroker(blocker / "broker")


def test_large_appends_are_split_into_record_batches_and_read_back(broker: EmbeddedBroker) -> None:
    broker.create_topic("big", queues=1)
    n = BATCH_RECORDS * 2 + 17
    broker.send_batch("big", [str(i) for i in range(n)])
    assert broker.end_offsets("big") == [n]
    got = [int(body) for _, _, body, *_ in broker.read_records("big", 0, BATCH_RECORDS - 3, BATCH_RECORDS + 5)]
    assert got == list(range(BATCH_RECORDS - 3, BATCH_RECORDS + 5))


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=6),
    start=st.integers(min_value=0, max_value=900),
    length=st.integers(min_value=0, max_value=900),
)
def test_read_ranges_match_slicing(tmp_path_factory: pytest.TempPathFactory, sizes: list[int], start: int, length: int) -> None:
    broker = EmbeddedBroker(tmp_path_factory.mktemp("b"))
    broker.create_topic("t", queues=1)
    bodies = []
    for size in sizes:
        batch = [f"m{len(bodies) + i}" for i in range(size)]
        bodies += batch
        broker.send_batch("t", batch, queue=0)
    got = [b.decode() for _, _, b, *_ in broker.read_records("t", 0, start, start + length)]
    assert got == bodies[start:start + length]


def test_tagged_append_is_exactly_once(broker: EmbeddedBroker) -> None:
    broker.create_topic("out", queues=2)
    broker.send("out", b"before", queue=1)
    tag = CommitTag("job", "in", 3, 100, 150, meta="{}", batch_id=7, info='{"records_in": 50}')
    records = {("out", 0): [(None, b"x", 1, None, None)], ("out", 1): [(None, b"y", 1, None, None)] * 2}
    assert broker.append(records, tag) is True
    assert broker.append(records, tag) is False  # the retry of the same batch writes nothing
    assert broker.end_offsets("out") == [1, 3]
    stored = broker.last_commit("job", "in", 3)
    assert stored is not None and stored.seq > 0 and stored.committed_ms > 0
    # what the task said, and where the broker put each record of the append
    assert (stored.job, stored.topic, stored.queue, stored.start_offset, stored.end_offset) == ("job", "in", 3, 100, 150)
    assert (stored.meta, stored.batch_id, stored.info) == ("{}", 7, '{"records_in": 50}')
    assert stored.output_range("out", 0) == (0, 1) and stored.output_range("out", 1) == (1, 3)
    assert broker.find_commit("job", "in", 3, 100) == stored
    assert broker.find_commit("job", "in", 3, 150) is None
    assert broker.commit_covering("job", "in", 3, 149) == stored
    assert broker.commit_covering("job", "in", 3, 150) is None and broker.commit_covering("job", "in", 3, 99) is None


def test_commits_are_read_in_order_and_incrementally(broker: EmbeddedBroker) -> None:
    broker.create_topic("out", queues=1)
    for i in range(3):
        broker.append({("out", 0): [(None, b"x", 1, None, None)]}, CommitTag("job", "in", 0, i, i + 1, batch_id=i))
    broker.append({}, CommitTag("other", "in", 0, 0, 1, batch_id=0))
    tags = broker.commits("job")
    assert [t.batch_id for t in tags] == [0, 1, 2] and [t.seq for t in tags] == sorted(t.seq for t in tags)
    assert [t.batch_id for t in broker.commits("job", after_seq=tags[0].seq)] == [1, 2]
    assert broker.commits("job", after_seq=tags[-1].seq) == []


def test_a_broker_file_of_an_earlier_schema_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    folder = tmp_path / "old"
    folder.mkdir()
    conn = sqlite3.connect(folder / "broker.sqlite")
    conn.executescript("""
        CREATE TABLE queues (topic TEXT NOT NULL, queue INTEGER NOT NULL, next_offset INTEGER NOT NULL,
            last_store_ms INTEGER NOT NULL, PRIMARY KEY (topic, queue)) WITHOUT ROWID;
        CREATE TABLE commit_tags (job TEXT NOT NULL, topic TEXT NOT NULL, queue INTEGER NOT NULL,
            start_offset INTEGER NOT NULL, end_offset INTEGER NOT NULL, committed_ms INTEGER NOT NULL,
            meta TEXT NOT NULL DEFAULT '', PRIMARY KEY (job, topic, queue, start_offset)) WITHOUT ROWID;
        INSERT INTO commit_tags VALUES ('job', 'in', 0, 0, 10, 1, '{"wm": {}}');
    """)
    conn.close()
    broker = EmbeddedBroker(folder)
    old = broker.last_commit("job", "in", 0)
    assert old is not None and (old.end_offset, old.meta, old.batch_id, old.seq) == (10, '{"wm": {}}', None, 1)
    assert broker.append({}, CommitTag("job", "in", 0, 10, 20, batch_id=3)) is True
    assert [t.end_offset for t in broker.commits("job")] == [10, 20]


def test_a_broker_file_with_small_pages_keeps_them_and_its_records(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A new broker file gets large pages; one written with SQLite's default 4 KiB pages (by an
    earlier rstream) keeps them, and its records, and takes new ones (several pages long)."""
    import sqlite3

    from rstream.broker.embedded import sqlite as embedded

    def page_size(folder: Path) -> int:
        with sqlite3.connect(folder / "broker.sqlite") as conn:
            return int(conn.execute("PRAGMA page_size").fetchone()[0])

    new = EmbeddedBroker(tmp_path / "new")
    new.create_topic("t", queues=1)
    assert page_size(tmp_path / "new") == embedded._PAGE_SIZE > 4096

    monkeypatch.setattr(embedded, "_PAGE_SIZE", 4096)
    old = EmbeddedBroker(tmp_path / "old")
    old.create_topic("t", queues=1)
    before = [b"x%d" % i * 50 for i in range(3000)]
    old.send_batch("t", before, queue=0)
    monkeypatch.undo()

    again = EmbeddedBroker(tmp_path / "old")
    after = [b"y%d" % i * 50 for i in range(3000)]
    again.send_batch("t", after, queue=0)
    assert page_size(tmp_path / "old") == 4096
    assert [m.body for m in again.read("t", 0)] == before + after


def test_failed_transaction_writes_nothing(broker: EmbeddedBroker) -> None:
    broker.create_topic("out", queues=1)
    records = {("out", 0): [(None, b"x", 1, None, None)], ("missing", 0): [(None, b"y", 1, None, None)]}
    with pytest.raises(UnknownTopicError):
        broker.append(records, CommitTag("job", "in", 0, 0, 1))
    assert broker.end_offsets("out") == [0]
    assert broker.last_commit("job", "in", 0) is None


def test_compact_topic_keeps_latest_value_per_key(broker: EmbeddedBroker) -> None:
    broker.create_topic("state", queues=1, compact=True)
    broker.send("state", b"1", key="a")
    broker.send("state", b"1", key="b")
    broker.send("state", b"2", key="a")
    broker.send("state", b"", key="b")  # delete
    broker.send("state", b"1", key="c")
    assert broker.latest_by_key("state", 0) == {"a": b"2", "c": b"1"}
    assert broker.compacted_below("state", 0) == 0
    removed = broker.compact("state")
    assert removed == 3
    assert broker.compacted_below("state", 0) == 5  # below it, only the latest message per key is left
    kept = broker.read("state", 0)
    assert [(m.key, m.offset, m.body) for m in kept] == [("a", 2, b"2"), ("c", 4, b"1")]
    assert broker.end_offsets("state") == [5]  # offsets never change
    broker.send("state", b"3", key="a")
    assert broker.read("state", 0, start=3)[-1].offset == 5
    with pytest.raises(BrokerError, match="not a compact topic"):
        broker.create_topic("plain", queues=1)
        broker.compact("plain")


def test_search_offset_by_broker_time(broker: EmbeddedBroker) -> None:
    broker.create_topic("t", queues=1)
    broker.send_batch("t", ["a", "b"])
    time.sleep(0.02)
    middle = time.time_ns() // 1_000_000
    time.sleep(0.02)
    broker.send_batch("t", ["c"])
    assert broker.search_offset("t", 0, 0) == 0
    assert broker.search_offset("t", 0, middle) == 2
    assert broker.search_offset("t", 0, middle + 10_000_000) == 3


def test_consumer_group_offsets(broker: EmbeddedBroker) -> None:
    broker.create_topic("t", queues=2)
    assert broker.committed_offset("g", "t", 1) is None
    broker.commit_offset("g", "t", 1, 42)
    broker.commit_offset("g", "t", 1, 43)
    assert broker.committed_offset("g", "t", 1) == 43
    assert broker.committed_offset("other", "t", 1) is None


def _produce(path: str, worker: int, rounds: int) -> None:
    broker = EmbeddedBroker(path)
    for r in range(rounds):
        size = 1 + (worker * 7 + r * 13) % 50
        broker.send_batch("shared", [f"{worker}-{r}-{i}" for i in range(size)])


def test_concurrent_processes_lose_nothing_and_keep_offsets_dense(tmp_path: Path) -> None:
    path = str(tmp_path / "broker")
    broker = EmbeddedBroker(path)
    broker.create_topic("shared", queues=3)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_produce, args=(path, w, 40)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    expected = {f"{w}-{r}-{i}" for w in range(6) for r in range(40) for i in range(1 + (w * 7 + r * 13) % 50)}
    seen = []
    for q in range(3):
        msgs = broker.read("shared", q)
        assert [m.offset for m in msgs] == list(range(len(msgs)))  # dense, from 0, no gaps
        seen += [m.body.decode() for m in msgs]
    assert len(seen) == len(expected) and set(seen) == expected


def test_broker_pickles_as_its_path(broker: EmbeddedBroker) -> None:
    import pickle

    broker.create_topic("t", queues=1)
    broker.send("t", b"x")
    clone = pickle.loads(pickle.dumps(broker))
    assert clone.path == broker.path and clone.read("t")[0].body == b"x"


def test_an_embedded_broker_refuses_to_open_on_another_host(tmp_path: Path) -> None:
    """Unpickled on another host (a Spark executor elsewhere; here: another network namespace, as
    the state says), the SQLite file is not there: it fails at once and names the broker to use."""
    state = EmbeddedBroker(tmp_path / "b").__getstate__()
    assert state["host"] == host_identity()
    name, boot, netns = state["host"]
    for there, says in [(("elsewhere", "another-boot", 1), "on host 'elsewhere'"),
                        ((name, "another-boot", netns), "another machine, or after a reboot"),
                        ((name, boot, netns + 1), f"network namespace {netns + 1}, but this process runs in "
                                                  f"network namespace {netns}")]:
        state["host"] = there
        with pytest.raises(BrokerError, match="RocketMQBroker") as raised:
            EmbeddedBroker.__new__(EmbeddedBroker).__setstate__(state)
        assert says in str(raised.value)
    assert pickle.loads(pickle.dumps(EmbeddedBroker(tmp_path / "b"))).path == EmbeddedBroker(tmp_path / "b").path
