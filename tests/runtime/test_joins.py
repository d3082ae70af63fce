"""Joins on Spark against the reference: JoinWindow, JoinWithoutWindow, left joins, two streams
from the same topic, an interval join (its state, trace and late records), and ``.late()`` of a
windowed and an interval join."""

from __future__ import annotations

import json
import random
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow
from tests.support.jobs import job_id
from tests.support.joins import (
    emitted,
    events,
    interval_join_job,
    interval_pairs,
    join_job,
    join_late_stream,
    reference_join_late,
    source_watermark,
    waiting_records,
    windowed_pairs,
)
from tests.support.reference import split_late
from tests.support.windows import EXACT, LATENESS, produce


def test_join_window(broker: EmbeddedBroker, make_job: Any) -> None:  # JoinWindow: inner join in a 10 s window
    lq = produce(broker, "left", events(120, 1, "L"))
    rq = produce(broker, "right", events(90, 2, "R"))
    job = make_job(join_job(job_id("jw"), "inner", TumblingWindow(Time.seconds(10))), **EXACT)
    job.run_until_idle()
    lefts, late_l = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, late_r = split_late(rq, lambda e: e["ts"], LATENESS)
    assert emitted(broker) == windowed_pairs(lefts, rights, 10_000, "inner")
    assert len(job.late_records()) == len(late_l) + len(late_r) > 0


def test_left_join_window_emits_unmatched_left_records_when_the_window_closes(broker: EmbeddedBroker, make_job: Any) -> None:
    lq = produce(broker, "left", events(80, 3, "L", keys=10))
    rq = produce(broker, "right", events(30, 4, "R", keys=10))
    make_job(join_job(job_id("ljw"), "left", TumblingWindow(Time.seconds(10))), **EXACT).run_until_idle()
    lefts, _ = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, _ = split_late(rq, lambda e: e["ts"], LATENESS)
    got = emitted(broker)
    assert got == windowed_pairs(lefts, rights, 10_000, "left")
    assert any(v[1] is None for _, v in got) and any(v[1] is not None for _, v in got)


def test_two_streams_from_the_same_topic(broker: EmbeddedBroker, make_job: Any) -> None:
    mixed = events(60, 5, "L") + events(60, 6, "R")
    random.Random(7).shuffle(mixed)
    per_queue = produce(broker, "events", mixed)
    make_job(join_job(job_id("self"), "inner", TumblingWindow(Time.seconds(10)), same_topic=True), **EXACT).run_until_idle()
    # each side's watermark counts the records that reach its shuffle (after its filter)
    lefts, _ = split_late({q: [e for e in rs if e["type"] == "L"] for q, rs in per_queue.items()}, lambda e: e["ts"], LATENESS)
    rights, _ = split_late({q: [e for e in rs if e["type"] == "R"] for q, rs in per_queue.items()}, lambda e: e["ts"], LATENESS)
    assert emitted(broker) == windowed_pairs(lefts, rights, 10_000, "inner")


def test_join_without_window(broker: EmbeddedBroker, make_job: Any) -> None:  # JoinWithoutWindow
    broker.create_topic("left", queues=2)
    broker.create_topic("right", queues=2)
    rights = [{"id": "a", "v": "R1"}, {"id": "b", "v": "R2"}, {"id": "a", "v": "R3"}]
    for r in rights:  # one at a time, so "latest per key" is well defined
        broker.send("right", json.dumps(dict(r, ts=0)), queue=0)
    name = job_id("nowin")
    make_job(join_job(name, "inner", None)).run_until_idle()
    lefts = [{"id": "a", "v": "L1"}, {"id": "c", "v": "L2"}, {"id": "b", "v": "L3"}]
    broker.send_batch("left", [json.dumps(dict(e, ts=0)) for e in lefts])
    make_job(join_job(name, "inner", None)).run_until_idle()
    latest = {r["id"]: r["v"] for r in rights}
    assert emitted(broker) == sorted((e["id"], [e["v"], latest[e["id"]]]) for e in lefts if e["id"] in latest)


def test_left_join_without_window_emits_at_once(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("left", queues=1)
    broker.create_topic("right", queues=1)
    broker.send("right", json.dumps({"id": "a", "v": "R1", "ts": 0}))
    name = job_id("leftnow")
    make_job(join_job(name, "left", None)).run_until_idle()
    broker.send_batch("left", [json.dumps({"id": k, "v": f"L-{k}", "ts": 0}) for k in ("a", "z")])
    make_job(join_job(name, "left", None)).run_until_idle()
    assert emitted(broker) == [("a", ["L-a", "R1"]), ("z", ["L-z", None])]


def test_left_interval_join_against_the_reference_with_its_state_and_trace(broker: EmbeddedBroker, make_job: Any) -> None:
    """Pairs with ``-2 s <= right - left <= 3 s`` and the lefts that met nobody, as the reference
    says; while the input is not over, ``job.state()`` holds exactly the records whose interval the
    watermark has not passed, and ``job.trace`` follows a left record into the join's state and to
    the sink; at the end nothing is left waiting."""
    lq = produce(broker, "left", events(120, 13, "L", keys=5))
    rq = produce(broker, "right", events(100, 14, "R", keys=5))
    job = make_job(interval_join_job(job_id("ij"), "left", Time.seconds(-2), Time.seconds(3)), **EXACT)
    job.run_until_idle(fire_idle=False)
    lefts, late_l = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, late_r = split_late(rq, lambda e: e["ts"], LATENESS)
    state = job.state("LEFT_INTERVAL_JOIN-5")
    held = sorted((side, key, ts, value["v"]) for (side, key), entries in zip(state["key"], state["value"])
                  for ts, value, _matched in entries)
    assert held == waiting_records(lefts, rights, -2000, 3000, source_watermark(LATENESS, lq, rq))
    assert 0 < len(held) < len(lefts) + len(rights)

    trace = job.trace("left", 0, 0).to_pandas()
    assert "LEFT_INTERVAL_JOIN-5" in set(trace[trace["kind"] == "state"]["operator"])

    job.run_until_idle()
    got = emitted(broker)
    assert got == interval_pairs(lefts, rights, -2000, 3000, "left")
    assert any(v[1] is None for _, v in got) and any(v[1] is not None for _, v in got)
    assert len(job.late_records()) == len(late_l) + len(late_r) > 0
    assert job.state("LEFT_INTERVAL_JOIN-5").empty


def test_the_late_records_of_a_windowed_and_an_interval_join_as_streams(broker: EmbeddedBroker, make_job: Any) -> None:
    """``.late()`` of a windowed join and of an interval join in one job on Spark: each late sink holds
    exactly the records the reference drops as late, with their side, once; the pairs are unchanged."""
    lq = produce(broker, "left", events(120, 1, "L"))
    rq = produce(broker, "right", events(90, 2, "R"))
    b = StreamBuilder(job_id("jlate"), shuffle_queues=3)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    pair = (lambda lv, rv: [lv["v"], rv["v"]])  # noqa: E731
    windowed = (left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"])
                .window(TumblingWindow(Time.seconds(10))).apply(pair))
    interval = (left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"])
                .between(Time.seconds(-2), Time.seconds(3)).apply(pair))
    windowed.sink("joined", JsonSerializer(with_key=True))
    windowed.late().sink("late", JsonSerializer(with_key=True))
    interval.sink("paired", JsonSerializer(with_key=True))
    interval.late().sink("late-paired", JsonSerializer(with_key=True))
    job = make_job(b, **EXACT)
    job.run_until_idle()
    lefts, _ = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, _ = split_late(rq, lambda e: e["ts"], LATENESS)
    assert emitted(broker) == windowed_pairs(lefts, rights, 10_000, "inner")
    assert emitted(broker, "paired") == interval_pairs(lefts, rights, -2000, 3000, "inner")
    for topic, node in (("late", windowed.node), ("late-paired", interval.node)):
        late = join_late_stream(broker, topic)
        assert late == reference_join_late(lq, rq, LATENESS, node.name)
        assert late, "the generated input has late records"
    assert len(job.late_records()) == 2 * len(join_late_stream(broker, "late"))
