"""The notebook toolkit on a real RocketMQ: the state after any batch and what a batch changed, a
record traced through the topology, every topic decoded in the topic browser, the producer panel
and a rate producer, and the event-time picture of a windowed job, each checked against what was
sent and what the job holds."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from rstream.widgets import (
    EventTimeSnapshot,
    ProducerPanel,
    RateProducer,
    StateDiffSnapshot,
    TopicBrowser,
    TopicPage,
)
from tests.support.jobs import job_id, wordcount
from tests.support.widgets import CATCH_UP, FAST, SLOW, WINDOW_PROPS, page_clicks, send_clicks

pytestmark = pytest.mark.e2e

ROUNDS = [["apple banana apple", "cherry"], ["banana date", "apple"], ["elder fig", "apple fig"]]


def test_state_history_trace_and_topic_browser(rocket_broker: Any, make_rocket_job: Any) -> None:
    rocket_broker.create_topic("sentences", queues=2)
    job = make_rocket_job(wordcount(job_id("rtool")))
    for sentences in ROUNDS:
        rocket_broker.send_batch("sentences", sentences)
        job.run_until_idle(progress=False)
    words = Counter(w for r in ROUNDS for s in r for w in s.split())
    assert dict(zip(job.state()["key"], job.state()["value"])) == dict(words)

    batches = [p.batch_id for p in job.history()]
    first = job.state(batch=batches[0])
    assert dict(zip(first["key"], first["value"])) == {"apple": 2, "banana": 1, "cherry": 1}
    diff = StateDiffSnapshot.of(job, batches[-1]).to_pandas()
    assert sorted(zip(diff["key"], diff["change"], diff["after"])) == [
        ("apple", "changed", 4), ("elder", "added", 1), ("fig", "added", 2)]

    shuffle = next(iter(job.topology.shuffle_topics))
    shuffled = TopicPage.of(rocket_broker, shuffle, limit=100, job=job)
    assert sum(m.decoded.detail["records"] for m in shuffled.messages) == sum(words.values())
    sink = TopicPage.of(rocket_broker, "counts", limit=100, job=job)
    assert sorted(m.decoded.value for m in sink.messages) == sorted(
        f"{w}:{i}" for w, n in words.items() for i in range(1, n + 1))

    browser = TopicBrowser(rocket_broker, job)
    assert browser.topic.value == "sentences"
    browser.messages.value = 0
    picked = browser.selected()
    trace = browser.trace_selected()
    assert picked is not None and trace is not None and trace.exact
    assert trace.origin == ("sentences", picked.queue, picked.offset)
    sentence = picked.decoded.value
    hops = trace.to_pandas()
    sunk = hops[(hops["kind"] == "sink") & (hops["topic"] == "counts")]
    assert len(sunk) == len(sentence.split())  # one running count per word of the traced sentence


def test_producer_panel_and_rate_producer(rocket_broker: Any) -> None:
    rocket_broker.create_topic("events", queues=2)
    panel = ProducerPanel(rocket_broker, "events")
    panel.records.value = "first\n\nsecond"
    assert [r.offset for r in panel.send()] and sum(rocket_broker.end_offsets("events")) == 2
    producer = RateProducer(rocket_broker, "events", lambda i: {"n": i}, rate=400, count=40).start()
    assert producer.wait(timeout=60) and producer.error is None and producer.sent == 40
    bodies = [m.body for m in rocket_broker.read("events")]
    assert sorted(json.loads(b)["n"] for b in bodies if b.startswith(b"{")) == list(range(40))
    assert sorted(b for b in bodies if not b.startswith(b"{")) == [b"first", b"second"]


def test_the_event_time_picture_of_a_held_back_window(rocket_broker: Any, make_rocket_job: Any) -> None:
    rocket_broker.create_topic("clicks", queues=2)
    send_clicks(rocket_broker, 0, FAST)
    send_clicks(rocket_broker, 1, SLOW)
    job = make_rocket_job(page_clicks(job_id("rclicks")), **WINDOW_PROPS)
    job.run_until_idle(timeout=120, fire_idle=False)
    send_clicks(rocket_broker, 1, CATCH_UP)
    job.run_until_idle(timeout=120, fire_idle=False)
    snap = EventTimeSnapshot.of(job)
    last = {name: pts[-1][1] for name, pts in snap.watermarks.items()}
    assert last == {"clicks/0": max(t for _, t in FAST) - 2000, "clicks/1": max(t for _, t in SLOW + CATCH_UP) - 2000}
    fired = {(s.start, s.end) for s in snap.spans if s.fired_ms is not None}
    assert fired == {(0, 10000)}
    assert len(snap.events) == len(FAST) + len(SLOW) + len(CATCH_UP)
    assert [(d, w) for _f, d, w, _op in snap.late] == list(zip(job.late_records()["data_time"],
                                                                   job.late_records()["watermark"]))
