"""The decision log's rules, applied to entries as a reader reads them (no JVM): a reader's abort counts only
once ``txn_timeout_ms`` passed between the open and the abort in the log broker's own store times; a reader
decides to give up by the broker's times or its own steady clock, never its wall clock against the
broker's; and a checkpoint keeps what counts (each queue's last commit, recent ones, open and lost attempts,
topics' settings, snapshots), so a reader that starts from it decides as one that read the whole log."""

from __future__ import annotations

import json
from typing import Any

import pytest

import rstream.rocketmq.broker as rocketmq_broker
from rstream.rocketmq.broker import RocketMQBroker, _dump, _Log, _restore, snapshot_topic
from rstream.rocketmq.remoting import PulledMessage

pytestmark = pytest.mark.unit


class Log:
    """A decision log written entry by entry, each stored at the broker time given."""

    def __init__(self) -> None:
        self.entries: list[PulledMessage] = []

    def add(self, ms: int, **entry: Any) -> PulledMessage:
        m = PulledMessage(0, len(self.entries), ms, ms, json.dumps(entry).encode(), "")
        self.entries.append(m)
        return m

    def read(self, log: _Log | None = None, start: int = 0) -> _Log:
        log = log or _Log()
        for m in self.entries[start:]:
            RocketMQBroker._apply(log, m)
        log.next_offset = len(self.entries)
        return log


def opened(log: Log, ms: int, attempt: str, rng: list[Any] | None, *wheres: str) -> None:
    log.add(ms, t="open", a=attempt, range=rng, at={w: 0 for w in wheres})


def tag(job: str, queue: int, start: int, end: int) -> dict[str, Any]:
    return {"job": job, "topic": "in", "queue": queue, "start_offset": start, "end_offset": end, "meta": "",
            "batch_id": start // 10, "info": "", "outputs": {"out/0": [start, end]}}


def committed(log: Log, ms: int, attempt: str, job: str, queue: int, start: int, end: int) -> None:
    log.add(ms, t="commit", a=attempt, range=[job, "in", queue, start], tag=tag(job, queue, start, end),
            out={"out/0": [start, end]})


def test_a_readers_abort_counts_once_the_timeout_passed_in_the_brokers_own_times() -> None:
    log = Log()
    opened(log, 1_000, "A", ["j", "in", 0, 0], "out/0")
    log.add(3_000, t="abort", a="A", after=5_000)  # a reader whose clock ran ahead: too early by the broker's times
    state = log.read()
    assert "A" in state.undecided and "A" not in state.decided and state.pending["out/0"] == {"A": (0, 1_000)}
    log.add(6_000, t="abort", a="A", after=5_000)
    state = log.read()
    assert state.decided == {"A": False} and state.lost == {"A": {"out/0": None}} and not state.pending["out/0"]
    committed(log, 6_500, "A", "j", 0, 0, 10)  # the stalled writer's commit: it lost; it says where its records went
    state = log.read()
    assert state.decided == {"A": False} and state.lost == {"A": {"out/0": 10}} and not state.winners
    log.add(7_000, t="abort", a="B")  # a writer's own abort of an attempt never opened here: nothing
    assert "B" not in log.read().decided


def test_a_reader_gives_up_by_the_brokers_times_or_its_steady_clock_never_its_wall_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reader = RocketMQBroker("127.0.0.1:1", txn_timeout_ms=5_000)

    def no_wall_clock() -> int:
        raise AssertionError("the reader compared its wall clock with the broker's")

    monkeypatch.setattr(rocketmq_broker, "now_ms", no_wall_clock)
    steady = [100.0]
    monkeypatch.setattr(rocketmq_broker.time, "monotonic", lambda: steady[0])
    state = _Log(last_ms=4_000)
    assert not reader._overdue(state, "A", 1_000)  # 3 s in the broker's time, just seen here
    steady[0] += 4.0
    assert not reader._overdue(state, "A", 1_000)  # 4 s here
    state.last_ms = 6_000
    assert reader._overdue(state, "A", 1_000)  # 5 s in the broker's time (another entry came since)
    state.last_ms = 4_000
    steady[0] += 1.0
    assert reader._overdue(state, "A", 1_000)  # 5 s here since it first saw it, the log idle


def test_a_reader_starting_from_a_checkpoint_decides_as_one_that_read_the_whole_log() -> None:
    log = Log()
    log.add(1, t="topic", topic="in", compact=False, queues=[["broker-a", 0], ["broker-a", 1]])
    log.add(2, t="topic", topic="state", compact=True, queues=[["broker-a", 0]])
    for i in range(4):  # job j: four ranges of queue 0, two of queue 1
        opened(log, 10 + i, f"a{i}", ["j", "in", 0, 10 * i], "out/0")
        committed(log, 20 + i, f"a{i}", "j", 0, 10 * i, 10 * i + 10)
    for i in range(2):
        opened(log, 30 + i, f"b{i}", ["j", "in", 1, 10 * i], "out/0")
        committed(log, 40 + i, f"b{i}", "j", 1, 10 * i, 10 * i + 10)
    opened(log, 50, "lost", ["k", "in", 0, 0], "out/0")
    log.add(60, t="abort", a="lost")
    opened(log, 70, "open", ["k", "in", 0, 0], "out/0", "state/0")  # undecided when the checkpoint is taken
    opened(log, 71, "other", ["k", "in", 0, 0], "out/0")  # another attempt of the same range
    log.add(72, t="snap", topic="state", q=0, id="s1", as_of=5, first=0, end=3, keys=3)
    whole = log.read()
    previous = whole.checkpoint = (4, 21, 6)  # a checkpoint before, as of entry 6: a2's commit (7) on is since
    data = json.loads(json.dumps(_dump(whole)))
    committed(log, 80, "open", "k", 0, 0, 10)  # after the checkpoint: the open attempt commits
    log.add(81, t="abort", a="A-late")

    started = _Log(checkpoint=previous)
    _restore(started, data)
    started = log.read(started, start=whole.next_offset)
    full = log.read()
    kept = {(t.job, t.queue, t.start_offset) for t in started.winners.values()}
    # what committed since the previous checkpoint (as of entry 6), each queue's last range among them:
    # not j's first two ranges of queue 0
    assert kept == {("j", 0, 20), ("j", 0, 30), ("j", 1, 0), ("j", 1, 10), ("k", 0, 0)}
    for rng, t in started.winners.items():
        assert t == full.winners[rng]
    assert [(t.queue, t.start_offset) for t in started.by_job["j"]] == [(0, 20), (0, 30), (1, 0), (1, 10)]
    assert started.decided["lost"] is False and started.decided["other"] is False  # lost to "open"'s commit
    assert started.lost == full.lost and started.undecided == full.undecided == {}
    assert {w: p for w, p in started.pending.items() if p} == {w: p for w, p in full.pending.items() if p} == {}
    assert started.compact == full.compact == {"state"} and started.numbering == full.numbering
    assert started.snapshots == full.snapshots and started.snapshots["state/0"][0]["as_of"] == 5


def test_a_snapshot_topic_name_fits_rocketmq() -> None:
    assert snapshot_topic("words-stateTopic") == "words-stateTopic-rstream-snapshots"
    long = snapshot_topic("x" * 120)
    assert len(long) <= 127 and long.endswith("-rstream-snapshots") and long != snapshot_topic("x" * 119 + "y")
