"""``job.trace``: the path of one record, checked against what the broker holds."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    RocketMQStream,
    StreamBuilder,
    Time,
    TumblingWindow,
)
from rstream.runtime.trace import TraceError
from rstream.serde.codec import decode
from tests.support.jobs import job_id, wordcount

WORDS = st.sampled_from(["a", "b", "kiwi", "zebra"])
SENTENCES = st.lists(st.lists(WORDS, min_size=1, max_size=5).map(" ".join), min_size=1, max_size=12)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(sentences=SENTENCES, pick=st.integers(min_value=0), batch_size=st.integers(min_value=1, max_value=4))
def test_a_traced_records_hops_are_the_messages_it_caused(spark: Any, tmp_path_factory: Any, sentences: list[str],
                                                           pick: int, batch_size: int) -> None:
    root = tmp_path_factory.mktemp("trace")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", sentences)
    # every word its own shuffle record (RIP-58's shuffle, no combine node): the next test traces into partials
    job = RocketMQStream(wordcount(job_id("trace")).build(combine=False), {"data_dir": str(root),
                         "max_records_per_queue": batch_size}, broker=broker, spark=spark)
    job.run_until_idle()
    source = broker.read("sentences")[pick % len(sentences)]
    trace = job.trace("sentences", source.queue_id, source.offset)
    assert trace.exact
    hops = trace.to_pandas()
    assert hops.iloc[0]["kind"] == "source" and hops.iloc[0]["value"] == source.body.decode()
    shuffle = next(iter(job.topology.shuffle_topics))

    # the shuffle records: one per word, in order, each really in the shuffle topic at that offset
    shuffled = hops[hops["kind"] == "shuffle"]
    assert list(shuffled["key"]) == source.body.decode().split()
    for row in shuffled.itertuples():
        stored = broker.read(shuffle, row.queue, row.offset, row.offset + 1)[0]
        assert decode(stored.key) == row.key  # type: ignore[arg-type]

    # reference: a word's count after a shuffle record is how often it occurs up to there in its queue
    expected_sink = []
    for row in shuffled.itertuples():
        before = sum(1 for m in broker.read(shuffle, row.queue, 0, row.offset) if decode(m.key) == row.key)  # type: ignore[arg-type]
        expected_sink.append(f"{row.key}:{before + 1}")
    sinks = hops[hops["kind"] == "sink"]
    assert list(sinks["value"]) == expected_sink
    for row in sinks.itertuples():  # each sink hop is the committed message at that offset
        assert broker.read("counts", row.queue, row.offset, row.offset + 1)[0].body.decode() == row.value
    all_sink = Counter(m.body.decode() for m in broker.read("counts"))
    assert all(all_sink[v] == 1 for v in expected_sink)  # and the only message with that text

    states = hops[hops["kind"] == "state"]
    assert [(r.key, r.before, r.after) for r in states.itertuples()] == [
        (v.rpartition(":")[0], None if v.endswith(":1") else int(v.rpartition(":")[2]) - 1, int(v.rpartition(":")[2]))
        for v in expected_sink]
    assert set(trace.operators) >= {"SOURCE-1", "FLAT_MAP-2", "KEY_BY-3", "SHUFFLE_SINK-4", "COUNT-4", "SINK-6"}
    assert "#e8590c" in trace.graph().source and "counts" in trace.topics  # the path is drawn


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(sentences=SENTENCES, pick=st.integers(min_value=0), batch_size=st.integers(min_value=1, max_value=4))
def test_a_word_in_a_partial_is_followed_to_its_own_update(spark: Any, tmp_path_factory: Any, sentences: list[str],
                                                           pick: int, batch_size: int) -> None:
    """Counts combined before the shuffle (the default): a sentence's words go into their keys'
    partials; each occurrence is followed to the one update the count emitted for it. One source
    queue, so a word's updates follow the order of the sentences: the n-th occurrence is ``word:n``."""
    root = tmp_path_factory.mktemp("trace-partials")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", sentences)
    job = RocketMQStream(wordcount(job_id("trace-partials")).build(), {"data_dir": str(root),
                         "max_records_per_queue": batch_size}, broker=broker, spark=spark)
    job.run_until_idle()
    offset = pick % len(sentences)
    trace = job.trace("sentences", 0, offset)
    assert trace.exact
    # its path (highlighted on the topology) goes through the combine node and the sink that sent its partial
    assert {"COMBINE-4", "SHUFFLE_SINK-4", "COUNT-4"} <= set(trace.operators)
    hops = trace.to_pandas()
    words = sentences[offset].split()
    before = Counter(w for s in sentences[:offset] for w in s.split())
    start = offset // batch_size * batch_size  # the source range that read it
    in_range = Counter(w for s in sentences[start:start + batch_size] for w in s.split())
    earlier = Counter(w for s in sentences[:start] for w in s.split())

    # one shuffle record per distinct word: its partial, holding the range's records of that word
    shuffled = hops[hops["kind"] == "shuffle"]
    assert sorted(shuffled["key"]) == sorted(set(words))
    shuffle = next(iter(job.topology.shuffle_topics))
    for row in shuffled.itertuples():
        n = in_range[row.key]  # in words, never a bare number that reads like a total
        assert row.value == f"{n} record{'' if n == 1 else 's'} of {row.key!r} combined into one"
        assert "sent by the combine node instead of those records" in row.note
        stored = broker.read(shuffle, row.queue, row.offset, row.offset + 1)[0]
        assert decode(stored.key) == row.key and stored.headers  # type: ignore[arg-type]
    # each occurrence's own update, and no other word's or occurrence's
    seen: Counter[str] = Counter()
    expected = []
    for w in words:
        seen[w] += 1
        expected.append(f"{w}:{before[w] + seen[w]}")
    sinks = hops[hops["kind"] == "sink"]
    assert sorted(sinks["value"]) == sorted(expected)
    for row in sinks.itertuples():
        assert broker.read("counts", row.queue, row.offset, row.offset + 1)[0].body.decode() == row.value
    # the count's state: the partial's change, from before the range to after it
    states = hops[hops["kind"] == "state"]
    assert sorted((r.key, r.before, r.after) for r in states.itertuples()) == sorted(
        (w, earlier[w] or None, earlier[w] + in_range[w]) for w in set(words))


def clicks_per_window(job: str, emit_sink: str = "page-counts") -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=2)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])
     .window(TumblingWindow(Time.seconds(10))).count().to_rstream().sink(emit_sink, JsonSerializer(with_key=True)))
    return b


def send(broker: EmbeddedBroker, clicks: list[tuple[str, int]]) -> None:
    broker.send_batch("clicks", [json.dumps({"page": p, "ts": t}) for p, t in clicks], queue=0)


def test_a_window_is_followed_to_the_batch_where_it_fired_and_late_records_to_the_late_topic(
        broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("clicks", queues=1)
    job = make_job(clicks_per_window(job_id("trace-window")), allowed_lateness_ms=0, idle_timeout_ms=600_000)
    send(broker, [("a", 1000), ("a", 2000), ("b", 3000)])
    job.run_until_idle(fire_idle=False)
    opened = job.trace("clicks", 0, 0).to_pandas()
    assert "fired" not in set(opened["kind"])  # its window is still open
    # it went into its key's partial (both "a" clicks of the range, counted per window start), which
    # opened its window with both; "b"'s partial and window are not part of its path
    [shuffled] = opened[opened["kind"] == "shuffle"].itertuples()
    assert shuffled.key == "a" and shuffled.value.startswith("2 records of 'a' combined into one from clicks/0/")
    assert "per window start: {0: 2}" in shuffled.note
    assert opened[opened["kind"] == "state"][["key", "before", "after"]].values.tolist() == [[("a", 0, 10000), None, 2]]

    send(broker, [("c", 12000), ("a", 4000)])  # the watermark passes 10000: [0, 10000) fires; t=4000 is late
    job.run_until_idle(fire_idle=False)
    trace = job.trace("clicks", 0, 0)
    assert trace.exact
    fired = trace.to_pandas()
    fired = fired[fired["kind"] == "fired"]
    assert len(fired) == 1
    row = fired.iloc[0]
    message = broker.read("page-counts", row["queue"], row["offset"], row["offset"] + 1)[0]
    assert json.loads(message.body) == {"key": ["a", 0, 10000], "value": 2} == row["value"]
    assert row["batch_id"] > trace.to_pandas().iloc[1]["batch_id"]  # fired in a later batch than it was counted
    assert "fired in batch" in row["note"]

    late = job.trace("clicks", 0, 4).to_pandas()
    late_hop = late[late["kind"] == "late"].iloc[0]
    stored = json.loads(broker.read(job.late_topic, 0, late_hop["offset"], late_hop["offset"] + 1)[0].body)
    assert (stored["data_time"], stored["offset"], late_hop["operator"]) == (4000, 4, "COUNT-5")
    assert "behind its source queue's watermark" in late_hop["note"]
    assert "state" not in set(late["kind"])  # a late record changes no state


def test_a_record_in_a_partial_is_followed_into_its_own_window_only(broker: EmbeddedBroker, make_job: Any) -> None:
    """Its key's partial holds two windows' counts; the trace shows the window the record is in."""
    broker.create_topic("clicks", queues=1)
    job = make_job(clicks_per_window(job_id("trace-partial")), allowed_lateness_ms=60_000, idle_timeout_ms=600_000)
    send(broker, [("a", 1000), ("a", 12000), ("a", 13000)])
    job.run_until_idle(fire_idle=False)
    for offset, window, count in ((0, ("a", 0, 10000), 1), (2, ("a", 10000, 20000), 2)):
        hops = job.trace("clicks", 0, offset).to_pandas()
        [shuffled] = hops[hops["kind"] == "shuffle"].itertuples()
        assert shuffled.value.startswith("3 records of 'a' combined") and "{0: 1, 10000: 2}" in shuffled.note
        assert hops[hops["kind"] == "state"][["key", "before", "after"]].values.tolist() == [[window, None, count]]


def test_per_batch_results_and_dead_letters_are_in_the_trace(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", ["a b a", "boom", "b"])

    def split(sentence: str) -> list[str]:
        if sentence == "boom":
            raise ValueError("cannot split boom")
        return sentence.split()

    b = StreamBuilder(job_id("trace-batch"), shuffle_queues=1)
    b.source("sentences").flat_map(split).key_by(lambda w: w).count().to_rstream().sink("counts")
    job = make_job(b, aggregate_emit="batch")
    job.run_until_idle()
    hops = job.trace("sentences", 0, 0).to_pandas()
    # per batch: "a b a" became one combined partial per word, and each word's count was emitted once
    assert sorted(hops[hops["kind"] == "emitted"]["value"]) == ["a:2", "b:2"]
    dead = job.trace("sentences", 0, 1).to_pandas()
    letter = dead[dead["kind"] == "dead letter"].iloc[0]
    assert letter["offset"] == 0 and "cannot split boom" in letter["note"] and letter["operator"] == "FLAT_MAP-2"
    assert job.errors()["offset"].tolist() == [1]


def test_bad_trace_requests_are_named_and_nondeterminism_is_flagged(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["x", "y"])
    b = StreamBuilder(job_id("trace-random"))
    b.source("in").map(lambda v: f"{v}-{random.random()}").sink("out")
    job = make_job(b)
    with pytest.raises(TraceError, match="does not read topic 'out'"):
        job.trace("out", 0, 0)
    with pytest.raises(TraceError, match="offsets 0..1, not 7"):
        job.trace("in", 0, 7)
    assert "not processed yet" in job.trace("in", 0, 1).to_pandas().iloc[0]["note"]
    job.run_until_idle()
    trace = job.trace("in", 0, 1)
    assert not trace.exact and "NOT exact" in trace.summary  # a random map cannot be re-executed


def test_a_record_held_until_the_watermark_passed_it_is_followed_to_the_batch_that_took_it(
        broker: EmbeddedBroker, make_job: Any) -> None:
    """A keyed process function takes its records in data-time order: a record read in one batch waits
    until a later batch's watermark passes it. Its trace says so and goes on from that batch: what the
    function forwarded, in the sink."""
    from tests.support.process import T0, process_job
    from tools.functions import Dedup

    broker.create_topic("events", queues=1)
    events = [{"user": f"u{i % 3}", "ts": T0 + i * 1000, "n": i} for i in range(12)]
    broker.send_batch("events", [json.dumps(e) for e in events])
    job = make_job(process_job(job_id("held"), Dedup(60_000), shuffle_queues=1), max_records_per_queue=4,
                   allowed_lateness_ms=2500, idle_timeout_ms=600_000)
    job.run_until_idle()
    first = broker.read("events", 0, 2, 3)[0]  # u2's first event, at T0 + 2 s: the batch's watermark is T0 + 0.5 s
    hops = job.trace("events", 0, first.offset).to_pandas()
    shuffle = hops[hops["kind"] == "shuffle"].iloc[0]
    read_in, taken_in = (int(n) for n in re.findall(r"batch (\d+)", shuffle["note"]))
    assert "held until the watermark passed its data time" in shuffle["note"] and taken_in > read_in
    [sink] = hops[hops["kind"] == "sink"].itertuples()
    assert json.loads(broker.read("out", sink.queue, sink.offset, sink.offset + 1)[0].body) == {
        "key": "u2", "value": events[2]}
    assert sink.batch_id == taken_in
