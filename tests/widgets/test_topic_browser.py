"""``TopicBrowser``: every topic decoded, checked against what was sent and what the job holds."""

from __future__ import annotations

import json
import time
from collections import Counter
from html import unescape
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets import TopicBrowser, TopicOffsets, TopicPage
from rstream.widgets.topics import parse_time
from tests.support.widgets import FAST, SLOW


def shuffle_topic(job: Any) -> str:
    return next(iter(job.topology.shuffle_topics))


def test_source_shuffle_state_dead_letter_and_sink_topics_decode_to_what_was_sent(finished_job: Any,
                                                                                  sentences: list[str]) -> None:
    broker = finished_job.broker
    source = TopicPage.of(broker, "sentences", limit=100, job=finished_job)
    assert sorted(m.decoded.value for m in source.messages) == sorted(sentences)
    assert {m.decoded.kind for m in source.messages} == {"data"} and source.role.role == "source"

    words = Counter(w for s in sentences if s != "boom" for w in s.split())
    shuffled = TopicPage.of(broker, shuffle_topic(finished_job), limit=100, job=finished_job)
    # the count combines before the shuffle: a partial per word and range, holding that many of its records
    assert all(m.decoded.kind == "partial" and m.decoded.detail["records"] == len(m.decoded.detail["times"])
               for m in shuffled.messages)
    held: Counter[str] = Counter()
    for m in shuffled.messages:  # each says in words how many records of its word it stands for
        n = m.decoded.detail["records"]
        assert m.decoded.value == f"{n} record{'' if n == 1 else 's'} of {m.decoded.key!r} combined into one"
        held[m.decoded.key] += n
    assert held == words and len(shuffled.messages) < sum(words.values())

    state_topic = finished_job.topology.state_topics[shuffle_topic(finished_job)]
    state = TopicPage.of(broker, state_topic, limit=100, job=finished_job)
    latest = {}
    for m in sorted(state.messages, key=lambda m: (m.queue, m.offset)):
        assert m.decoded.kind == "state" and m.decoded.detail["operator"] == "COUNT-4"
        latest[m.decoded.key] = m.decoded.value
    assert latest == dict(zip(finished_job.state()["key"], finished_job.state()["value"])) == dict(words)

    letters = TopicPage.of(broker, finished_job.dlq_topic, job=finished_job)
    [letter] = letters.messages
    queues = broker.topic(finished_job.dlq_topic).queues
    assert ": 1 message from offsets" in letters.status  # one of each, not "1 messages"
    assert (f"{queues} queues:" if queues > 1 else "1 queue:") in letters.status
    assert (letter.decoded.kind, letter.decoded.value, letter.body) == ("dead letter", "boom", b"boom")
    assert letter.decoded.detail["operator"] == "FLAT_MAP-2" and "a sentence that cannot be split" in letter.decoded.detail["error"]

    sink = TopicPage.of(broker, "word-counts", limit=100, job=finished_job)
    finals = {}
    for m in sorted(sink.messages, key=lambda m: (m.queue, m.offset)):
        word, _, n = m.decoded.value.rpartition(":")
        finals[word] = int(n)
    assert finals == dict(words)
    assert "word-counts" in sink.status and "(sink)" in sink.status


def test_framed_shuffle_records_carry_their_time_and_markers_show_as_watermarks(held_back_job: Any) -> None:
    job, _ = held_back_job
    page = TopicPage.of(job.broker, shuffle_topic(job), limit=1000, job=job)
    assert page.role.framed
    data = [m for m in page.messages if m.decoded.kind in ("data", "partial")]
    # the clicks on time: per page and source range, one partial with their data times, counted per
    # window start; a late click alone, with its frame (its value, watermark and source offset)
    partials = [m for m in data if m.decoded.kind == "partial"]
    alone = [m for m in data if m.decoded.kind == "data"]
    sent = sorted((p, t) for p, t in FAST + SLOW + [("b", 16000)])
    assert sorted([(m.decoded.key, t) for m in partials for t in m.decoded.detail["times"]]
                  + [(m.decoded.value["page"], m.decoded.value["ts"]) for m in alone]) == sent
    assert [(m.decoded.value["page"], m.decoded.value["ts"]) for m in alone] == [("b", 4000)]  # behind 19000
    for m in partials:
        times = m.decoded.detail["times"]
        assert m.decoded.detail["counts"] == dict(Counter(t - t % 10_000 for t in times))
        assert m.decoded.detail["records"] == len(times) and m.decoded.value.startswith(f"{len(times)} record")
        assert m.born_ms == max(times)  # the latest data time travels as born time
    assert all(m.born_ms == m.decoded.value["ts"] for m in alone)
    assert all(m.decoded.detail["producer"].startswith("clicks/") for m in data)
    markers = [m for m in page.messages if m.decoded.kind == "watermark"]
    assert markers and all(m.decoded.key is None for m in markers)
    final = {m.decoded.detail["producer"].split("/")[1]: m.decoded.value for m in markers}
    assert final == {"0": 21000 - 2000, "1": 16000 - 2000}  # the last marker of each source queue


def test_seek_by_broker_time_paging_and_lag(tmp_path: Any) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("t", queues=2)
    broker.send_batch("t", [f"early {i}" for i in range(6)])
    time.sleep(0.05)
    cut = time.time_ns() // 1_000_000
    time.sleep(0.05)
    broker.send_batch("t", [f"late {i}" for i in range(4)])
    after = TopicPage.at_time(broker, "t", cut)
    assert sorted(m.decoded.value for m in after.messages) == [f"late {i}" for i in range(4)]
    assert after.starts == {0: 3, 1: 3}
    first = TopicPage.of(broker, "t", limit=4)
    second = TopicPage.of(broker, "t", start=first.next_starts, limit=4)
    third = TopicPage.of(broker, "t", start=second.next_starts, limit=4)
    seen = [m.decoded.value for p in (first, second, third) for m in p.messages]
    assert sorted(seen) == sorted([f"early {i}" for i in range(6)] + [f"late {i}" for i in range(4)])
    assert len(seen) == len(set(seen)) == 10  # every message once
    one_queue = TopicPage.of(broker, "t", queue=1)
    assert {m.queue for m in one_queue.messages} == {1} and len(one_queue.messages) == 5
    offsets = TopicOffsets.of(broker, "t")
    assert offsets.to_pandas()["end_offset"].tolist() == [5, 5]
    with pytest.raises(ValueError, match="queues 0..1, not 7"):
        TopicPage.of(broker, "t", queue=7)


def test_lag_follows_what_the_job_has_not_committed(finished_job: Any) -> None:
    offsets = TopicOffsets.of(finished_job.broker, "sentences", finished_job).to_pandas()
    assert offsets["lag"].tolist() == [0, 0] and offsets["committed_offset"].tolist() == offsets["end_offset"].tolist()
    assert TopicOffsets.of(finished_job.broker, "word-counts", finished_job).to_pandas()["lag"].isna().all()


def test_parse_time_reads_the_forms_it_names() -> None:
    now = 1_700_000_000_000
    assert parse_time("1700000000123", now) == 1_700_000_000_123
    assert parse_time("-30s", now) == now - 30_000 and parse_time("-2m", now) == now - 120_000
    assert parse_time("2026-11-22T10:00:00") == int(time.mktime((2026, 11, 22, 10, 0, 0, 0, 0, -1)) * 1000)
    with pytest.raises(ValueError, match="ms since the epoch, -30s"):
        parse_time("yesterday-ish")


def test_the_browser_lists_every_topic_shows_a_message_and_traces_it(finished_job: Any) -> None:
    browser = TopicBrowser(finished_job.broker, finished_job)
    names = [value for _label, value in browser.topic.options]
    assert set(names) == {t.name for t in finished_job.broker.topics()}
    labels = dict((v, k) for k, v in browser.topic.options)
    assert "(shuffle, 8 queues)" in labels[shuffle_topic(finished_job)] and "(dead letter" in labels[finished_job.dlq_topic]
    assert browser.topic.value == "sentences"  # the job's source first
    assert len(browser.messages.options) == 4
    browser.messages.value = 0
    picked = browser.selected()
    assert picked is not None and not browser.trace_button.disabled
    assert repr(picked.decoded.value) in unescape(browser.detail.value)
    trace = browser.trace_selected()
    assert trace is not None and trace.exact and trace.origin == ("sentences", picked.queue, picked.offset)
    assert "trace" in browser.trace_view.value
    browser.topic.value = "word-counts"  # not an input of the job: nothing to trace
    browser.messages.value = 0
    assert browser.trace_button.disabled
    browser.seek("not a time")
    assert "cannot read 'not a time' as a time" in unescape(browser.status_line.value)
    page = browser.seek("-1h")
    assert page is not None and len(page.messages) == len(browser.messages.options)


def test_the_queue_dropdown_shows_all_queues_on_every_topic(tmp_path: Any) -> None:
    """ipywidgets takes a value of None for no choice at all: "all" (None) chosen by value showed an
    empty box. On every topic, and after a queue was picked, the box reads "all" and the page holds
    every queue's messages."""
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("one", queues=1)
    broker.create_topic("two", queues=2)
    broker.send_batch("one", ["a", "b"])
    broker.send_batch("two", ["c", "d", "e"])
    browser = TopicBrowser(broker)
    for topic, queues in (("one", ["all", "0"]), ("two", ["all", "0", "1"]), ("one", ["all", "0"])):
        browser.topic.value = topic
        assert [label for label, _value in browser.queue.options] == queues
        assert (browser.queue.index, browser.queue.label, browser.queue.value) == (0, "all", None)
        assert len(browser.messages.options) == sum(broker.end_offsets(topic))
    browser.topic.value = "two"
    browser.queue.value = 1
    assert browser.queue.label == "1" and len(browser.messages.options) == broker.end_offsets("two")[1]
    browser.topic.value = "one"
    assert (browser.queue.index, browser.queue.label) == (0, "all") and len(browser.messages.options) == 2


def test_decoded_json_values_equal_what_a_producer_sent(tmp_path: Any) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("orders", queues=1)
    docs = [{"user": "ann", "item": "book", "n": 2}, {"user": "bob", "item": None, "tags": ["x"]}]
    broker.send_batch("orders", [json.dumps(d) for d in docs])
    assert [m.decoded.value for m in TopicPage.of(broker, "orders").messages] == docs
