"""Event time without Spark: window assignment against the reference, the watermark rule, the
operator watermark over producers (minimum, idleness, persistence) and the idle clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import SlidingWindow, StateStore, Time, TumblingWindow, WindowError
from rstream.processors.base import EventTime, Position, StreamContext
from rstream.processors.watermarks import FIRE_ALL, OperatorWatermark
from rstream.time import next_watermark
from rstream.time.watermark import NO_WATERMARK
from tests.support.reference import fixed_windows

TIMES = st.integers(0, 10**13)


@settings(deadline=None)
@given(t=TIMES, size=st.integers(1, 100_000))
def test_tumbling_windows_hold_each_time_once(t: int, size: int) -> None:
    assert list(TumblingWindow(size).assign(t)) == fixed_windows(t, size)


@settings(deadline=None)
@given(t=TIMES, size=st.integers(1, 50_000), parts=st.integers(1, 8))
def test_sliding_windows_equal_the_reference(t: int, size: int, parts: int) -> None:
    slide = max(1, size // parts)
    got = sorted(SlidingWindow(size, slide).assign(t))
    assert got == fixed_windows(t, size, slide)
    assert all(s <= t < e for s, e in got)


@settings(deadline=None)
@given(times=st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=50), lateness=st.integers(0, 5000))
def test_the_watermark_never_goes_back_and_trails_the_newest_time(times: list[int], lateness: int) -> None:
    wm = NO_WATERMARK
    for i, t in enumerate(times):
        new = next_watermark(wm, t, lateness)
        assert new >= wm and new == max(times[: i + 1]) - lateness
        wm = new


def test_bad_windows_are_named() -> None:
    with pytest.raises(WindowError, match="size must be positive"):
        TumblingWindow(0)
    assert Time.seconds(2) == 2000 and Time.minutes(1) == 60_000


def test_operator_watermark_minimum_idleness_and_restore(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s", "t-stateTopic", 0).open()
    try:
        wm = OperatorWatermark(["a/0/S", "a/1/S"], idle_timeout_ms=1000, store=store, now_ms=0)
        assert wm.current(now_ms=500) == NO_WATERMARK  # b has said nothing yet, and is not idle yet
        wm.update("a/0/S", 100, active_ms=400)
        wm.update("a/1/S", 50, active_ms=450)
        assert wm.current(now_ms=600) == 50 and wm.holding_back(600) == "a/1/S"
        wm.update("a/0/S", 80, active_ms=1300)  # a watermark never goes back
        assert wm.table["a/0/S"].watermark == 100
        assert wm.current(now_ms=1500) == 100  # a/1/S silent for over a second: idle
        assert wm.current(now_ms=3000) == FIRE_ALL and wm.holding_back(3000) is None
        assert wm.current(now_ms=None) == 50  # nothing read yet while behind: nobody is idle
        wm.persist()
        again = OperatorWatermark(["a/0/S", "a/1/S"], 1000, store, now_ms=99_999)
        assert again.started_ms == 0 and again.current(now_ms=600) == 50
    finally:
        store.close()


def test_a_producer_with_a_backlog_is_never_idle(tmp_path: Path) -> None:
    """A slow batch is not silence: a producer whose last range stopped short of its queue's end has
    records waiting, so it keeps holding the watermark however long its next batch takes."""
    store = StateStore(tmp_path / "s", "t-stateTopic", 0).open()
    try:
        wm = OperatorWatermark(["a/0/S", "a/1/S"], idle_timeout_ms=1000, store=store, now_ms=0)
        wm.update("a/0/S", 100, active_ms=0, behind=True)
        wm.update("a/1/S", 500, active_ms=0)
        assert wm.current(now_ms=60_000) == 100  # a/1/S is idle, a/0/S is behind, not idle
        wm.update("a/0/S", 200, active_ms=61_000)  # its range read its whole queue this time
        assert wm.current(now_ms=61_500) == 200 and wm.current(now_ms=63_000) == FIRE_ALL
        wm.update("a/0/S", 300, active_ms=64_000, behind=True)
        wm.persist()
        again = OperatorWatermark(["a/0/S", "a/1/S"], 1000, store, now_ms=0)
        assert again.table["a/0/S"].behind and again.current(now_ms=10**9) == 300
    finally:
        store.close()


def test_idle_clock_goes_by_broker_time_while_behind() -> None:
    ctx = StreamContext(Position("job", "t", 0, caught_up=False), time=EventTime(fixed_now_ms=10_000))
    assert ctx.idle_clock() is None  # behind and nothing read: no producer can be judged idle
    ctx.time.read_ms = 4000
    assert ctx.idle_clock() == 4000 and ctx.idle_clock(at_end=True) == 4000
    ctx.at.caught_up = True
    assert ctx.idle_clock(at_end=True) == 10_000


def test_a_batch_s_idle_flush_is_sent_once_whoever_sends_it(tmp_path: Path) -> None:
    """The source tasks of ``run_until_idle``'s last batch and its driver may each send the batch's
    idle flush; the tagged append sends it once per batch, a flush tick on every queue."""
    from rstream import EmbeddedBroker
    from rstream.shuffle.wire import FLUSH_HEADER, flush_tag, send_ticks

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("w1", queues=3)
    broker.create_topic("w2", queues=1)

    def flushes() -> list[tuple[str, int]]:
        return sorted((t, m.queue_id) for t in ("w1", "w2") for m in broker.read(t) if FLUSH_HEADER in (m.headers or {}))

    assert send_ticks(broker, ["w1", "w2"], flush=True, once=flush_tag("job", 4))
    assert not send_ticks(broker, ["w1", "w2"], flush=True, once=flush_tag("job", 4))  # the other sender: sent
    assert flushes() == [("w1", 0), ("w1", 1), ("w1", 2), ("w2", 0)]
    assert send_ticks(broker, ["w1", "w2"], flush=True, once=flush_tag("job", 5))  # the next run's batch
    assert send_ticks(broker, ["w1", "w2"], flush=True, once=flush_tag("other-job", 4))
    assert len(flushes()) == 12
    assert send_ticks(broker, ["w1"]) and send_ticks(broker, ["w1"])  # untagged ticks: each sent
