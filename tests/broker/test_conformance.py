"""The broker contract (``rstream.broker.base.Broker``), checked against every broker in
``conftest.BROKERS``: topics, dense per-queue offsets, ranged reads with born and store times,
end offsets, search by time, appends atomic and idempotent per commit tag (also from processes
appending at once), commit tag queries, compact topics and consumer offsets.

Topics and jobs get fresh names (``broker_factory.unique``), so a broker that is a client of a
shared server runs the suite as it is."""

from __future__ import annotations

import multiprocessing
import pickle
import time
import zlib
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream.broker import (
    Broker,
    BrokerError,
    CommitTag,
    InvalidTopicNameError,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
)
from rstream.broker.base import range_end, read_blocks, records_between
from rstream.broker.batch import BodyRecords
from rstream.serde.codec import MARSHAL_VERSION, decode, encode
from rstream.shuffle.batches import FrameRecords, ItemRecords

Record = tuple[Any, bytes, int, Any, Any]

_key = st.sampled_from([None, "a", "b", b"k1", b"k2"])
_record = st.tuples(_key, st.binary(max_size=6), st.integers(0, 2**50),
                    st.sampled_from([None, {"h": "1"}, {"x": "y", "z": ""}]), st.sampled_from([None, "TAG"]))


def _tag(job: str, tag_id: int, **fields: Any) -> CommitTag:
    """The tag of a task's range ``[10 * tag_id, 10 * tag_id + 10)`` of queue 0 of topic ``input``."""
    return CommitTag(job, "input", 0, 10 * tag_id, 10 * tag_id + 10, **fields)


def _read(broker: Broker, topic: str, queue: int, start: int = 0, end: int | None = None) -> list[tuple[Any, ...]]:
    stop = broker.end_offsets(topic)[queue] if end is None else end
    return [tuple(r) for r in broker.read_records(topic, queue, start, stop)]


# -- topics ---------------------------------------------------------------------------------------
def test_topics_are_created_once_with_their_settings(broker_factory: Any) -> None:
    broker = broker_factory()
    name, other = broker_factory.unique("t"), broker_factory.unique("t")
    assert not broker.has_topic(name)
    assert broker.create_topic(name, queues=3) == TopicInfo(name, 3, False)
    assert broker.create_topic(name, queues=3) == TopicInfo(name, 3, False)  # the same settings: idempotent
    with pytest.raises(TopicExistsError):
        broker.create_topic(name, queues=2)
    with pytest.raises(TopicExistsError):
        broker.create_topic(name, queues=3, compact=True)
    assert broker.create_topic(other, queues=1, compact=True) == TopicInfo(other, 1, True)
    assert broker.has_topic(name) and broker.topic(name) == TopicInfo(name, 3, False)
    assert {name, other} <= {t.name for t in broker.topics()}
    assert broker.end_offsets(name) == [0, 0, 0]


@pytest.mark.parametrize("bad", ["", "a b", "x" * 128, "t/1", 7])
def test_a_topic_name_rocketmq_refuses_is_refused(broker_factory: Any, bad: Any) -> None:
    with pytest.raises(InvalidTopicNameError):
        broker_factory().create_topic(bad)


def test_unknown_topics_and_queues_are_errors(broker_factory: Any) -> None:
    broker = broker_factory()
    missing, name = broker_factory.unique("missing"), broker_factory.unique("t")
    with pytest.raises(BrokerError):
        broker.create_topic(name, queues=0)
    for call in (lambda: broker.topic(missing), lambda: broker.end_offsets(missing),
                 lambda: broker.delete_topic(missing)):
        with pytest.raises(UnknownTopicError):
            call()
    broker.create_topic(name, queues=2)
    with pytest.raises(BrokerError):
        broker.search_offset(name, 2, 0)
    with pytest.raises(BrokerError):
        broker.send_batch(name, [b"x"], queue=2)


def test_a_deleted_topic_is_gone_and_starts_empty_when_created_again(broker_factory: Any) -> None:
    broker = broker_factory()
    name, job = broker_factory.unique("t"), broker_factory.unique("job")
    broker.create_topic(name, queues=1)
    broker.send_batch(name, [b"a", b"b"], queue=0)
    broker.commit_offset("g", name, 0, 2)
    assert broker.append({(name, 0): []}, CommitTag(job, name, 0, 0, 2))
    broker.delete_topic(name)
    assert not broker.has_topic(name)
    broker.create_topic(name, queues=1)
    assert broker.end_offsets(name) == [0] and _read(broker, name, 0) == []
    assert broker.committed_offset("g", name, 0) is None
    assert broker.find_commit(job, name, 0, 0) is None


# -- appends and reads: a model of queues -----------------------------------------------------------
_append_op = st.tuples(
    st.just("append"),
    st.dictionaries(st.sampled_from([("A", 0), ("A", 1), ("A", 2), ("B", 0)]), st.lists(_record, max_size=6),
                    min_size=1, max_size=3),
    st.one_of(st.none(), st.integers(0, 4)),  # a commit tag, often one committed before
)
_send_op = st.tuples(
    st.just("send"),
    st.lists(st.tuples(_key, st.binary(max_size=4), st.integers(0, 2**50)), min_size=1, max_size=6),
    st.one_of(st.none(), st.integers(0, 2)),  # the queue, or placed by key (round robin without)
)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(st.one_of(_append_op, _send_op), min_size=1, max_size=10), data=st.data())
def test_appends_and_reads_agree_with_a_model_of_queues(broker_factory: Any, ops: list[Any], data: Any) -> None:
    """Random appends (tagged, some with a tag committed before) and sends, against a list per
    queue: offsets dense from 0, every record read as written at its offset with a store time that
    never goes back, end offsets, ranged reads, a repeated tag a no-op, and the tags' outputs."""
    broker = broker_factory()
    names = {"A": broker_factory.unique("A"), "B": broker_factory.unique("B")}
    job = broker_factory.unique("job")
    broker.create_topic(names["A"], queues=3)
    broker.create_topic(names["B"], queues=1)
    model: dict[tuple[str, int], list[Record]] = {(names["A"], q): [] for q in range(3)} | {(names["B"], 0): []}
    committed: dict[int, dict[str, tuple[int, int]]] = {}  # tag id -> outputs, in commit order
    for op in ops:
        if op[0] == "append":
            _, writes, tag_id = op
            records = {(names[t], q): list(recs) for (t, q), recs in writes.items()}
            tag = None if tag_id is None else _tag(job, tag_id, meta=f"m{tag_id}", batch_id=tag_id, info="{}")
            ok = broker.append(records, tag)
            assert ok is (tag_id not in committed)
            if ok:
                outputs = {}
                for key, recs in records.items():
                    if recs:
                        outputs[f"{key[0]}/{key[1]}"] = (len(model[key]), len(model[key]) + len(recs))
                    model[key] += recs
                if tag_id is not None:
                    committed[tag_id] = outputs
            for recs in records.values():
                recs.clear()  # the caller may empty its sequences once append returns
        else:
            _, sends, queue = op
            keys, bodies, borns = (list(c) for c in zip(*sends))
            results = broker.send_batch(names["A"], bodies, keys=keys, born_timestamps=borns, queue=queue)
            assert len(results) == len(sends)
            for (key, body, born), result in zip(sends, results):
                assert result.topic == names["A"]
                if queue is not None:
                    assert result.queue_id == queue
                elif key is not None:  # one key, one queue: crc32 of its bytes
                    assert result.queue_id == zlib.crc32(key.encode() if isinstance(key, str) else key) % 3
                recs = model[(names["A"], result.queue_id)]
                assert result.offset == len(recs)
                recs.append((key, body, born, None, None))
    for (topic, q), recs in model.items():
        assert broker.end_offsets(topic)[q] == len(recs)
        rows = _read(broker, topic, q)
        assert [r[0] for r in rows] == list(range(len(recs)))  # dense from 0
        assert [r[1:4] + (r[5],) for r in rows] == [(k, b, born, h) for k, b, born, h, _tags in recs]
        stores = [r[4] for r in rows]
        assert all(isinstance(s, int) and s > 0 for s in stores) and stores == sorted(stores)
        start = data.draw(st.integers(0, len(recs) + 2), label="start")
        end = data.draw(st.integers(0, len(recs) + 2), label="end")
        assert _read(broker, topic, q, start, end) == rows[start:end]  # [start, end), clipped at the end
        assert [row for block in read_blocks(broker, topic, q, start, end) for row in block.rows()] == rows[start:end]
        messages = broker.read(topic, q, start, end)
        assert [(m.offset, m.key, m.body, m.born_timestamp, m.store_timestamp) for m in messages] == \
            [r[:5] for r in rows[start:end]]
        assert [(dict(m.headers), m.tags) for m in messages] == [(h or {}, t) for _k, _b, _n, h, t in recs[start:end]]
    for topic in names.values():  # every queue of a topic, in queue order
        assert [(m.queue_id, m.offset) for m in broker.read(topic)] == \
            [(q, i) for (t, q), recs in sorted(model.items()) if t == topic for i in range(len(recs))]
    tags = broker.commits(job)
    assert [t.start_offset // 10 for t in tags] == list(committed)  # in commit order, each once
    assert [t.seq for t in tags] == sorted({t.seq for t in tags})
    for tag in tags:
        tag_id = tag.start_offset // 10
        assert (tag.meta, tag.batch_id, tag.info) == (f"m{tag_id}", tag_id, "{}")
        assert dict(tag.outputs) == committed[tag_id]


def test_a_failed_append_writes_nothing_anywhere(broker_factory: Any) -> None:
    """An append is all or nothing across its (topic, queue)s: one unknown queue or topic, and none
    of its records nor its tag is written."""
    broker = broker_factory()
    name, job = broker_factory.unique("t"), broker_factory.unique("job")
    broker.create_topic(name, queues=2)
    record = (b"k", b"v", 1, None, None)
    for bad in ((name, 2), (broker_factory.unique("missing"), 0)):
        with pytest.raises(BrokerError):
            broker.append({(name, 0): [record], bad: [record], (name, 1): [record]}, _tag(job, 1))
    assert broker.end_offsets(name) == [0, 0]
    assert broker.find_commit(job, "input", 0, 10) is None and broker.commits(job) == []
    assert broker.append({(name, 0): [record]}, _tag(job, 1))  # the tag is still free


def test_an_append_larger_than_a_send_request_reads_back_whole(broker_factory: Any) -> None:
    """70 000 records to one queue, with a commit tag and without, and by ``send_batch``: more
    messages than one RocketMQ batch request may hold (its queue offsets count a batch in a short),
    every one read back in order at dense offsets."""
    broker = broker_factory()
    name, job = broker_factory.unique("t"), broker_factory.unique("job")
    broker.create_topic(name, queues=3)
    n = 70_000
    records = [(f"w{i % 100}", f"{i}".encode(), 1, None, None) for i in range(n)]
    assert broker.append({(name, 0): records}, _tag(job, 1))
    assert broker.append({(name, 1): records})
    sent = broker.send_batch(name, [r[1] for r in records], queue=2)
    assert [s.offset for s in sent] == list(range(n))
    assert broker.end_offsets(name) == [n, n, n]
    for q in range(3):
        rows = _read(broker, name, q)
        assert [r[0] for r in rows] == list(range(n)) and [r[2] for r in rows] == [r[1] for r in records]


def test_records_between_and_range_end_agree_with_the_records_a_range_reads(broker_factory: Any) -> None:
    """``records_between`` (what a progress bar and ``job.lag()`` count) is the number of records
    ``read_records`` gives for any range, also on a packed topic whose offsets skip (RocketMQ: up to 4096
    records a message, 4096 offsets each; on two brokers, queues 0-1 on one and 2-3 on the other), asked
    of a client that counted nothing before (a Spark task's, unpickled); ranges cut by ``range_end`` read
    every record once."""
    broker = broker_factory()
    job = broker_factory.unique("job")
    sizes = [5000, 3, 4100, 0]  # more than a message holds, on each broker's first queue
    for tag_id, packed in enumerate((False, True)):
        name = broker_factory.unique("t")
        broker.create_topic(name, queues=4, packed=packed)
        for part in range(2):  # two appends: a packed queue's second starts a new message
            assert broker.append({(name, q): [(f"k{i % 3}", f"{q}:{i}".encode(), i, None, None)
                                              for i in range(n * part // 2, n * (part + 1) // 2)]
                                  for q, n in enumerate(sizes) if n}, _tag(job, 2 * tag_id + part))
        ends = broker.end_offsets(name)
        fresh = pickle.loads(pickle.dumps(broker))  # a client of the same topics that counted nothing yet
        for q, n in enumerate(sizes):
            offsets = [r[0] for r in _read(broker, name, q)]
            assert [r[2] for r in _read(fresh, name, q)] == [f"{q}:{i}".encode() for i in range(n)]
            cuts = sorted({0, ends[q], *offsets[::997], *(o + 1 for o in offsets[::1201]), *offsets[n // 2 - 1:n // 2 + 1]})
            for client in (fresh, broker):
                assert records_between(client, name, q, 0, ends[q]) == n
                for a in cuts:
                    for b in cuts:
                        assert records_between(client, name, q, a, b) == sum(a <= o < b for o in offsets), (q, a, b)
            at, ranged = 0, []
            while at < ends[q]:
                end = range_end(broker, name, q, at, ends[q], 1000)
                assert at < end <= ends[q]
                ranged += [r[0] for r in broker.read_records(name, q, at, end)]
                at = end
            assert ranged == offsets
        if packed and broker_factory.kind.startswith("rocketmq"):  # two messages a queue written: offsets skip
            assert ends == [2 << 12, 2 << 12, 2 << 12, 0]


def test_send_batch_checks_what_it_sends(broker_factory: Any) -> None:
    broker = broker_factory()
    name = broker_factory.unique("t")
    broker.create_topic(name, queues=2)
    for bad in ({"bodies": [1]}, {"bodies": [b"x"], "keys": [3]}, {"bodies": [b"x"], "headers": {"h": 1}}):
        with pytest.raises(BrokerError):
            broker.send_batch(name, **bad)
    assert broker.end_offsets(name) == [0, 0]
    before = time.time_ns() // 1_000_000
    (sent,) = broker.send_batch(name, ["té"], key="k", headers={"h": "v"}, tags="T")
    (message,) = broker.read(name, sent.queue_id)
    assert (message.body, message.key, dict(message.headers), message.tags) == ("té".encode(), "k", {"h": "v"}, "T")
    assert before <= message.born_timestamp <= time.time_ns() // 1_000_000 + 1  # default born time: now


def test_records_of_every_batch_kind_read_as_their_tuples(broker_factory: Any) -> None:
    """A broker appends any ``Sequence[RecordTuple]``: what a batch packs (items, frames, columns)
    reads back as the tuples it stands for."""
    broker = broker_factory()
    name = broker_factory.unique("t")
    broker.create_topic(name, queues=4)
    control = (b"k", b"ctl", 9, {"rstream-wm": "5"}, "WATERMARK")
    items = ItemRecords(encode, MARSHAL_VERSION)
    items.add(b"a", ("x", 1), 1)
    items.append(control)
    items.add(None, {"d": [1, 2]}, 2)
    frames = FrameRecords(encode, MARSHAL_VERSION)
    frames.extend([b"a", b"b"], [3, 4], ["v", 2.5], [10, 11], [7, 8], "src/0", 0)
    frames.append(control)
    bodies = BodyRecords()
    bodies.append((b"a", b"1", 5, None, None))
    bodies.append(control)
    plain = [(b"a", b"1", 5, None, None), control]
    batches: list[Sequence[Any]] = [items, frames, bodies, plain]
    expected = [[tuple(r) for r in batch] for batch in batches]
    assert broker.append({(name, q): batch for q, batch in enumerate(batches)})
    for q, want in enumerate(expected):
        rows = _read(broker, name, q)
        assert [(r[1], r[2], r[3], r[5]) for r in rows] == [(k, b, born, h) for k, b, born, h, _ in want]
    assert decode(_read(broker, name, 1)[0][2]) == ("v", 10, "src/0", 7, 0)


def test_search_offset_finds_the_first_record_stored_at_or_after_a_time(broker_factory: Any) -> None:
    broker = broker_factory()
    name = broker_factory.unique("t")
    broker.create_topic(name, queues=2)
    assert broker.search_offset(name, 0, 0) == 0  # an empty queue: its end
    for i in range(6):
        broker.append({(name, 0): [(None, b"%d" % i, i, None, None)] * (i % 3 + 1)})
        time.sleep(0.003)
    rows = _read(broker, name, 0)
    stores = [r[4] for r in rows]
    probes = {0, stores[-1] + 10_000} | {s + d for s in stores for d in (-1, 0, 1)}
    for probe in sorted(probes):
        expected = next((off for off, store in enumerate(stores) if store >= probe), len(stores))
        assert broker.search_offset(name, 0, probe) == expected, probe
    assert broker.search_offset(name, 1, 0) == 0


# -- commit tags ---------------------------------------------------------------------------------
def test_commit_tags_are_found_by_range_start_covering_offset_and_order(broker_factory: Any) -> None:
    broker = broker_factory()
    name, job, other = broker_factory.unique("t"), broker_factory.unique("job"), broker_factory.unique("job")
    broker.create_topic(name, queues=1)
    before = time.time_ns() // 1_000_000
    # ranges [10, 20), [30, 40) and [0, 10) of input queue 0, committed in that order; a gap at [20, 30)
    for tag_id in (1, 3, 0):
        assert broker.append({(name, 0): [(None, b"%d" % tag_id, 0, None, None)]}, _tag(job, tag_id))
    assert broker.append({(name, 0): []}, CommitTag(job, "input", 1, 0, 5))  # another input queue
    assert broker.append({(name, 0): []}, _tag(other, 2))  # another job
    assert not broker.append({(name, 0): [(None, b"again", 0, None, None)]}, _tag(job, 3))
    last = broker.last_commit(job, "input", 0)
    assert last is not None and last.start_offset == 30  # the highest start, not the latest commit
    found = broker.find_commit(job, "input", 0, 10)
    assert found is not None and (found.start_offset, found.end_offset) == (10, 20)
    assert found.output_range(name, 0) == (0, 1) and found.outputs == {f"{name}/0": (0, 1)}
    assert broker.find_commit(job, "input", 0, 20) is None and broker.find_commit(job, "input", 0, 11) is None
    for offset, start in [(0, 0), (9, 0), (10, 10), (19, 10), (20, None), (29, None), (30, 30), (39, 30),
                          (40, None), (10**9, None)]:
        covering = broker.commit_covering(job, "input", 0, offset)
        assert (None if covering is None else covering.start_offset) == start, offset
    tags = broker.commits(job)
    assert [(t.queue, t.start_offset) for t in tags] == [(0, 10), (0, 30), (0, 0), (1, 0)]
    assert all(before <= t.committed_ms <= time.time_ns() // 1_000_000 + 1 for t in tags)
    assert broker.commits(job, after_seq=tags[1].seq) == tags[2:]
    assert broker.commits(job, after_seq=tags[-1].seq) == []
    assert [t.start_offset for t in broker.commits(other)] == [20]
    assert broker.last_commit(broker_factory.unique("job"), "input", 0) is None
    assert [r[2] for r in _read(broker, name, 0)] == [b"1", b"3", b"0"]  # the repeated tag wrote nothing


def _append_tagged(broker: Broker, topics: list[str], job: str, worker: str, tag_ids: list[int],
                   shared: set[int], barrier: Any, results: Any) -> None:
    """One appender process: for each tag id, a tagged append of a few records to every queue of
    ``topics``. The records of a shared tag are the same in every process (the same task's
    attempts); the others name the process."""
    barrier.wait()
    out = []
    for tag_id in tag_ids:
        owner = "shared" if tag_id in shared else worker
        records = {(topic, q): [(f"k{q}", f"{owner}/{tag_id}/{topic}/{q}/{j}".encode(), tag_id, None, None)
                                for j in range(1 + (tag_id + q) % 3)]
                   for topic in topics for q in range(2)}
        out.append((tag_id, broker.append(records, _tag(job, tag_id))))
        time.sleep(0.002)  # let the other processes in between
    results.put((worker, out))


def _run_appenders(broker: Broker, topics: list[str], job: str, plans: dict[str, list[int]],
                   shared: set[int]) -> dict[str, list[tuple[int, bool]]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(plans)), ctx.Queue()
    procs = [ctx.Process(target=_append_tagged, args=(broker, topics, job, w, ids, shared, barrier, results))
             for w, ids in plans.items()]
    for proc in procs:
        proc.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    return got


def test_concurrent_appenders_in_processes_each_commit_once(broker_factory: Any) -> None:
    """Three processes append tagged batches to the same queues at once, some tags in all three
    (a task's attempts racing): offsets stay dense (on a broker that is not ``gapless``, such as
    RocketMQ, they increase and skip what a losing attempt wrote), every record is there exactly
    once, each tag is applied once (one attempt of a shared tag wins), and a tag's records sit
    together at its outputs."""
    broker = broker_factory()
    topics = [broker_factory.unique("t"), broker_factory.unique("t")]
    job = broker_factory.unique("job")
    for topic in topics:
        broker.create_topic(topic, queues=2)
    shared = set(range(100, 106))
    plans = {f"w{w}": [w * 20 + i for i in range(12)] + sorted(shared) for w in range(3)}
    got = _run_appenders(broker, topics, job, plans, shared)
    for worker, outcome in got.items():
        assert all(ok for tag_id, ok in outcome if tag_id not in shared), worker
    wins = Counter(tag_id for outcome in got.values() for tag_id, ok in outcome if ok and tag_id in shared)
    assert wins == Counter({tag_id: 1 for tag_id in shared})
    applied = {(w, tag_id) for w, ids in plans.items() for tag_id in ids if tag_id not in shared}
    applied |= {("shared", tag_id) for tag_id in shared}  # once, whichever attempt won
    expected = Counter(f"{owner}/{tag_id}/{topic}/{q}/{j}".encode() for owner, tag_id in applied
                       for topic in topics for q in range(2) for j in range(1 + (tag_id + q) % 3))
    stored: Counter[bytes] = Counter()
    rows = {}
    for topic in topics:
        for q in range(2):
            rows[f"{topic}/{q}"] = got_rows = _read(broker, topic, q)
            offsets = [r[0] for r in got_rows]
            if getattr(broker, "gapless", True):
                assert offsets == list(range(broker.end_offsets(topic)[q]))  # dense
            else:
                assert offsets == sorted(set(offsets)) and all(o < broker.end_offsets(topic)[q] for o in offsets)
            stored.update(r[2] for r in got_rows)
    assert stored == expected  # every record exactly once
    tags = broker.commits(job)
    assert sorted(t.start_offset // 10 for t in tags) == sorted({i for ids in plans.values() for i in ids})
    for tag in tags:  # atomic: each tag's records are one run per queue, at its outputs
        tag_id = tag.start_offset // 10
        for where, (first, end) in tag.outputs.items():
            run = [r for r in rows[where] if first <= r[0] < end]
            assert {r[2].split(b"/")[1] for r in run} == {str(tag_id).encode()}
            assert len(run) == end - first == 1 + (tag_id + int(where.rsplit("/", 1)[1])) % 3


def test_a_tag_committed_in_one_process_is_a_no_op_in_another(broker_factory: Any) -> None:
    broker = broker_factory()
    topic, job = broker_factory.unique("t"), broker_factory.unique("job")
    broker.create_topic(topic, queues=2)
    assert broker.append({(topic, 0): [(b"k", b"first attempt", 0, None, None)]}, _tag(job, 7))
    ends = broker.end_offsets(topic)
    got = _run_appenders(pickle.loads(pickle.dumps(broker)), [topic], job, {"zombie": [7]}, set())
    assert got == {"zombie": [(7, False)]}
    assert broker.end_offsets(topic) == ends and [r[2] for r in _read(broker, topic, 0)] == [b"first attempt"]
    assert len(broker.commits(job)) == 1


def test_a_broker_pickles_as_a_handle_to_the_same_log(broker_factory: Any) -> None:
    """A Spark task gets its broker by pickle: the copy reads and writes the same topics."""
    broker = broker_factory()
    topic = broker_factory.unique("t")
    broker.create_topic(topic, queues=1)
    broker.send_batch(topic, [b"a"], queue=0)
    copy = pickle.loads(pickle.dumps(broker))
    assert [r[2] for r in _read(copy, topic, 0)] == [b"a"]
    copy.send_batch(topic, [b"b"], queue=0)
    assert [r[2] for r in _read(broker, topic, 0)] == [b"a", b"b"]


# -- compact topics --------------------------------------------------------------------------------
_compact_write = st.tuples(st.sampled_from(["a", "b", "c", b"d", None]), st.sampled_from([b"", b"1", b"22", b"333"]))


def _live(written: list[tuple[Any, bytes]]) -> dict[Any, bytes]:
    """What a compact topic holds after ``written``: per key (never None), its latest non-empty body."""
    latest = dict(written)
    return {k: b for k, b in latest.items() if b and k is not None}


@settings(max_examples=25, deadline=None)
@given(sends=st.lists(st.lists(_compact_write, min_size=1, max_size=8), min_size=1, max_size=6),
       compact_after=st.lists(st.one_of(st.none(), st.integers(0, 60)), min_size=6, max_size=6),
       compacting=st.booleans(), data=st.data())
def test_compact_topics_read_as_latest_per_key(broker_factory: Any, sends: list[Any], compact_after: list[Any],
                                              compacting: bool, data: Any) -> None:
    """Whenever a broker compacts (here: as eagerly as it can, or when asked at random points),
    a compact topic reads as the latest record per key (an empty body deletes the key), end
    offsets never change, ``compacted_below`` only grows, and every offset from it on reads as
    written."""
    broker = broker_factory(compacting=compacting)
    topic = broker_factory.unique("state")
    broker.create_topic(topic, queues=1, compact=True)
    written: list[tuple[Any, bytes]] = []
    low = 0
    for writes, below in zip(sends, compact_after):
        broker.append({(topic, 0): [(k, body, 1, None, None) for k, body in writes]})
        written += writes
        compact = getattr(broker, "compact", None)
        if below is not None and compact is not None:
            compact(topic, 0, below=below)
        assert broker.end_offsets(topic) == [len(written)]
        now_low = broker.compacted_below(topic, 0)
        assert low <= now_low <= len(written)
        low = now_low
        assert {k: r[1] for k, r in broker.read_latest(topic, 0).items() if r[1] and k is not None} == \
            _live(written)
        end = data.draw(st.integers(low, len(written)), label="end")
        assert {k: r[1] for k, r in broker.read_latest(topic, 0, end).items() if r[1] and k is not None} == \
            _live(written[:end])
        rows = _read(broker, topic, 0)
        assert all((r[1], r[2]) == written[r[0]] for r in rows)  # what is left reads as written, in order
        assert [r[0] for r in rows] == sorted(r[0] for r in rows)
        assert [r[0] for r in rows if r[0] >= low] == list(range(low, len(written)))


@settings(max_examples=10, deadline=None)
@given(sends=st.lists(st.lists(_compact_write, min_size=1, max_size=8), min_size=1, max_size=5), data=st.data())
def test_a_compact_queue_read_compacted_applies_in_order_to_its_latest_per_key(broker_factory: Any,
                                                                                sends: list[Any], data: Any) -> None:
    """``read_compacted`` below any end: its blocks applied in order give ``read_latest`` (deletes
    included), a compacted block holds a key once and comes before every other block, and the blocks
    not compacted hold the last records written, as written. The broker compacts as eagerly as it can."""
    broker = broker_factory(compacting=True)
    topic = broker_factory.unique("state")
    broker.create_topic(topic, queues=1, compact=True)
    written: list[tuple[Any, bytes]] = []
    for writes in sends:
        broker.append({(topic, 0): [(k, body, 1, None, None) for k, body in writes]})
        written += writes
    low = broker.compacted_below(topic, 0)  # below it the queue no longer reads as it was
    for end in (None, data.draw(st.integers(low, len(written)), label="end")):
        blocks = list(broker.read_compacted(topic, 0, end))
        flags = [compacted for _block, compacted in blocks]
        assert flags == sorted(flags, reverse=True)  # compacted blocks first
        assert any(flags) or end is not None or not _live(written)  # it did compact
        applied: dict[Any, bytes] = {}
        for block, compacted in blocks:
            if compacted:
                assert len(set(block.keys)) == len(block.keys)
            applied.update(zip(block.keys, block.bodies))
        assert applied == {k: r[1] for k, r in broker.read_latest(topic, 0, end).items()}
        assert {k: b for k, b in applied.items() if b and k is not None} == _live(written[:end])
        tail = [(k, b) for block, compacted in blocks if not compacted for k, b in zip(block.keys, block.bodies)]
        stop = len(written) if end is None else end
        assert tail == written[stop - len(tail):stop]


def test_a_compact_topic_read_below_an_end_keeps_deletes_visible(broker_factory: Any) -> None:
    broker = broker_factory()
    topic = broker_factory.unique("state")
    broker.create_topic(topic, queues=1, compact=True)
    broker.append({(topic, 0): [("a", b"1", 1, None, None), ("b", b"2", 1, None, None), ("a", b"", 1, None, None)]})
    assert {k: r[1] for k, r in broker.read_latest(topic, 0).items()} == {"a": b"", "b": b"2"}
    assert {k: r[1] for k, r in broker.read_latest(topic, 0, 2).items()} == {"a": b"1", "b": b"2"}
    assert broker.compacted_below(topic, 0) == 0  # nobody compacted yet


# -- consumer offsets ------------------------------------------------------------------------------
def test_consumer_offsets_are_kept_per_group_and_queue(broker_factory: Any) -> None:
    broker = broker_factory()
    topic = broker_factory.unique("t")
    broker.create_topic(topic, queues=2)
    assert broker.committed_offset("g1", topic, 0) is None
    broker.commit_offset("g1", topic, 0, 5)
    broker.commit_offset("g2", topic, 0, 7)
    broker.commit_offset("g1", topic, 1, 1)
    broker.commit_offset("g1", topic, 0, 3)  # the last commit wins, even going back
    assert [broker.committed_offset(g, topic, q) for g, q in [("g1", 0), ("g2", 0), ("g1", 1), ("g2", 1)]] == \
        [3, 7, 1, None]
    assert pickle.loads(pickle.dumps(broker)).committed_offset("g1", topic, 0) == 3
