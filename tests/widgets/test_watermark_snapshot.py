"""``WatermarkSnapshot``: watermarks and why windows have not fired, checked against jobs that really ran."""

from __future__ import annotations

import json
from html import unescape
from typing import Any

import pytest

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    RocketMQStream,
    StreamBuilder,
    Time,
    TumblingWindow,
)
from rstream.widgets import WatermarkSnapshot
from rstream.widgets.watermarks import ShuffleQueue
from tests.support.jobs import job_id
from tests.support.widgets import FAST, SLOW, WINDOW_PROPS, send_clicks


def shuffle_sink(job: Any) -> str:
    return next(n.name for n in job.topology.nodes if n.kind == "shuffle_sink")


def windows_of(clicks: list[tuple[str, int]]) -> set[tuple[str, int, int]]:
    return {(page, t // 10_000 * 10_000, t // 10_000 * 10_000 + 10_000) for page, t in clicks}


def test_slow_queue_holds_every_window_back(held_back_job: Any) -> None:
    job, first = held_back_job
    sink = shuffle_sink(job)
    slow, fast = f"clicks/1/{sink}", f"clicks/0/{sink}"
    [shuffle] = job.topology.framed_topics
    assert first.framed_topics == [shuffle]

    queues = first.to_pandas()
    assert set(queues["queue"]) == {0, 1}  # every shuffle queue got at least the watermark markers
    assert (queues["watermark"] == 7000).all()  # min(19000, 7000): queue 1's 9000 - 2000
    assert (queues["held_back_by"] == slow).all() and (queues["held_back_watermark"] == 7000).all()
    assert queues["windows_fired"].sum() == 0 == first.windows_fired
    on_time = FAST[:-1] + SLOW  # FAST's last click (t=4000) came after queue 0's watermark reached 19000
    assert queues["windows_open"].sum() == len(windows_of(on_time)) == first.windows_open
    assert queues["late"].sum() == 1 == first.late

    pending = first.pending_to_pandas()
    # keys are shown as repr(), as in the late-data table
    assert set(zip(pending["key"], pending["start"], pending["end"])) == {(repr(k), s, e) for k, s, e in windows_of(on_time)}
    for _, row in pending.iterrows():
        reason = f"watermark 7000 < window end {row['end']}; held back by {slow} (watermark 7000)"
        if row["end"] > 19_000:  # queue 0's watermark is below these ends too
            reason += f"; also below the end: {fast} (19000)"
        assert row["reason"] == reason

    producers = first.producers_to_pandas()
    assert set(producers["producer"]) == {fast, slow}
    assert not producers["idle"].any()
    assert producers.set_index(["queue", "producer"])["watermark"].to_dict() == {
        (q, p): wm for q in (0, 1) for p, wm in ((fast, 19000), (slow, 7000))}
    assert producers[producers["holding_back"]]["producer"].tolist() == [slow, slow]

    sources = first.sources_to_pandas()
    assert sources[["topic", "queue", "shuffle_sink", "shuffle_topic", "watermark"]].values.tolist() == [
        ["clicks", 0, sink, shuffle, 19000], ["clicks", 1, sink, shuffle, 7000]]
    waiting = queues[queues["windows_open"] > 0]["queue"].min()
    assert first.status == (f"job 'widgets-held-back': stopped, batch {first.last_batch_id}: 5 windows open, 0 fired, "
                            f"1 late records; lowest watermark with open windows: 7000 on {shuffle}/{waiting}, "
                            f"held back by {slow}")


def test_catching_up_fires_the_windows_the_watermark_passed(held_back_job: Any) -> None:
    job, _ = held_back_job
    snap = WatermarkSnapshot.of(job)
    queues = snap.to_pandas()
    assert (queues["watermark"] == 14000).all()  # queue 1's 16000 - 2000; queue 0 still at 19000
    on_time = FAST[:-1] + SLOW + [("b", 16000)]
    due = {w for w in windows_of(on_time) if w[2] <= 14000}
    assert snap.windows_fired == len(due) == 2
    pending = snap.pending_to_pandas()
    # keys are shown as repr(), as in the late-data table
    assert set(zip(pending["key"], pending["start"], pending["end"])) == {(repr(k), s, e) for k, s, e in windows_of(on_time) - due}
    assert all(f"watermark 14000 < window end {end}; held back by clicks/1/" in reason
               for end, reason in zip(pending["end"], pending["reason"]))
    fired = sorted((tuple(d["key"]), d["value"]) for d in (json.loads(m.body) for m in job.broker.read("page-counts")))
    assert fired == [(("a", 0, 10000), 3), (("b", 0, 10000), 2)]
    assert snap.late == 1  # counted over every batch the job object saw


def test_html_explains_the_pending_windows(held_back_job: Any) -> None:
    job, first = held_back_job
    html = unescape(first._repr_html_())
    sink = shuffle_sink(job)
    assert f"held back by clicks/1/{sink} (watermark 7000)" in html
    assert "open windows: why they have not fired yet" in html
    assert "source queues (watermark = max(data time - allowed lateness))" in html
    assert "allowed lateness 2000 ms" in html and "600000 ms is idle" in html
    assert ">19000</td>" in html and ">-</td>" not in html  # every watermark is known here
    assert repr(first).startswith("WatermarkSnapshot(job 'widgets-held-back': stopped")


def test_reasons_for_idle_and_silent_producers() -> None:
    producers = {"s/0/SINK": {"watermark": 9000, "idle": False}, "s/1/SINK": {"watermark": None, "idle": False}}
    silent = ShuffleQueue("t", 0, 1, 0, None, "s/1/SINK", producers, [])
    assert silent.why_not_fired(10_000) == ("no watermark yet: s/1/SINK has sent no data "
                                           "(it stops holding windows back once idle)")
    idle = ShuffleQueue("t", 0, 1, 0, None, None, {p: dict(s, idle=True) for p, s in producers.items()}, [])
    assert idle.why_not_fired(10_000) == "every producer is idle: open windows fire at this queue's next batch"
    due = ShuffleQueue("t", 0, 1, 0, 12_000, "s/0/SINK", {"s/0/SINK": {"watermark": 12_000, "idle": False}}, [])
    assert due.why_not_fired(10_000) == "watermark 12000 >= window end 10000: it fires at this queue's next batch"


def test_idle_flush_fires_everything(broker: EmbeddedBroker, make_job: Any, page_clicks_builder: Any) -> None:
    broker.create_topic("clicks", queues=2)
    send_clicks(broker, 0, FAST)
    send_clicks(broker, 1, SLOW)
    job = make_job(page_clicks_builder(job_id("wm-flush")), **WINDOW_PROPS)
    job.run_until_idle(timeout=120)  # fire_idle: after draining, the input counts as idle
    snap = WatermarkSnapshot.of(job)
    assert snap.windows_open == 0 and snap.pending_to_pandas().empty
    assert snap.windows_fired == len(windows_of(FAST[:-1] + SLOW)) == len(list(broker.read("page-counts")))
    assert "0 windows open" in snap.status and "lowest watermark" not in snap.status


def test_a_join_shows_its_silent_producer(broker: EmbeddedBroker, make_job: Any) -> None:
    b = StreamBuilder(job_id("wm-join"), shuffle_queues=2)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    (left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"]).window(TumblingWindow(Time.seconds(10)))
     .apply(lambda x, y: [x["v"], y["v"]]).sink("joined", JsonSerializer(with_key=True)))
    for topic in ("left", "right"):
        broker.create_topic(topic, queues=1)
    broker.send("left", json.dumps({"id": "k", "v": "L", "ts": 1000}))
    job = make_job(b, **WINDOW_PROPS)
    job.run_until_idle(timeout=120, fire_idle=False)
    snap = WatermarkSnapshot.of(job)
    [join] = [n.name for n in job.topology.nodes if n.kind == "join"]
    rows = snap.to_pandas()
    assert set(rows["operator"]) == {join} and rows["windows_open"].sum() == 1
    assert rows["watermark"].isna().all()  # the right side has sent nothing: no watermark yet
    right_sink = next(n.name for n in job.topology.nodes if n.kind == "shuffle_sink" and n.pipeline == "right")
    silent = f"right/0/{right_sink}"
    assert set(rows["held_back_by"]) == {silent}
    waiting = [q for q in snap.queues if q.operators[0].windows_open]
    assert [q.waiting_for() for q in waiting] == [
        f"no watermark yet: {silent} has sent no data (it stops holding windows back once idle)"]
    pending = snap.pending_to_pandas()  # joins list their open windows too
    assert pending[["key", "start", "end"]].values.tolist() == [["'k'", 0, 10000]]
    assert pending["reason"][0].startswith("no watermark yet")
    assert "no watermark yet" in snap._repr_html_()


def test_jobs_without_windows_or_batches(finished_job: Any, spark: Any, broker: EmbeddedBroker,
                                         page_clicks_builder: Any, tmp_path: Any) -> None:
    snap = WatermarkSnapshot.of(finished_job)
    assert snap.status == "job 'widgets-finished': stopped, no window or join (nothing waits for a watermark)"
    assert snap.to_pandas().empty and snap.sources_to_pandas().empty
    broker.create_topic("clicks", queues=1)
    idle = RocketMQStream(page_clicks_builder("wm-never-ran").build(), properties={"data_dir": str(tmp_path)},
                          broker=broker, spark=spark)
    snap = WatermarkSnapshot.of(idle)
    assert snap.status == "job 'wm-never-ran': stopped, no window or join queue has run yet"
    assert "no window or join queue has run yet" in snap._repr_html_()
    with pytest.raises(KeyError, match="no batch has run shuffle queue x/0 yet"):
        snap.queue("x", 0)
