"""Exactly once on RocketMQ when an attempt is never committed or a reader gives up on it, on the session's
``local_rocketmq``: a task SIGKILLed between its records and its commit (on purpose: a hook kills the writer
as it is about to append its commit), then its range run again; a writer that dies and whose range nobody
runs again, given up on by a reader after ``txn_timeout_ms``; and readers on hosts whose clocks are five
minutes off, ahead (they must not give up on a writer in time) and behind (they must still give up)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import rstream.rocketmq.broker as rocketmq_broker
from rstream.broker.base import BrokerError, CommitTag
from rstream.rocketmq import LocalRocketMQ, RocketMQBroker
from rstream.runtime.inprocess import InProcessJob
from tests.support.jobs import assert_exact_counts, job_id, wordcount
from tests.support.rocketmq import max_offset

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
FIVE_MINUTES_MS = 5 * 60_000

#: A writer that dies as a SIGKILLed process does at the point where its records are stored and its commit
#: is about to be appended: ``python -c DIES_BEFORE_ITS_COMMIT <namesrv> job|append <args>``; it prints the
#: attempt's id first. ``job <job> <source> <sink> <job dir>``: the word count's first batch;
#: ``append <topic> <job>``: five records to queue 0 of ``topic`` under the tag of ``input``/0, 0..5.
DIES_BEFORE_ITS_COMMIT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from rstream.broker.base import BrokerError, CommitTag
    from rstream.rocketmq import RocketMQBroker
    from rstream.runtime.inprocess import InProcessJob
    from tests.support.jobs import wordcount
    broker = RocketMQBroker(sys.argv[1])
    log_append = broker._log_append
    def dying(entry, wait=True):
        if entry["t"] == "commit":
            print(entry["a"], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return log_append(entry, wait)
    broker._log_append = dying
    if sys.argv[2] == "job":
        job, source, sink, job_dir = sys.argv[3:7]
        InProcessJob(wordcount(job, source, sink).build(), broker, Path(job_dir), {"sink_queues": 2}).run_batch()
    else:
        topic, job = sys.argv[3:5]
        broker.append({(topic, 0): [(f"k{i}", b"v", i, None, None) for i in range(5)]}, CommitTag(job, "input", 0, 0, 5))
""")


def dies_before_its_commit(*args: str) -> str:
    """Run ``DIES_BEFORE_ITS_COMMIT`` with ``args``; the id of the attempt it left open."""
    done = subprocess.run([sys.executable, "-c", DIES_BEFORE_ITS_COMMIT, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr  # SIGKILLed by itself, at the commit
    return done.stdout.strip()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def skewed(monkeypatch: pytest.MonkeyPatch, by_ms: int) -> None:
    """This process's wall clock ``by_ms`` off the broker's, as rstream's RocketMQ client reads it."""
    real = rocketmq_broker.now_ms
    monkeypatch.setattr(rocketmq_broker, "now_ms", lambda: real() + by_ms)


def test_a_task_killed_between_its_records_and_its_commit_is_run_again_and_counts_once(
        local_rocketmq: LocalRocketMQ, rocket_broker: RocketMQBroker, tmp_path: Path) -> None:
    """A word count's first task appends its shuffle records and is SIGKILLed before its commit: the attempt
    is open, its records stored and read by no one. The job started again runs the range again; its commit
    wins, so the dead attempt lost at once (no reader had to wait ``txn_timeout_ms``): every count once."""
    source, sink = unique("sentences"), unique("counts")
    rocket_broker.create_topic(source, queues=2)
    sentences = [f"w{i % 7} w{i % 3} w{i % 5}" for i in range(40)]
    rocket_broker.send_batch(source, sentences)
    name = job_id("killed")
    dead = dies_before_its_commit(local_rocketmq.namesrv, "job", name, source, sink, str(tmp_path / "job"))
    topology = wordcount(name, source, sink).build()
    (shuffle,) = topology.shuffle_topics
    log = rocket_broker._refresh()
    assert dead in log.undecided and not log.winners.get((name, source, 0, 0))
    stored = [max_offset(local_rocketmq.broker_addr, shuffle, q) for q in range(3)]
    assert sum(stored) > 0 and rocket_broker.end_offsets(shuffle) == [0, 0, 0]  # stored, and read by no one

    began = time.monotonic()
    job = InProcessJob(topology, rocket_broker, tmp_path / "job", {"sink_queues": 2})
    job.run_until_idle(fire_idle=False)
    took = time.monotonic() - began
    assert rocket_broker._refresh().decided[dead] is False
    assert_exact_counts(rocket_broker, sink, sentences)
    assert took < 60  # never waited for the dead attempt's timeout (300 s)


def test_a_dead_writer_whose_range_nobody_runs_again_is_given_up_on_after_txn_timeout(
        local_rocketmq: LocalRocketMQ, rocket_broker: RocketMQBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer SIGKILLed before its commit, never retried: a reader whose clock is five minutes behind the
    broker's waits ``txn_timeout_ms`` (1.5 s), not five minutes more, then aborts it; its records are never
    read, and the range, still uncommitted, commits once when run again."""
    topic, job = unique("dead"), unique("job")
    rocket_broker.create_topic(topic, queues=1)
    dead = dies_before_its_commit(local_rocketmq.namesrv, "append", topic, job)
    skewed(monkeypatch, -FIVE_MINUTES_MS)
    reader = RocketMQBroker(local_rocketmq.namesrv, txn_timeout_ms=1500)
    began = time.monotonic()
    while reader.end_offsets(topic) == [0]:
        assert time.monotonic() - began < 30, "the reader never gave up on the dead writer"
        time.sleep(0.05)
    waited = time.monotonic() - began
    assert reader._refresh().decided[dead] is False
    assert reader.end_offsets(topic) == [5] and reader.read(topic) == []
    assert reader.find_commit(job, "input", 0, 0) is None
    records = {(topic, 0): [(f"k{i}", b"v", i, None, None) for i in range(5)]}
    assert reader.append(records, CommitTag(job, "input", 0, 0, 5)) is True
    assert [(m.offset, m.key) for m in reader.read(topic)] == [(5 + i, f"k{i}") for i in range(5)]
    print(f"\nthe reader gave up on the dead writer after {waited:.1f} s")
    assert waited < 20
    reader.close()


def stalled_at_commit(writer: RocketMQBroker, while_stalled: Any) -> None:
    """Make ``writer`` call ``while_stalled(attempt)`` when its records are stored and its commit is next."""
    log_append = writer._log_append

    def stalling(entry: dict[str, Any], wait: bool = True) -> int:
        if entry["t"] == "commit":
            while_stalled(entry["a"])
        return log_append(entry, wait)

    writer._log_append = stalling  # type: ignore[method-assign]


def test_a_reader_whose_clock_is_minutes_ahead_leaves_a_writer_in_time_alone(
        local_rocketmq: LocalRocketMQ, monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers whose clock is ten minutes ahead of the broker's (``txn_timeout_ms`` five minutes) look at a
    writer's open attempt while it is between its records and its commit: they see none of its records and
    give up on nothing, and an abort one appends too early (by the broker's times) is taken by nobody. The
    writer commits its first attempt: its records are stored once."""
    skewed(monkeypatch, 2 * FIVE_MINUTES_MS)
    writer, reader = local_rocketmq.broker(), local_rocketmq.broker()
    topic = unique("ahead")
    writer.create_topic(topic, queues=2)
    seen: list[Any] = []

    def look(attempt: str) -> None:
        seen.append(reader.end_offsets(topic))
        reader._log_append({"t": "abort", "a": attempt, "after": 60_000})  # too early in the broker's time
        seen.append((reader.end_offsets(topic), attempt in reader._refresh().undecided))

    stalled_at_commit(writer, look)
    records = {(topic, q): [(f"k{q}{i}", b"v", i, None, None) for i in range(4)] for q in range(2)}
    assert writer.append(records, CommitTag(unique("job"), "input", 0, 0, 4)) is True
    assert seen == [[0, 0], ([0, 0], True)]
    assert [max_offset(local_rocketmq.broker_addr, topic, q) for q in range(2)] == [4, 4]  # one attempt, no second
    assert sorted(m.key for m in reader.read(topic)) == sorted(k for recs in records.values() for k, *_ in recs)
    writer.close()
    reader.close()


def test_a_reader_whose_clock_is_minutes_behind_gives_up_on_a_stalled_writer(
        local_rocketmq: LocalRocketMQ, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer stalled between its records and its commit for longer than a reader's ``txn_timeout_ms``
    (1 s), the reader's clock five minutes behind: the reader gives up on it after about a second; the
    writer's commit then loses to nothing, so it appends again under a new attempt, and the range's
    records read once."""
    skewed(monkeypatch, -FIVE_MINUTES_MS)
    writer, reader = local_rocketmq.broker(), RocketMQBroker(local_rocketmq.namesrv, txn_timeout_ms=1000)
    topic = unique("behind")
    writer.create_topic(topic, queues=1)
    waited: list[float] = []

    def wait_for_the_reader(attempt: str) -> None:
        if waited:
            return
        began = time.monotonic()
        while attempt in reader._refresh().undecided:
            assert reader.end_offsets(topic) in ([0], [3]), "a record of an undecided attempt was counted"
            assert time.monotonic() - began < 30, "the reader never gave up on the stalled writer"
            time.sleep(0.05)
        waited.append(time.monotonic() - began)

    stalled_at_commit(writer, wait_for_the_reader)
    tag = CommitTag(unique("job"), "input", 0, 0, 3)
    assert writer.append({(topic, 0): [(f"k{i}", b"v", i, None, None) for i in range(3)]}, tag) is True
    assert 0.9 < waited[0] < 20
    assert max_offset(local_rocketmq.broker_addr, topic, 0) == 6  # the aborted attempt's records, then the new ones'
    assert [(m.offset, m.key) for m in reader.read(topic)] == [(3, "k0"), (4, "k1"), (5, "k2")]
    assert reader.find_commit(tag.job, "input", 0, 0).outputs == {f"{topic}/0": (3, 6)}  # type: ignore[union-attr]
    writer.close()
    reader.close()


def test_a_writer_that_readers_give_up_on_every_time_fails_loudly(local_rocketmq: LocalRocketMQ) -> None:
    """Every attempt of an append is given up on by a reader before its commit (the append is slower than
    the readers' ``txn_timeout_ms``): after five attempts the append raises, naming the setting, rather than
    trying for ever; nothing of it is read, and the range is not committed."""
    writer, impatient = local_rocketmq.broker(), RocketMQBroker(local_rocketmq.namesrv, txn_timeout_ms=0)
    topic = unique("slow")
    writer.create_topic(topic, queues=1)
    attempts: list[str] = []

    def give_up(attempt: str) -> None:
        # the reader looks until it has seen the open attempt and given up on it: RocketMQ makes a message
        # readable a moment after it acknowledged it, so one look may come before the attempt can be seen
        attempts.append(attempt)
        deadline = time.monotonic() + 30
        while impatient._refresh().decided.get(attempt) is not False:
            assert time.monotonic() < deadline, f"the reader never gave up on {attempt}"
            impatient.end_offsets(topic)
            time.sleep(0.02)

    stalled_at_commit(writer, give_up)
    tag = CommitTag(unique("job"), "input", 0, 0, 2)
    with pytest.raises(BrokerError, match=r"readers gave up on the append of .* 5 times in a row.*txn_timeout_ms"):
        writer.append({(topic, 0): [("k", b"v", 1, None, None)] * 2}, tag)
    assert len(set(attempts)) == 5
    assert impatient.read(topic) == [] and impatient.find_commit(tag.job, "input", 0, 0) is None
    writer.close()
    impatient.close()
