"""What outlives RocketMQ's retention: on a LocalRocketMQ of its own whose commit-log files are deleted
``RETENTION_S`` seconds after they were last written (``retention_rocketmq``, tests/support/rocketmq.py),
a word count runs while RocketMQ deletes the files holding its first input, its first state records and
the decision log's first entries; a new client and a job without local state then go on exactly. And a
lost attempt whose records outlive the log entries that decided it is still never read."""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstream.broker.base import BrokerError, CommitTag
from rstream.rocketmq import LocalRocketMQ, RocketMQBroker
from rstream.rocketmq.broker import TXN_TOPIC, snapshot_topic
from rstream.runtime.inprocess import InProcessJob
from tests.support.jobs import job_id, sink_values, wordcount
from tests.support.rocketmq import RETENTION_S, ShortRetention, min_offset

pytestmark = pytest.mark.e2e


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def client(mq: LocalRocketMQ, **settings: Any) -> RocketMQBroker:
    """A client told the emulated retention (RocketMQ's own setting says an hour)."""
    return RocketMQBroker(mq.namesrv, retention_s=RETENTION_S, **settings)


def firsts(mq: LocalRocketMQ, topic: str, queues: int) -> list[int]:
    """Per queue, the first offset the broker still has."""
    return [min_offset(mq.broker_addr, topic, q) for q in range(queues)]


PADDING = [b"p" * (500 << 10)] * 3  # 1.5 MB: most of a 2 MB commit-log file


def test_a_word_count_keeps_every_key_and_its_progress_through_retention(
        retention_rocketmq: tuple[LocalRocketMQ, ShortRetention], tmp_path: Path) -> None:
    """Words written once at the start and never again, then rounds of other words while padding rolls a
    commit-log file every round or so: the job runs on until RocketMQ has deleted every record of the first
    round from the input, the state topic and the decision log (RocketMQ's clean service starts a minute
    after the broker: ``DefaultMessageStore.addScheduleTask``; the job runs on until then). Then a new client (a new process's view of
    the decision log, started from its checkpoint) and a job with no local state (replay from the state
    topic's snapshots): every key's count, read back from RocksDB, and the sink's running counts (each once,
    consecutive, ending at the total) equal plain Python's."""
    mq, retention = retention_rocketmq
    broker = client(mq, compact_min=200, checkpoint_every=128)
    source, sink, pad = unique("sentences"), unique("counts"), unique("padding")
    broker.create_topic(source, queues=2)
    broker.create_topic(pad, queues=1)
    name = job_id("retained")
    props = {"max_records_per_queue": 40}
    first = [f"early{i} early{i + 1} w{i % 4}" for i in range(0, 40, 2)]
    sent = list(first)
    broker.send_batch(source, first)
    job = InProcessJob(wordcount(name, source, sink).build(), broker, tmp_path / "first", props)
    job.run_until_idle(fire_idle=False)
    (state_topic,) = job.topology.state_topics.values()
    shuffle_queues = broker.topic(state_topic).queues
    written = {"input": broker.end_offsets(source), "state": broker.end_offsets(state_topic),
               "log": [broker.commits_version()]}  # the decision log's end

    def all_gone() -> bool:
        return all(f >= e for f, e in zip(firsts(mq, source, 2), written["input"])) and \
            all(f >= e for f, e in zip(firsts(mq, state_topic, shuffle_queues), written["state"])) and \
            min_offset(mq.broker_addr, TXN_TOPIC, 0) >= written["log"][0]

    began, rounds = time.monotonic(), 0
    while not all_gone():
        assert time.monotonic() - began < 90, (f"RocketMQ did not delete the first round's files within 90 s: "
                                               f"{retention.deleted()} files deleted of {len(retention.expired)} aged")
        more = [f"w{(rounds * 7 + i) % 13} w{i % 5}" for i in range(12)]
        sent += more
        broker.send_batch(source, more)
        broker.send_batch(pad, PADDING[:2], queue=0)  # a file rolls every second round or so
        job.run_until_idle(fire_idle=False)
        rounds += 1
        time.sleep(0.3)
    ran = time.monotonic() - began
    assert broker.compacted_below(state_topic, 0) > 0  # replay can only start from a snapshot now
    progress = {q: broker.last_commit(name, source, q) for q in range(2)}
    broker.close()

    fresh = client(mq)  # a new process's view: the decision log read from its newest checkpoint
    assert {q: fresh.last_commit(name, source, q) for q in range(2)} == progress
    assert [t.end_offset for t in progress.values() if t is not None] == fresh.end_offsets(source)
    last = [" ".join([*(f"early{i}" for i in range(41)), *(f"w{i}" for i in range(13))])] * 2
    sent += last
    fresh.send_batch(source, last)
    again = InProcessJob(wordcount(name, source, sink).build(), fresh, tmp_path / "second", props)  # no local state
    again.run_until_idle(fire_idle=False)

    expected = Counter(w for s in sent for w in s.split())
    (count,) = [n.name for n in again.topology.nodes if n.stateful]
    assert {w: again.query(count, w) for w in expected} == dict(expected)
    before = {w for s in sent[:-len(last)] for w in s.split()}
    assert sum(info.get("replayed_keys", 0) for info in again.infos) >= len(before)  # the first words' too
    got = {w: [int(v) for v in vs] for w, vs in sink_values(fresh, sink).items()}
    for word, n in expected.items():  # what the sink still has of each word: its last counts, each once
        assert got[word] and got[word] == list(range(n - len(got[word]) + 1, n + 1)), (word, got[word])
    assert fresh.has_topic(snapshot_topic(state_topic)) and snapshot_topic(state_topic) not in {
        t.name for t in fresh.topics()}
    fresh._log.snapshots.clear()  # as if rstream had never written one: what RocketMQ deleted is lost, loudly
    with pytest.raises(BrokerError, match=rf"{re.escape(state_topic)} queue 0: RocketMQ deleted its records below offset \d+ "
                                          r"\(the broker's retention, fileReservedTime\) and rstream holds no snapshot"):
        fresh.read_latest(state_topic, 0)
    print(f"\nRocketMQ deleted {retention.deleted()} commit-log files while the job ran {rounds} rounds "
          f"({ran:.1f} s)")
    fresh.close()


def test_a_lost_attempt_whose_records_outlive_its_abort_is_never_read(
        retention_rocketmq: tuple[LocalRocketMQ, ShortRetention]) -> None:
    """A writer stalled between its open record and its records: a reader gives up on it, and only then
    are its records stored (a zombie), in a later commit-log file than its open and the abort; its commit
    loses and it appends again. RocketMQ then deletes the file holding the open and the abort, not the
    records: a new client, which knows the attempt lost only from the decision log's checkpoint, reads
    the range's records once."""
    mq, retention = retention_rocketmq
    writer, impatient = client(mq), client(mq, txn_timeout_ms=0)
    name, pad = unique("zombie"), unique("padding")
    writer.create_topic(name, queues=1)
    writer.create_topic(pad, queues=1)
    records = {(name, 0): [(f"k{i}", f"v{i}".encode(), i, None, None) for i in range(5)]}
    send_queue, aborted = writer._send_queue, []

    def stalled(topic: Any, queue: int, recs: Any, attempt: str | None, snapshot: str | None = None) -> Any:
        if attempt is not None and not aborted:
            assert impatient.end_offsets(name) == [0]  # it gives up on the open attempt
            aborted.append(impatient._log.next_offset)
            writer.send_batch(pad, PADDING, queue=0)  # the files roll: the records go to a later one
            writer.send_batch(pad, PADDING, queue=0)
        return send_queue(topic, queue, recs, attempt, snapshot)

    writer._send_queue = stalled  # type: ignore[method-assign]
    assert writer.append(records, CommitTag(unique("job"), "input", 0, 0, 5)) is True
    assert min_offset(mq.broker_addr, name, 0) == 0 and writer.end_offsets(name) == [10]
    deadline = time.monotonic() + 60
    # nothing more is written but checkpoints: the records stay in the file being written, never deleted
    while min_offset(mq.broker_addr, TXN_TOPIC, 0) < aborted[0]:  # the abort's file deleted, not the records'
        assert time.monotonic() < deadline, f"the decision log's file with the abort not deleted: {retention.expired}"
        writer.maintain()
        time.sleep(0.3)
    assert min_offset(mq.broker_addr, name, 0) == 0
    fresh = client(mq)
    assert [(m.offset, m.key) for m in fresh.read(name)] == [(5 + i, f"k{i}") for i in range(5)]
    writer.close()
    impatient.close()
    fresh.close()
