"""rstream on a RocketMQ cluster of two brokers (the session's ``rocketmq_cluster``: broker-a and broker-b,
each its own JVM, the proxy in cluster mode): a topic's queues on both brokers, written by the official
client and by rstream and read whole; the exactly-once append when the decision log is on one broker and
the data on the other, that broker killed between the records and the commit; and jobs that stay exact
while each broker in turn is killed and started again."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rstream import Time, TumblingWindow
from rstream.broker.base import CommitTag
from rstream.rocketmq import LocalRocketMQ, RocketMQBroker
from rstream.rocketmq.broker import TXN_TOPIC
from rstream.rocketmq.errors import RocketMQError
from rstream.rocketmq.official import produce
from rstream.runtime.inprocess import InProcessJob
from tests.support.inprocess import emitted as emitted_per_key
from tests.support.inprocess import results
from tests.support.jobs import (
    WORDCOUNT_TO_KILL,
    assert_exact_counts,
    broker_arg,
    job_id,
    sink_values,
    wordcount,
)
from tests.support.joins import emitted, events, join_job, windowed_pairs
from tests.support.process import Unpaid, orders, process_job
from tests.support.processes import kill_when
from tests.support.reference import keyed_process, split_late, window_frame
from tests.support.rocketmq import listening, push_consume, topics
from tests.support.windows import EXACT, LATENESS, clicks, windowed

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def broker(rocketmq_cluster: LocalRocketMQ) -> Iterator[RocketMQBroker]:
    made = rocketmq_cluster.broker()
    yield made
    made.close()


def test_a_topics_queues_on_both_brokers_are_written_and_read_whole(rocketmq_cluster: LocalRocketMQ) -> None:
    mq = rocketmq_cluster
    dead = "127.0.0.1:1"  # a name server list whose first entry is down: the next one answers
    broker = RocketMQBroker(f"{dead};{mq.namesrv}")
    name = unique("spread")
    assert broker.create_topic(name, queues=4).queues == 4
    assert broker.queue_ids(name) == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    assert [broker.queue_label(name, q) for q in range(4)] == ["broker-a:0", "broker-a:1", "broker-b:0", "broker-b:1"]
    for addr in mq.broker_addrs:  # each broker holds two of them, as its own topic config says
        assert topics(addr)[name]["writeQueueNums"] == 2
    assert [t.queues for t in broker.topics() if t.name == name] == [4]

    # the official client (gRPC through the proxy) places its messages on every queue of the route
    produce(mq.proxy, name, [f"official {i}" for i in range(24)], keys=[f"k{i}" for i in range(24)])
    per_queue = [broker.read(name, q) for q in range(4)]
    assert all(len(messages) >= 3 for messages in per_queue), [len(m) for m in per_queue]
    assert sorted(m.body for ms in per_queue for m in ms) == sorted(f"official {i}".encode() for i in range(24))
    assert {m.key for ms in per_queue for m in ms} == {f"k{i}" for i in range(24)}

    # rstream's own writes: keyed sends and a tagged append of queues on both brokers
    broker.send_batch(name, ["x", "y", "z"], keys=["a", "b", "c"])
    tag = CommitTag(unique("job"), "input", 0, 0, 5)
    assert broker.append({(name, 1): [("a", b"on a", 1, None, None)], (name, 3): [("b", b"on b", 2, None, None)]}, tag)
    committed = broker.last_commit(tag.job, "input", 0)
    assert committed is not None and set(committed.outputs) == {f"{name}/1", f"{name}/3"}
    reader = mq.broker()  # another client reads the same, and the same numbers
    assert reader.queue_ids(name) == broker.queue_ids(name)
    assert Counter(m.body for m in reader.read(name)) == Counter(
        [f"official {i}".encode() for i in range(24)] + [b"x", b"y", b"z", b"on a", b"on b"])
    assert reader.end_offsets(name) == broker.end_offsets(name)
    # the topic browser names each queue as RocketMQ does
    from rstream.widgets import TopicBrowser, TopicOffsets

    offsets = TopicOffsets.of(reader, name).to_pandas()
    assert offsets["broker_queue"].tolist() == ["broker-a:0", "broker-a:1", "broker-b:0", "broker-b:1"]
    assert offsets["end_offset"].tolist() == reader.end_offsets(name)
    browser = TopicBrowser(reader)
    browser.topic.value = name
    assert [label for label, _q in browser.queue.options] == [
        "all", "0  broker-a:0", "1  broker-a:1", "2  broker-b:0", "3  broker-b:1"]
    # the decision log: on broker-a, with a read-only marker on broker-b (no second log while broker-a is away)
    assert broker._txn_topic().queue_ids == (("broker-a", 0),)
    assert topics(mq.broker_addrs[0])[TXN_TOPIC]["perm"] == 6 and topics(mq.broker_addrs[1])[TXN_TOPIC]["perm"] == 4
    broker.close()
    reader.close()

    # four JVMs, every port of them on 127.0.0.1; each broker its own store and ports
    assert set(mq.pids) == {"namesrv", "broker-a", "broker-b", "proxy"}
    assert {ip for pid in mq.pids.values() for ip, _port in listening(pid)} <= {"127.0.0.1", "::ffff:127.0.0.1"}
    assert {p for _ip, p in listening(mq.pids["broker-b"])} >= {mq.ports["broker1"], mq.ports["broker1_ha"]}
    assert (mq.store_dir / "broker-a" / "commitlog").is_dir() and (mq.store_dir / "broker-b" / "commitlog").is_dir()
    with pytest.raises(RocketMQError, match=r"there is no broker 2: this LocalRocketMQ runs brokers 0\.\.1 "
                                            r"\(broker-a, broker-b\)"):
        mq.kill_broker(2)
    with pytest.raises(RocketMQError, match="broker_port=10911 names one broker's port, and brokers=2"):
        LocalRocketMQ(brokers=2, broker_port=10911)


def test_an_append_whose_data_broker_dies_between_its_records_and_its_commit_counts_once(
        healthy_cluster: LocalRocketMQ, caplog: pytest.LogCaptureFixture) -> None:
    """The decision log on broker-a, the data on broker-b. The open record is readable before any record
    is sent; while the attempt is open a reader sees none of its records (though broker-b has them);
    broker-b killed before the commit, and started again: the writer waits for it, commits, and every
    record reads once; the same tag again is a no-op."""
    mq = healthy_cluster
    writer, reader = mq.broker(), mq.broker()
    name = unique("on-b")
    writer.create_topic(name, queues=2, brokers=["broker-b"])
    assert writer.queue_ids(name) == [("broker-b", 0), ("broker-b", 1)]
    assert writer._txn_topic().queue_ids[0][0] == "broker-a"
    records = {(name, 0): [(f"k{i}", f"v{i}".encode(), i, None, None) for i in range(50)],
               (name, 1): [(None, b"w", 7, {"h": "1"}, None)] * 3}
    seen: dict[str, Any] = {}
    send_queue, await_ = writer._send_queue, writer._await_ends

    def sending(topic: Any, queue: int, recs: Any, attempt: str | None) -> tuple[int, int]:
        if attempt is not None and "open" not in seen:  # the open record, as another client reads the log
            seen["open"] = any(attempt in waiting for waiting in reader._refresh().pending.values())
        return send_queue(topic, queue, recs, attempt)

    def awaiting(topic: Any, queues: Any, ends: Any) -> None:
        if "ends" not in seen:
            deadline = time.monotonic() + 10  # broker-b makes them readable a moment after it acknowledged them
            while [mq_max(mq, name, q) for q in range(2)] != [50, 3] and time.monotonic() < deadline:
                time.sleep(0.01)
            seen["raw"] = [mq_max(mq, name, q) for q in range(2)]
            seen["ends"], seen["read"] = reader.end_offsets(name), reader.read(name)
            mq.kill_broker(1)
            seen["killed"] = time.monotonic()
            threading.Thread(target=lambda: (time.sleep(1.0), mq.start_broker(1)), daemon=True).start()
        await_(topic, queues, ends)

    writer._send_queue = sending  # type: ignore[method-assign]
    writer._await_ends = awaiting  # type: ignore[method-assign]
    tag = CommitTag(unique("job"), "input", 0, 0, 10)
    with caplog.at_level(logging.WARNING, logger="rstream.rocketmq"):
        assert writer.append(records, tag)
    took = time.monotonic() - seen["killed"]
    assert seen["open"] is True
    assert seen["raw"] == [50, 3] and seen["ends"] == [0, 0] and seen["read"] == []
    assert any("waiting for RocketMQ broker broker-b" in r.getMessage() for r in caplog.records)
    assert reader.end_offsets(name) == [50, 3]
    assert [(m.key, m.body, m.born_timestamp) for m in reader.read(name, 0)] == [
        (f"k{i}", f"v{i}".encode(), i) for i in range(50)]
    assert [(m.body, m.headers) for m in reader.read(name, 1)] == [(b"w", {"h": "1"})] * 3
    assert writer.append(records, tag) is False and reader.end_offsets(name) == [50, 3]
    print(f"\nthe append waited {took:.1f} s for broker-b to come back")
    writer.close()
    reader.close()


def test_a_broker_stopped_cleanly_unregisters_and_comes_back_on_its_store(healthy_cluster: LocalRocketMQ,
                                                                          broker: RocketMQBroker) -> None:
    mq = healthy_cluster
    name = unique("stopped")
    broker.create_topic(name, queues=2)
    broker.send_batch(name, ["a", "b", "c", "d"])
    began = time.monotonic()
    mq.stop_broker(1)
    stopped = time.monotonic() - began
    assert not mq.broker_alive(1) and mq.broker_alive(0)
    assert set(broker.masters()) == {"broker-a"}  # it said goodbye to the name server
    assert broker.queue_ids(name) == [("broker-a", 0), ("broker-b", 0)]
    mq.start_broker(1)
    assert sorted(m.body for m in broker.read(name)) == [b"a", b"b", b"c", b"d"]
    print(f"\nbroker-b stopped in {stopped:.1f} s, started in {mq.broker_start_seconds:.1f} s")


def test_an_attempt_that_a_reader_gave_up_on_meanwhile_is_appended_again(rocketmq_cluster: LocalRocketMQ) -> None:
    """A writer slow past ``txn_timeout_ms`` between its records and its commit (a broker it waited for):
    a reader aborts its attempt; the writer's commit then loses to nothing, so it appends again under a
    new attempt, and the range commits once with the new attempt's records."""
    mq = rocketmq_cluster
    writer, impatient = mq.broker(), RocketMQBroker(mq.namesrv, txn_timeout_ms=0)
    name = unique("given-up")
    writer.create_topic(name, queues=2, brokers=["broker-b"])
    records = {(name, q): [(f"k{q}", f"v{q}{i}".encode(), i, None, None) for i in range(4)] for q in range(2)}
    await_, aborted = writer._await_ends, []

    def slow(topic: Any, queues: Any, ends: Any) -> None:
        if not aborted:
            time.sleep(0.005)
            # it aborts the attempt it would wait on: the records are there, lost, and read by no one
            assert impatient.end_offsets(name) == [4, 4] and impatient.read(name) == []
            aborted.append(True)
        await_(topic, queues, ends)

    writer._await_ends = slow  # type: ignore[method-assign]
    tag = CommitTag(unique("job"), "input", 0, 0, 4)
    assert writer.append(records, tag) is True
    committed = impatient.find_commit(tag.job, "input", 0, 0)
    assert committed is not None and committed.outputs == {f"{name}/0": (4, 8), f"{name}/1": (4, 8)}
    assert [m.body for m in impatient.read(name)] == [b.body for q in range(2) for b in
                                                      impatient.read(name, q)] == [
        f"v{q}{i}".encode() for q in range(2) for i in range(4)]
    assert impatient.end_offsets(name) == [8, 8]  # the aborted attempt's records: a hole no reader sees
    writer.close()
    impatient.close()


def mq_max(mq: LocalRocketMQ, topic: str, queue_id: int) -> int:
    """Broker-b's own end of one of its queues (records of undecided attempts included)."""
    from tests.support.rocketmq import max_offset

    return max_offset(mq.broker_addrs[1], topic, queue_id)


# -- jobs through each broker killed and started again ---------------------------------------------------
CHUNK = 5  # records of a source queue per batch
PROCESS_LATENESS = 1000


class Running:
    """A job run in this process on a broker client of its own, batch after batch until told to finish
    (then until idle), in a thread: it keeps running while a broker it uses is away."""

    def __init__(self, mq: LocalRocketMQ, builder: Any, root: Path, check_after_s: int = 60, **props: Any) -> None:
        self.broker = RocketMQBroker(mq.namesrv, check_after_s=check_after_s)
        self.job = InProcessJob(builder.build(), self.broker, root / builder.job_id,
                                {"max_records_per_queue": CHUNK, **props})
        self.finish = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.finish.is_set():
                if not self.job.run_batch():
                    time.sleep(0.02)
            self.job.run_until_idle()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def committed(self) -> int:
        """Source records its commits cover so far."""
        topology = self.job.topology
        total = 0
        for topic in topology.source_topics:
            for q in range(self.broker.topic(topic).queues):
                tag = self.broker.last_commit(topology.job_id, topic, q)
                total += tag.end_offset if tag is not None else 0
        return total


def wait_for(what: str, ok: Callable[[], bool], jobs: list[Running], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        failed = [r.error for r in jobs if r.error is not None]
        assert not failed, failed
        assert time.monotonic() < deadline, f"not within {timeout:.0f} s: {what}"
        time.sleep(0.05)


def test_jobs_on_both_brokers_stay_exact_while_each_broker_is_killed_and_started_again(
        healthy_cluster: LocalRocketMQ, tmp_path: Path) -> None:
    """A word count of sentences the official client spread over four queues (two per broker), windows
    with late data, a windowed join and a keyed process function (unpaid orders), all running at once
    while input comes in three rounds: broker-a (the decision log's) SIGKILLed mid-run and started again,
    then broker-b. Each job's output equals the plain Python reference: every record once. The word count's
    sink is visible on commit (four queues, two per broker), read whole by Java's push consumer too."""
    mq = healthy_cluster
    broker = mq.broker()
    sentences_topic, counts_topic = unique("sentences"), unique("counts")
    orders_topic, alerts_topic = unique("orders"), unique("alerts")
    broker.create_topic(sentences_topic, queues=4)
    for topic in ("clicks", "left", "right"):
        broker.create_topic(topic, queues=2)
    broker.create_topic(orders_topic, queues=1)
    assert {b for t in (sentences_topic, "clicks", "left", "right") for b, _ in broker.queue_ids(t)} == {
        "broker-a", "broker-b"}

    text = [f"w{(i * 7) % 11} w{i % 5} w{i % 3}" for i in range(120)]
    click_events = clicks(240, seed=5)
    lefts_all, rights_all = events(90, 1, "L"), events(72, 2, "R")
    order_events = orders(60, seed=11)
    cut = [len(order_events) * k // 3 for k in range(4)]

    def send_round(r: int) -> None:
        def part(items: list[Any]) -> list[Any]:
            return items[len(items) * r // 3: len(items) * (r + 1) // 3]

        produce(mq.proxy, sentences_topic, part(text))
        broker.send_batch("clicks", [json.dumps(e) for e in part(click_events)])
        broker.send_batch("left", [json.dumps(e) for e in part(lefts_all)])
        broker.send_batch("right", [json.dumps(e) for e in part(rights_all)])
        broker.send_batch(orders_topic, [json.dumps(e) for e in order_events[cut[r]:cut[r + 1]]])

    def caught_up() -> bool:
        return all(r.committed() == sum(sum(broker.end_offsets(t)) for t in r.job.topology.source_topics) for r in jobs)

    send_round(0)
    root = tmp_path / "jobs"
    jobs = [
        Running(mq, wordcount(job_id("cwc"), sentences_topic, counts_topic, "on_commit"), root, check_after_s=4,
                sink_queues=4),
        Running(mq, windowed(job_id("cwin"), TumblingWindow(Time.seconds(5)), "count"), root, **EXACT),
        Running(mq, join_job(job_id("cjoin"), "inner", TumblingWindow(Time.seconds(10))), root, **EXACT),
        Running(mq, process_job(job_id("cunpaid"), Unpaid(), key="order", source=orders_topic, sink=alerts_topic),
                root, allowed_lateness_ms=PROCESS_LATENESS, idle_timeout_ms=600_000),
    ]
    try:
        killed = []
        before = [0] * len(jobs)  # what each job's commits covered when the round was sent
        for i in range(2):  # broker-a, then broker-b
            wait_for(f"every job under way before broker {i} is killed",
                     lambda before=before: all(r.committed() > b for r, b in zip(jobs, before)), jobs)
            assert not caught_up(), "killed mid-run: some job has input left"
            mq.kill_broker(i)
            began = time.monotonic()
            fresh = mq.broker()  # a client that starts while the broker is away
            if i == 0:  # the decision log's broker: it waits for it, and makes no second log on broker-b
                looked: list[Any] = []
                waiter = threading.Thread(target=lambda client=fresh, out=looked: out.append(
                    client.queue_ids(sentences_topic)), daemon=True)
                waiter.start()
                time.sleep(1.0)
                assert waiter.is_alive() and not looked
                assert topics(mq.broker_addrs[1])[TXN_TOPIC]["perm"] == 4
            else:  # it numbers the queues as before, broker-b's included
                assert fresh.queue_ids(sentences_topic) == broker.queue_ids(sentences_topic)
            mq.start_broker(i)
            killed.append(time.monotonic() - began)
            if i == 0:
                waiter.join(timeout=60)
                assert looked == [broker.queue_ids(sentences_topic)]
            fresh.close()
            wait_for("every job caught up", caught_up, jobs)
            before = [r.committed() for r in jobs]
            send_round(i + 1)
        for r in jobs:
            r.finish.set()
        for r in jobs:
            r.thread.join(timeout=240)
            assert r.error is None, r.error
            assert not r.thread.is_alive()
    finally:
        for r in jobs:
            r.finish.set()
    print(f"\nbrokers down for {[round(s, 1) for s in killed]} s")

    # word count: every word's running counts 1..n, each once, as rstream reads them and as Java's push
    # consumer (RocketMQ's own client) gets them from the sink made visible on commit, on both brokers: through
    # each broker's crash, whose check-backs ask again about messages it had committed (their end marks lost).
    # Not in order: what a crash left to the check-back is committed after records of the key written since
    expected = Counter(w for s in text for w in s.split())
    # A record whose end mark a crash lost shows once the broker's check-back commits it: check_after_s (4 s)
    # after it was stored, on a 2 s round (LocalRocketMQ's transactionCheckInterval), however soon the jobs end.
    waited_from = time.monotonic()
    counts = sink_values(broker, counts_topic)
    at_first = sum(map(len, counts.values()))
    while sum(map(len, counts.values())) < sum(expected.values()):
        assert time.monotonic() < waited_from + 60, "the word count's sink records did not all become visible within 60 s"
        time.sleep(0.5)
        counts = sink_values(broker, counts_topic)
    print(f"the word count's sink: {sum(expected.values()) - at_first} records became visible after the jobs ended, "
          f"{time.monotonic() - waited_from:.1f} s later")
    assert {w: sorted(int(v) for v in vs) for w, vs in counts.items()} == {
        w: list(range(1, n + 1)) for w, n in expected.items()}
    assert {b for b, _ in broker.queue_ids(counts_topic)} == {"broker-a", "broker-b"}
    pushed = push_consume(mq.namesrv, counts_topic, sum(expected.values()), tmp_path / "java-logs")
    assert len(pushed) == len({(d.broker, d.queue_id, d.offset) for d in pushed}) == sum(expected.values())
    assert all(d.transactional for d in pushed) and {d.broker for d in pushed} == {"broker-a", "broker-b"}
    got: dict[str, list[int]] = {}
    for d in pushed:
        got.setdefault(d.keys or "", []).append(int(d.body.decode().rpartition(":")[2]))
    assert {w: sorted(c) for w, c in got.items()} == {w: list(range(1, n + 1)) for w, n in expected.items()}
    # windows with late data
    per_queue = {q: [json.loads(m.body) for m in broker.read("clicks", q)] for q in range(2)}
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    got_windows = results(broker)
    assert got_windows == {(k, s, e): n for (k, s, e), n in frame.groupby(["key", "start", "end"]).size().items()}
    assert late, "the clicks hold late records"
    # the windowed join
    lq = {q: [json.loads(m.body) for m in broker.read("left", q)] for q in range(2)}
    rq = {q: [json.loads(m.body) for m in broker.read("right", q)] for q in range(2)}
    lefts, _ = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, _ = split_late(rq, lambda e: e["ts"], LATENESS)
    assert emitted(broker) == windowed_pairs(lefts, rights, 10_000, "inner")
    # the keyed process function: each unpaid order's alert once
    stored = [json.loads(m.body) for m in broker.read(orders_topic, 0)]
    assert stored == order_events
    alerts = emitted_per_key(broker, alerts_topic)
    assert alerts and alerts == keyed_process(stored, Unpaid(), lambda e: e["order"], lambda e: int(e["ts"]),
                                              PROCESS_LATENESS)
    for r in jobs:
        r.broker.close()
    for topic in broker.topics():  # the session's cluster: the next test starts on fresh names
        if topic.name in {"clicks", "left", "right", "results", "joined"}:
            broker.delete_topic(topic.name)
    broker.close()


def test_a_job_killed_again_and_again_while_a_broker_is_away_counts_once(healthy_cluster: LocalRocketMQ,
                                                                         spark: Any, tmp_path: Path) -> None:
    """A word count over a topic spread on both brokers, the whole job (driver, JVM, Python workers)
    SIGKILLed mid-batch; broker-b (data, not the decision log) SIGKILLed while no job runs; the job started
    again while broker-b is away (it waits, and goes on once the broker is back) and SIGKILLed mid-batch
    again; a last run finishes. Every word's running counts exactly once and in order."""
    from rstream import RocketMQStream

    mq = healthy_cluster
    broker = mq.broker()
    source, sink = unique("sentences"), unique("counts")
    broker.create_topic(source, queues=4)
    text = [f"w{(i * 7) % 11} w{i % 5} w{i % 3}" for i in range(360)]
    broker.send_batch(source, text)
    on_b = next(q for q, (name, _id) in enumerate(broker.queue_ids(source)) if name == "broker-b")
    name, data_dir = job_id("ckill"), tmp_path / "data"
    progress = [0]

    def mid_run() -> bool:  # a commit on broker-b's queue since the last kill
        tag = broker.last_commit(name, source, on_b)
        return tag is not None and tag.end_offset >= progress[0] + 15

    args = ["-c", WORDCOUNT_TO_KILL, broker_arg(broker), str(data_dir), "", name, source, sink]
    for round_ in range(2):
        args[4] = str(tmp_path / f"tmp{round_}")
        back = None
        if round_ == 1:  # broker-b away when the job starts; back a few seconds later
            mq.kill_broker(1)
            back = threading.Timer(3.0, mq.start_broker, args=(1,))
            back.start()
        kill_when(args, mid_run, timeout=240)
        if back is not None:
            back.join()
        tag = broker.last_commit(name, source, on_b)
        assert tag is not None
        progress[0] = tag.end_offset
    assert progress[0] < len(text) // 4  # killed before it was done
    job = RocketMQStream(wordcount(name, source, sink).build(), {"data_dir": str(data_dir),
                                                                 "max_records_per_queue": 1000},
                         broker=broker, spark=spark)
    try:
        job.run_until_idle(timeout=300)
    finally:
        job.stop()
    assert_exact_counts(broker, sink, text)
