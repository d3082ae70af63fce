"""``explain``: the input records behind a sink record, per operator kind, against a plain Python
reference over the generated input (in this process, without Spark; one test on Spark after a crash
and a restart)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JobError,
    JsonDeserializer,
    JsonSerializer,
    KeyedProcessFunction,
    StreamBuilder,
    Time,
    TumblingWindow,
)
from rstream.runtime.explain import ExplainError
from rstream.runtime.inprocess import InProcessJob
from tests.support.jobs import job_id
from tests.support.reference import fixed_windows, split_late

T0 = 1_700_000_000_000
SIZE = 10_000
Where = tuple[str, int, int]

EXAMPLES = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))


def generate(broker: EmbeddedBroker, n: int, seed: int, keys: int = 3, topic: str = "in", queues: int = 2,
             disorder: int = 3000, side: str = "") -> dict[int, Where]:
    """``n`` records ``{"id", "k", "ts", "side"}`` round robin over the queues; where each id landed."""
    rng = random.Random(seed)
    broker.create_topic(topic, queues=queues)
    base = {"": 0, "L": 10_000, "R": 20_000}[side]  # ids of both sides of a join apart
    records = [{"id": base + i, "k": f"k{rng.randrange(keys)}", "ts": T0 + i * 700 - (rng.randrange(disorder) if disorder else 0),
                "side": side} for i in range(n)]
    broker.send_batch(topic, [json.dumps(r) for r in records])
    return {json.loads(m.body)["id"]: (topic, m.queue_id, m.offset) for m in broker.read(topic)}


def by_queue(broker: EmbeddedBroker, topic: str = "in") -> dict[int, list[dict[str, Any]]]:
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(broker.topic(topic).queues)}


def bits(n: int) -> set[int]:
    return {i for i in range(n.bit_length()) if n >> i & 1}


def run(builder: StreamBuilder, broker: EmbeddedBroker, tmp: Path, combine: bool = True, **props: Any) -> InProcessJob:
    job = InProcessJob(builder.build(combine=combine), broker, tmp / builder.job_id, props)
    job.run_until_idle()
    return job


def sink_records(broker: EmbeddedBroker, topic: str) -> list[tuple[int, int, dict[str, Any]]]:
    return [(m.queue_id, m.offset, json.loads(m.body)) for m in broker.read(topic)]


def in_read_order(queues: dict[int, list[dict[str, Any]]], batch: int) -> list[dict[str, Any]]:
    """The records in the order a key's shuffle queue gets them in this process: round by round
    (``batch`` records per source queue), source queue by source queue."""
    rounds = max(len(v) for v in queues.values()) // batch + 1
    return [r for i in range(rounds) for q in sorted(queues) for r in queues[q][i * batch:(i + 1) * batch]]


# -- keyed aggregations ------------------------------------------------------------------------------
@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 40), agg=st.sampled_from(["sum", "count"]),
       combine=st.booleans())
def test_an_aggregations_update_is_explained_by_every_record_of_its_key_up_to_it(
        tmp_path_factory: Any, seed: int, batch: int, agg: str, combine: bool) -> None:
    tmp = tmp_path_factory.mktemp("explain-agg")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 60, seed)
    b = StreamBuilder(job_id("explain-agg"), shuffle_queues=2)
    grouped = b.source("in", JsonDeserializer()).key_by(lambda r: r["k"])
    (grouped.sum(lambda r: 1 << r["id"]) if agg == "sum" else grouped.count()).to_rstream().sink(
        "out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp, combine=combine, max_records_per_queue=batch)
    order = in_read_order(by_queue(broker), batch)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, 8):
        e = job.explain("out", queue, offset)
        n = doc["value"] if agg == "count" else bin(doc["value"]).count("1")
        expected = {where[r["id"]] for r in [r for r in order if r["k"] == doc["key"]][:n]}
        assert e.records == expected and e.exact and e.kind == "aggregation"
        if agg == "sum":  # the sum's bits name its records: the same set
            assert {where[i] for i in bits(doc["value"])} == expected
        last = max(e.inputs, key=lambda c: int(c.via.rsplit("/", 1)[-1]))
        assert last.after == doc["value"]  # the operator's state right after the last record: the result


# -- windows -----------------------------------------------------------------------------------------
@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(5, 40), agg=st.sampled_from(["sum", "count"]))
def test_a_windows_result_is_explained_by_its_keys_on_time_records_and_its_late_ones(
        tmp_path_factory: Any, seed: int, batch: int, agg: str) -> None:
    tmp = tmp_path_factory.mktemp("explain-window")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 80, seed, disorder=6000)
    lateness = 2000
    b = StreamBuilder(job_id("explain-window"), shuffle_queues=2)
    ws = (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
          .window(TumblingWindow(Time.milliseconds(SIZE))))
    (ws.sum(lambda r: 1 << r["id"]) if agg == "sum" else ws.count()).to_rstream().sink(
        "out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp, max_records_per_queue=batch, allowed_lateness_ms=lateness, idle_timeout_ms=600_000)
    on_time, late = split_late(by_queue(broker), lambda r: r["ts"], lateness)

    def of(records: list[dict[str, Any]], key: str, start: int) -> set[Where]:
        return {where[r["id"]] for r in records if r["k"] == key and fixed_windows(r["ts"], SIZE) == [(start, start + SIZE)]}

    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        key, start, end = doc["key"]
        e = job.explain("out", queue, offset)
        assert e.kind == "window" and e.exact
        assert e.records == of(on_time, key, start)
        assert len(e.records) == (doc["value"] if agg == "count" else bin(doc["value"]).count("1"))
        assert {c.where for c in e.late} == of([r for r, _wm in late], key, start)
        assert all("behind watermark" in c.note for c in e.late)
        assert e.watermark is not None and e.watermark.window_end == end
        assert e.watermark.watermark is None or e.watermark.watermark >= end  # None: every producer idle (the end)


@pytest.mark.unit
def test_a_window_fired_by_the_watermark_names_the_queue_that_held_the_minimum(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=2)
    # queue 0 runs ahead; queue 1 holds the watermark back until its record at T0 + 25 s
    for q, times in ((0, [1000, 2000, 30_000]), (1, [1500, 12_000, 25_000])):
        broker.send_batch("in", [json.dumps({"id": q * 10 + i, "k": "a", "ts": T0 + t, "side": ""})
                                 for i, t in enumerate(times)], queue=q)
    b = StreamBuilder(job_id("explain-wm"), shuffle_queues=1)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .window(TumblingWindow(Time.milliseconds(SIZE))).count().to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp_path, combine=False, max_records_per_queue=1, allowed_lateness_ms=0,
              idle_timeout_ms=600_000)
    first = next((q, o) for q, o, doc in sink_records(broker, "out") if doc["key"][1] == T0 - T0 % SIZE)
    e = job.explain("out", *first)
    assert e.watermark is not None and e.watermark.held_by is not None and e.watermark.held_by.startswith("in/1/")
    assert e.watermark.watermark is not None and e.watermark.watermark >= e.watermark.window_end
    assert e.records == {("in", 0, 0), ("in", 0, 1), ("in", 1, 0)}
    assert "fired in batch" in repr(e) and "<table" in e._repr_html_()


# -- joins -------------------------------------------------------------------------------------------
def join_builder(name: str, how: str, window: bool) -> StreamBuilder:
    b = StreamBuilder(name, shuffle_queues=2)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    joined = (left.join(right) if how == "inner" else left.left_join(right)).where(lambda r: r["k"]).equal_to(
        lambda r: r["k"])
    if window:
        joined = joined.window(TumblingWindow(Time.milliseconds(SIZE)))
    joined.apply(lambda x, y: [x["id"], None if y is None else y["id"]]).sink("out", JsonSerializer(with_key=True))
    return b


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 20), how=st.sampled_from(["inner", "left"]),
       window=st.booleans())
def test_a_joins_result_is_explained_by_the_two_records_that_met(
        tmp_path_factory: Any, seed: int, batch: int, how: str, window: bool) -> None:
    tmp = tmp_path_factory.mktemp("explain-join")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 25, seed, topic="left", side="L", disorder=0)
    where |= generate(broker, 25, seed + 1, topic="right", side="R", disorder=0)
    job = run(join_builder(job_id("explain-join"), how, window), broker, tmp, max_records_per_queue=batch,
              allowed_lateness_ms=60_000, idle_timeout_ms=600_000)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        e = job.explain("out", queue, offset)
        assert e.kind == ("window join" if window else "join") and e.exact
        assert e.records == {where[i] for i in doc["value"] if i is not None}, (doc, e)
        sides = {c.where: c.side for c in e.inputs}
        assert sides[where[doc["value"][0]]] == "left"


# -- keyed process functions ---------------------------------------------------------------------------
class Collect(KeyedProcessFunction[Any, Any]):
    """Forwards the ids of its key's records so far at each record, and once more from a timer
    ``delay`` ms of data time after the key's first record."""

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ids = ctx.state.get([])
        if not ids:
            ctx.register_event_time_timer(ctx.timestamp + self.delay)
        ctx.state.set([*ids, value["id"]])
        ctx.forward(key, {"ids": [*ids, value["id"]], "timer": None})

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, {"ids": ctx.state.get([]), "timer": timestamp})


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 30))
def test_a_process_functions_forward_is_explained_by_its_keys_records_and_timer(
        tmp_path_factory: Any, seed: int, batch: int) -> None:
    tmp = tmp_path_factory.mktemp("explain-process")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 50, seed, disorder=2000)
    b = StreamBuilder(job_id("explain-process"), shuffle_queues=2)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .process(Collect(8000)).to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp, max_records_per_queue=batch, allowed_lateness_ms=5000, idle_timeout_ms=600_000)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        e = job.explain("out", queue, offset)
        assert e.kind == "process" and e.exact
        assert e.records == {where[i] for i in doc["value"]["ids"]}, (doc, e)
        timers = [c for c in e.inputs if c.kind == "timer"]
        assert [t.data_time for t in timers] == ([doc["value"]["timer"]] if doc["value"]["timer"] else [])


# -- stateless, and what cannot be explained ------------------------------------------------------------
@pytest.mark.unit
def test_a_stateless_record_is_explained_by_the_one_record_it_came_from_and_bad_requests_are_named(
        tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    where = generate(broker, 20, 1)
    b = StreamBuilder(job_id("explain-map"))
    b.source("in", JsonDeserializer()).filter(lambda r: r["id"] % 3 == 0).map(lambda r: r["id"]).sink(
        "out", JsonSerializer())
    job = run(b, broker, tmp_path, max_records_per_queue=4)
    for queue, offset, value in sink_records(broker, "out"):
        e = job.explain("out", queue, offset)
        assert e.records == {where[value]} and e.kind == "stateless"  # type: ignore[index]
    with pytest.raises(ExplainError, match="no sink topic"):
        job.explain("in", 0, 0)
    with pytest.raises(ExplainError, match=r"has offsets 0\.\.\d+, not 99"):
        job.explain("out", 0, 99)
    broker.send_batch("out", ["written by someone else"], queue=0)
    with pytest.raises(ExplainError, match="no committed range of the job wrote it"):
        job.explain("out", 0, broker.end_offsets("out")[0] - 1)


@pytest.mark.unit
def test_an_explanation_whose_state_was_compacted_away_says_so(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    generate(broker, 40, 2)
    b = StreamBuilder(job_id("explain-compacted"), shuffle_queues=1)
    b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).count().to_rstream().sink(
        "out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp_path, max_records_per_queue=5)
    for state_topic in job.topology.state_topics.values():
        broker.compact(state_topic)
    queue, offset, _doc = sink_records(broker, "out")[-1]
    with pytest.raises(ExplainError, match="compacted away"):
        job.explain("out", queue, offset)


# -- on Spark, after a crash and a restart ------------------------------------------------------------
def test_a_windows_result_is_explained_after_a_crash_and_a_restart_on_spark(broker: EmbeddedBroker,
                                                                            make_job: Any) -> None:
    where = generate(broker, 60, 7, disorder=5000)
    lateness = 1500
    name = job_id("explain-spark")

    def builder() -> StreamBuilder:
        b = StreamBuilder(name, shuffle_queues=2)
        (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
         .window(TumblingWindow(Time.milliseconds(SIZE))).sum(lambda r: 1 << r["id"]).to_rstream()
         .sink("out", JsonSerializer(with_key=True)))
        return b

    props = {"max_records_per_queue": 10, "allowed_lateness_ms": lateness, "idle_timeout_ms": 600_000}
    job = make_job(builder(), **props)
    job.crash_once("after_commit")
    with pytest.raises(JobError, match="crashed|exited"):
        job.run_until_idle(progress=False)
    again = make_job(builder(), **props)  # the same job, from its checkpoint
    again.run_until_idle(progress=False)
    on_time, _late = split_late(by_queue(broker), lambda r: r["ts"], lateness)
    for queue, offset, doc in sink_records(broker, "out"):
        key, start, _end = doc["key"]
        e = again.explain("out", queue, offset)
        expected = {where[r["id"]] for r in on_time if r["k"] == key and start <= r["ts"] < start + SIZE}
        assert e.records == expected == {where[i] for i in bits(doc["value"])} and e.exact
