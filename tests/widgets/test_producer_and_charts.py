"""``ProducerPanel`` / ``RateProducer``, ``EventTimeChart`` / ``EventTimeSnapshot`` and ``ErrorTable`` /
``ErrorSnapshot``, against what was sent and what the jobs did."""

from __future__ import annotations

import json
from html import unescape
from typing import Any

import pytest

from rstream import EmbeddedBroker, JsonDeserializer, RocketMQStream, StreamBuilder, UnknownTopicError
from rstream.widgets import (
    ErrorSnapshot,
    ErrorTable,
    EventTimeChart,
    EventTimeSnapshot,
    ProducerPanel,
    RateProducer,
)
from rstream.widgets.producer import parse_lines
from tests.support.jobs import job_id
from tests.support.widgets import CATCH_UP, FAST, SLOW


def test_a_rate_producer_sends_exactly_what_its_generator_makes(broker: EmbeddedBroker) -> None:
    broker.create_topic("events", queues=3)
    producer = RateProducer(broker, "events", lambda i: {"n": i}, rate=400, count=50).start()
    assert producer.wait(timeout=60) and producer.error is None
    assert producer.sent == 50 == sum(broker.end_offsets("events"))
    assert sorted(json.loads(m.body)["n"] for m in broker.read("events")) == list(range(50))
    words = iter(["a", "b", "c"])
    short = RateProducer(broker, "events", words, rate=1000, queue=2).start()  # an iterable that runs out
    assert short.wait(timeout=60) and short.sent == 3
    assert [m.body for m in broker.read("events", 2)][-3:] == [b"a", b"b", b"c"]

    def failing(i: int) -> str:
        if i == 2:
            raise RuntimeError("generator broke")
        return str(i)

    broken = RateProducer(broker, "events", failing, rate=1000).start()
    assert broken.wait(timeout=60) and isinstance(broken.error, RuntimeError) and broken.sent == 0
    with pytest.raises(UnknownTopicError):
        RateProducer(broker, "nope", str)
    with pytest.raises(ValueError, match="rate must be positive"):
        RateProducer(broker, "events", str, rate=0)


def test_the_panel_sends_typed_records_and_runs_a_generator(broker: EmbeddedBroker) -> None:
    broker.create_topic("events", queues=2)
    panel = ProducerPanel(broker, "events", generator=lambda i: f"gen {i}")
    # its queue box shows its choice, not an empty box (an option valued None chosen by value)
    assert (panel.queue.index, panel.queue.label, panel.queue.value) == (0, "by key / round robin", None)
    panel.records.value = "first\n\nsecond"
    results = panel.send()
    assert [r.offset for r in results] and sum(broker.end_offsets("events")) == 2
    assert "sent 2 records" in unescape(panel.result.value) and ">2</td>" not in panel.offsets.value
    panel.format.value = "JSON"
    panel.records.value = '{"a": 1}\nnot json'
    assert panel.send() == [] and "line 2 is not JSON" in unescape(panel.result.value)
    assert parse_lines(' {"a" : [1, 2]} ', "JSON") == [b'{"a":[1,2]}']
    panel.records.value = '{"k": 1}'
    panel.key.value = "user-7"
    [landed] = panel.send()
    assert broker.read("events", landed.queue_id, landed.offset, landed.offset + 1)[0].key == "user-7"

    panel.count.value = 5
    panel.rate.value = 200
    producer = panel.start_generator()
    assert producer.wait(timeout=60) and producer.sent == 5
    again = panel.start_generator()  # a second run goes on from where the first stopped
    assert again.wait(timeout=60)
    bodies = sorted(m.body.decode() for m in broker.read("events") if m.body.startswith(b"gen"))
    assert bodies == sorted(f"gen {i}" for i in range(10))
    panel.refresh()
    assert "sent 5" in unescape(panel.status_line.value)


def test_the_generator_button_shows_the_generator_as_it_is(broker: EmbeddedBroker) -> None:
    """Started from code, or ended by its count, the generator's button says what a click would do."""
    broker.create_topic("events", queues=1)
    panel = ProducerPanel(broker, "events", generator=lambda i: f"gen {i}")
    button = panel.run_button
    panel.count.value, panel.rate.value = 3, 200
    producer = panel.start_generator()  # from code, not a click
    assert button.value and button.description == "stop generator"
    assert producer.wait(timeout=60)
    panel.refresh()  # the panel sees the count is done
    assert "generator stopped" in unescape(panel.status_line.value)
    assert not button.value and button.description == "start generator"
    button.value = True  # a click on "start generator" starts it
    assert panel.producer is not producer and panel.producer.wait(timeout=60)
    assert button.description == "stop generator"
    panel.refresh()
    assert not button.value and button.description == "start generator"
    assert sum(broker.end_offsets("events")) == 6


def test_event_time_snapshot_matches_the_watermark_rule_and_the_late_topic(held_back_job: Any) -> None:
    job, _ = held_back_job
    snap = EventTimeSnapshot.of(job)
    # per source queue, its last watermark is max(data time) - lateness over what it sent
    last = {name: pts[-1][1] for name, pts in snap.watermarks.items()}
    assert last == {"clicks/0": max(t for _, t in FAST) - 2000, "clicks/1": max(t for _, t in SLOW + CATCH_UP) - 2000}
    for pts in snap.watermarks.values():
        assert [w for _, w in pts] == sorted(w for _, w in pts)  # a watermark never goes back
    # after CATCH_UP the operator watermark is min(19000, 14000): [0, 10000) fired, [10000, 20000) is open
    fired = {(s.start, s.end) for s in snap.spans if s.fired_ms is not None}
    still = {(s.start, s.end) for s in snap.spans if s.fired_ms is None}
    assert fired == {(0, 10000)} and still == {(10000, 20000), (20000, 30000)}
    assert all(s.opened_ms <= (s.fired_ms or s.opened_ms) for s in snap.spans)
    assert [(d, w) for _f, d, w, _op in snap.late] == list(zip(job.late_records()["data_time"], job.late_records()["watermark"]))
    assert len(snap.events) == len(FAST) + len(SLOW) + len(CATCH_UP)
    png = snap.png()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert snap.to_pandas()["series"].str.startswith(("clicks/", "operator ")).all()
    chart = EventTimeChart(job)
    assert "data:image/png;base64," in chart.picture.value and "2 source queue watermarks" in unescape(chart.status_line.value)


def test_every_skipped_record_is_in_the_dead_letter_topic_also_after_a_restart(broker: EmbeddedBroker,
                                                                               make_job: Any) -> None:
    """Not a few per batch, and not only in one job object's memory (3 000 bad of 9 000)."""
    broker.create_topic("events", queues=2)
    bodies = [json.dumps({"user": f"u{i % 7}"}) if i % 3 else f"bad {i}" for i in range(9000)]
    broker.send_batch("events", bodies, progress=False)
    name = job_id("dlq")
    b = StreamBuilder(name, shuffle_queues=2)
    b.source("events", JsonDeserializer()).key_by(lambda e: e["user"]).count().sink("counts")
    job = make_job(b, max_records_per_queue=1000)
    job.run_until_idle(progress=False)
    errors = job.errors()
    assert len(errors) == 3000 and set(errors["operator"]) == {"SOURCE-1"}
    assert sorted(errors["body"]) == sorted(x.encode() for x in bodies if x.startswith("bad"))
    assert errors["batch_id"].nunique() > 1 and "JSONDecodeError" in errors["error"].iloc[0]
    again = make_job(b)  # a restarted kernel: a new job object reads the same dead letters
    assert again.errors().equals(errors)
    snap = ErrorSnapshot.of(again)
    assert snap.total == 3000 and snap.summary_to_pandas().values.tolist() == [["SOURCE-1", "JSONDecodeError", 3000]]
    table = ErrorTable(again, last=5)
    assert "3000 records skipped" in unescape(table.status_line.value)
    assert "latest skipped records (5 of 3000, newest first)" in unescape(table.tables.value)


def test_a_job_without_windows_draws_an_empty_picture(finished_job: RocketMQStream) -> None:
    snap = EventTimeSnapshot.of(finished_job)
    assert snap.origin_ms is None and "no window or join" in snap.status
    assert snap.png()[:4] == b"\x89PNG"
