"""``.late()`` on windowed joins and interval joins, run in this process (no Spark) against the plain
reference on generated out-of-order input of two sides: the late stream holds exactly the records the
reference drops as late (each with its side), each once, the same as the join's rows of the late-data
topic, also through a retried range, a crash after the commit and a restart with the local state
deleted; the join's own results do not change; records a window or interval already passed while a
source was idle come out with their cause; both graphs draw it; wrong use says what to do."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import DslError, EmbeddedBroker, JsonDeserializer, LateRecord, StreamBuilder, TumblingWindow
from rstream.processors.base import LateCause
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topics import late_topic_name
from tests.support.inprocess import run_through_a_crash_a_retry_and_lost_state
from tests.support.joins import (
    emitted,
    interval_join_job,
    interval_pairs,
    join_job,
    join_late_stream,
    reference_join_late,
    windowed_pairs,
)
from tests.support.reference import split_late

pytestmark = pytest.mark.unit

LATENESS = 1000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}  # no idleness mid-run
T0 = 1_700_000_000_000
WINDOW = 4000
FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_RUNS = itertools.count()

#: (kind, how, lower, upper): a windowed join (tumbling ``WINDOW``) or an interval join.
JOINS = st.one_of(
    st.tuples(st.just("window"), st.sampled_from(["inner", "left"]), st.just(0), st.just(0)),
    st.tuples(st.just("interval"), st.sampled_from(["inner", "left"]), st.integers(-3000, 3000),
              st.integers(0, 4000)).map(lambda t: (t[0], t[1], t[2], t[2] + t[3])),
)


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("left", queues=2)
    broker.create_topic("right", queues=2)
    return broker, root


def side_events(n: int, seed: int, side: str, keys: int, spread: int, disorder: int) -> list[dict[str, Any]]:
    """Records of one side with roughly increasing data time, some out of order (some later than the lateness)."""
    rng = random.Random(seed)
    return [{"id": f"k{rng.randrange(keys)}", "ts": T0 + i * spread // max(n, 1) - rng.randrange(disorder + 1),
             "v": f"{side}{i}"} for i in range(n)]


def builder_of(join: tuple[str, str, int, int], name: str) -> StreamBuilder:
    kind, how, lower, upper = join
    if kind == "window":
        return join_job(name, how, TumblingWindow(WINDOW), late=True)
    return interval_join_job(name, how, lower, upper, late=True)


def join_operator(builder: StreamBuilder) -> str:
    [node] = [n for n in builder.graph.nodes if "JOIN" in n.name]
    return node.name


def per_queue(broker: EmbeddedBroker, topic: str) -> dict[int, list[dict[str, Any]]]:
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(broker.topic(topic).queues)}


def reference_pairs(join: tuple[str, str, int, int], broker: EmbeddedBroker) -> list[tuple[Any, Any]]:
    kind, how, lower, upper = join
    lefts, _ = split_late(per_queue(broker, "left"), lambda e: e["ts"], LATENESS)
    rights, _ = split_late(per_queue(broker, "right"), lambda e: e["ts"], LATENESS)
    if kind == "window":
        return windowed_pairs(lefts, rights, WINDOW, how)
    return interval_pairs(lefts, rights, lower, upper, how)


def late_topic_rows(broker: EmbeddedBroker, job: str) -> list[tuple[Any, ...]]:
    """The join's rows of the late-data topic, as ``join_late_stream`` gives its records (key and value
    are ``repr`` text there, so both sides are compared as such; the topic has no side)."""
    topic = late_topic_name(job)
    if not broker.has_topic(topic):
        return []
    rows = [json.loads(m.body) for m in broker.read(topic)]
    return sorted((r["key"], r["value"], r["data_time"], r["watermark"], r["cause"], r["operator"]) for r in rows)


def as_rows(stream: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((repr(k), repr(json.loads(v)), t, wm, cause, op) for _side, k, v, t, wm, cause, op in stream)


def send(broker: EmbeddedBroker, lefts: list[dict[str, Any]], rights: list[dict[str, Any]]) -> None:
    broker.send_batch("left", [json.dumps(e) for e in lefts])
    broker.send_batch("right", [json.dumps(e) for e in rights])


@FAST
@given(join=JOINS, n_left=st.integers(1, 40), n_right=st.integers(1, 40), keys=st.integers(1, 4),
       disorder=st.sampled_from([0, 800, 3000]), seed=st.integers(0, 10_000), per_batch=st.sampled_from([4, 11, 1000]))
def test_the_late_stream_is_exactly_what_the_reference_drops_as_late(
        tmp_path: Path, join: tuple[str, str, int, int], n_left: int, n_right: int, keys: int, disorder: int,
        seed: int, per_batch: int) -> None:
    broker, root = fresh(tmp_path)
    send(broker, side_events(n_left, seed, "L", keys, 20_000, disorder),
         side_events(n_right, seed + 1, "R", keys, 20_000, disorder))
    builder = builder_of(join, "jl")
    job = InProcessJob(builder.build(), broker, root / "job", {**EXACT, "max_records_per_queue": per_batch})
    job.run_until_idle(fire_idle=False)
    job.run_until_idle()
    operator = join_operator(builder)
    stream = join_late_stream(broker)
    assert stream == reference_join_late(per_queue(broker, "left"), per_queue(broker, "right"), LATENESS, operator)
    assert as_rows(stream) == late_topic_rows(broker, "jl")
    assert sum(info["operators"].get(operator, {}).get("late", 0) for info in job.infos) == len(stream)
    assert emitted(broker) == reference_pairs(join, broker)  # the join's results are those without .late()


@pytest.mark.parametrize("join", [("window", "left", 0, 0), ("interval", "inner", -1500, 2500)])
def test_late_records_come_out_once_through_a_retry_a_crash_after_the_commit_and_lost_state(
        tmp_path: Path, join: tuple[str, str, int, int]) -> None:
    """A range run again after it committed is skipped (its tag); a task that died after its commit,
    before its local state write, leaves stale state that is replayed; a restart with the local state
    deleted replays it all. The late stream and the results are those of one clean run, and the reference's."""
    ls, rs = side_events(160, 3, "L", 4, 40_000, 2500), side_events(140, 4, "R", 4, 40_000, 2500)
    steps = [(ls[i:i + 32], rs[i:i + 28]) for i in range(0, 160, 32)]
    props = {**EXACT, "max_records_per_queue": 9}

    def clean() -> tuple[list[Any], list[Any]]:
        broker, root = fresh(tmp_path)
        job = InProcessJob(builder_of(join, "once").build(), broker, root / "job", props)
        for lefts, rights in steps:
            send(broker, lefts, rights)
            job.run_until_idle(fire_idle=False)
        job.run_until_idle()
        return emitted(broker), join_late_stream(broker)

    want_results, want_late = clean()
    broker, root = fresh(tmp_path)
    builder = builder_of(join, "once")
    job = InProcessJob(builder.build(), broker, root / "job", props)
    run_through_a_crash_a_retry_and_lost_state(job, steps, lambda step: send(broker, *step), root, props)
    late = join_late_stream(broker)
    assert late == want_late and late, "the generated input has late records on both sides"
    assert {side for side, *_rest in late} == {"left", "right"}
    assert late == reference_join_late(per_queue(broker, "left"), per_queue(broker, "right"), LATENESS,
                                       join_operator(builder))
    assert as_rows(late) == late_topic_rows(broker, "once")
    assert emitted(broker) == want_results == reference_pairs(join, broker)


@pytest.mark.parametrize(("join", "cause"), [(("window", "inner", 0, 0), "window fired"),
                                            (("interval", "left", -1000, 1000), "interval passed")])
def test_a_record_for_what_closed_while_its_queue_was_idle_is_in_the_late_stream(
        tmp_path: Path, join: tuple[str, str, int, int], cause: str) -> None:
    """After the end-of-input flush (every queue idle), a right record on a queue that had been silent,
    at a data time the join already closed, is late with that cause and its side."""
    broker, root = fresh(tmp_path)
    broker.send_batch("left", [json.dumps({"id": "a", "ts": T0 + 1000, "v": "L0"})], queue=0)
    broker.send_batch("right", [json.dumps({"id": "a", "ts": T0 + 1500, "v": "R0"})], queue=0)
    builder = builder_of(join, "idle")
    job = InProcessJob(builder.build(), broker, root / "job", EXACT)
    job.run_until_idle()
    assert join_late_stream(broker) == []
    late_one = {"id": "a", "ts": T0 + 1200, "v": "R1"}
    broker.send_batch("right", [json.dumps(late_one)], queue=1)
    job.run_until_idle()
    [(side, key, value, data_time, _wm, got_cause, operator)] = join_late_stream(broker)
    assert (side, key, json.loads(value), data_time, got_cause, operator) == (
        "right", "a", late_one, T0 + 1200, cause, join_operator(builder))
    assert emitted(broker) == [("a", ["L0", "R0"])]


def test_graphs_draw_the_late_stream_of_a_join() -> None:
    for builder in (join_job("drawn", "inner", TumblingWindow(WINDOW), late=True),
                    interval_join_job("drawn", "left", -1000, 1000, late=True)):
        join = join_operator(builder)
        [late] = [n for n in builder.graph.nodes if n.kind == "late"]
        assert [n.name for n in builder.graph.nodes if late in n.children] == [join]
        topo = builder.build()
        logical = topo.logical_dot()
        assert f'tooltip="{late.name}"' in logical and "[label=late style=dashed]" in logical
        assert f"{late.name} (late)" in topo.describe()
        real = topo.real_dot()
        assert late.name in real and "[label=late style=dashed]" in real
    plain = interval_join_job("drawn", "left", -1000, 1000).build()
    assert "late" not in plain.real_dot()


def test_wrong_use_says_what_to_do() -> None:
    b = StreamBuilder("wrong")
    left = b.source("left", JsonDeserializer())
    right = b.source("right", JsonDeserializer())
    unwindowed = left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"]).apply(lambda x, y: x)
    with pytest.raises(DslError, match="no window.*latest value per key"):
        unwindowed.late()
    with pytest.raises(DslError, match="windowed or interval join"):
        left.map(lambda e: e).late()
    table = right.key_by(lambda e: e["id"]).to_table()
    with pytest.raises(DslError, match="windowed or interval join"):
        left.join(table).where(lambda e: e["id"]).apply(lambda x, y: x).late()


def test_a_join_s_late_record_says_its_side() -> None:
    r = LateRecord("k1", {"ts": 5}, 5, 2005, LateCause.BEHIND_WATERMARK, "why", "JOIN-5", "right")
    assert r.side == "right" and r.late_ms == 2000
    assert str(r) == "{'ts': 5} at 5: behind watermark, watermark 2005 (JOIN-5, right)"
    assert LateRecord("u", 1, 5, 6, LateCause.WINDOW_FIRED, "why", "COUNT-5").side is None
