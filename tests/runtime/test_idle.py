"""Idle sources: they stop holding the watermark back, a quiet stream's last windows still fire,
and a record for a window that fired meanwhile is late with that reason."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rstream import EmbeddedBroker, StateStore, TumblingWindow
from rstream.processors.watermarks import FIRE_ALL, OperatorWatermark
from rstream.time.watermark import NO_WATERMARK
from tests.support.jobs import job_id
from tests.support.windows import results, windowed


def test_operator_watermark_is_the_minimum_over_producers_that_are_not_idle(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "s", "t-stateTopic", 0).open()
    table = OperatorWatermark(["src/0/S", "src/1/S"], idle_timeout_ms=1000, store=store, now_ms=10_000)
    assert table.current(10_500) == NO_WATERMARK  # src/1 has not spoken yet, and is not idle yet
    table.update("src/0/S", 5000, active_ms=10_400)
    table.update("src/1/S", 3000, active_ms=10_400)
    assert table.current(10_500) == 3000 and table.holding_back(10_500) == "src/1/S"
    table.update("src/0/S", 9000, active_ms=11_300)
    assert table.current(11_500) == 9000  # src/1 idle since 10_400: no longer holds the minimum back
    assert table.current(12_500) == FIRE_ALL  # both idle: every open window is due
    table.update("src/1/S", 2000, active_ms=12_600)  # watermarks never go back
    assert table.current(12_700) == 3000
    table.persist()
    restored = OperatorWatermark(["src/0/S", "src/1/S"], 1000, store, now_ms=99_999)
    assert restored.current(12_700) == 3000 and restored.started_ms == 10_000
    store.close()


def test_quiet_stream_fires_its_last_windows_and_later_records_are_late(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("clicks", queues=2)
    first = [("a", 1000, 0), ("b", 2500, 1), ("a", 4200, 0), ("b", 6100, 1)]
    for user, ts, q in first:
        broker.send("clicks", json.dumps({"user": user, "ts": ts}), queue=q)
    job = make_job(windowed(job_id("idle"), TumblingWindow(5000), "count"),
                   allowed_lateness_ms=0, idle_timeout_ms=400, trigger_interval_ms=100)
    job.start()
    try:
        deadline = time.monotonic() + 90
        while len(results(broker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        # nothing more arrived, yet every window fired, the last ones included
        assert results(broker) == {("a", 0, 5000): 2, ("b", 0, 5000): 1, ("b", 5000, 10000): 1}
        # queue 0's watermark is 4200, so t=4500 is not behind it, but its window fired already
        broker.send("clicks", json.dumps({"user": "a", "ts": 4500}), queue=0)
        while job.late_records().empty and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        job.stop()
    late = job.late_records()
    assert late[["data_time", "topic", "queue"]].values.tolist() == [[4500, "clicks", 0]]
    assert "already fired: its source queue was idle" in late["reason"][0]
    assert results(broker) == {("a", 0, 5000): 2, ("b", 0, 5000): 1, ("b", 5000, 10000): 1}


def test_stop_ends_the_idle_ticker_before_it_returns(broker: EmbeddedBroker, make_job: Any) -> None:
    # A notebook may stop Spark right after the job: a ticker still asleep would wake up to ask a
    # JVM that is gone whether the query runs, and print a Py4J traceback into the cell.
    broker.create_topic("clicks", queues=1)
    job = make_job(windowed(job_id("ticker"), TumblingWindow(5000), "count"), idle_timeout_ms=60_000)
    job.start()  # the ticker looks every 30 s
    ticker = job._ticker
    try:
        job.wait_for(lambda j: j._query.lastProgress is not None, timeout=120, what="the first batch")
        assert ticker is not None and ticker.is_alive()
    finally:
        job.stop()
    assert not ticker.is_alive()


def test_a_consumer_catching_up_never_takes_its_backlog_for_silence(broker: EmbeddedBroker, make_job: Any) -> None:
    """One key gets nearly every record, so its shuffle queue falls further behind with every batch (12
    records per batch), many seconds by the end; the watermark markers it reads are then that old.
    Judged by the wall clock, its active producers looked idle (idle timeout 2 s): windows fired early,
    and the records behind in the backlog became "late: its window already fired". Idleness now goes by
    the broker time of the consumer's position, so the results are exactly the reference's."""
    import random

    from tests.support.reference import split_late, window_frame
    from tests.support.windows import LATENESS, produce

    rng = random.Random(11)
    events = [{"user": "hot" if rng.random() < 0.95 else f"u{rng.randrange(3)}",
               "ts": max(0, i * 100 - rng.randrange(1500))} for i in range(600)]
    queues = produce(broker, "clicks", events)
    # every record shuffled on its own (not one partial per key and range), so the hot key's queue has a backlog
    job = make_job(windowed(job_id("catch-up"), TumblingWindow(2000), "count").build(combine=False),
                   allowed_lateness_ms=LATENESS, idle_timeout_ms=2000, max_records_per_queue=12)
    job.run_until_idle(progress=False)
    on_time, late = split_late(queues, lambda e: e["ts"], LATENESS)
    expected = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 2000)
    got = job.late_records()
    assert not got["reason"].str.contains("already fired").any(), got["reason"].value_counts().to_dict()
    assert results(broker) == expected.groupby(["key", "start", "end"]).size().to_dict()
    assert sorted(got["data_time"]) == sorted(e["ts"] for e, _ in late)
    shuffled = [q for p in job.history() for q in p.queues if q.topic != "clicks"]
    behind = [q for q in shuffled if q.end - q.start == 12]
    assert len(behind) > 10  # the hot shuffle queue really was behind, batch after batch
