"""Interval joins (``join(...).where(...).equal_to(...).between(lower, upper)``) run in this process (no
Spark) against the plain reference of ``tests/support/joins.py`` on generated out-of-order input:
every pair once, a left join's unmatched lefts, state dropped once the watermark passes it, through a
restart with the local state deleted; records the join's watermark passed while a source was idle
are late; the interval is drawn in both graphs; bad input is refused with clear errors."""

from __future__ import annotations

import html
import itertools
import json
import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import DslError, EmbeddedBroker, JsonDeserializer, StreamBuilder, Time, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topics import late_topic_name
from tests.support.inprocess import produce
from tests.support.joins import (
    emitted,
    interval_join_job,
    interval_pairs,
    join_state,
    source_watermark,
    waiting_records,
)
from tests.support.reference import split_late

pytestmark = pytest.mark.unit

LATENESS = 1000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
FAST = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
T0 = 1_700_000_000_000
_RUNS = itertools.count()


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


def side_events(n: int, seed: int, side: str, keys: int, spread: int, disorder: int) -> list[dict[str, Any]]:
    """Records of one side with roughly increasing data time, some out of order (some later than the lateness)."""
    rng = random.Random(seed)
    return [{"id": f"k{rng.randrange(keys)}", "ts": T0 + i * spread // max(n, 1) - rng.randrange(disorder + 1),
             "v": f"{side}{i}"} for i in range(n)]


INTERVALS = st.tuples(st.integers(-4000, 4000), st.integers(0, 5000)).map(lambda t: (t[0], t[0] + t[1]))


@FAST
@given(how=st.sampled_from(["inner", "left"]), interval=INTERVALS, n_left=st.integers(1, 40),
       n_right=st.integers(1, 40), keys=st.integers(1, 5), disorder=st.sampled_from([0, 800, 3000]),
       seed=st.integers(0, 10_000), per_batch=st.sampled_from([5, 13, 1000]))
def test_pairs_within_the_interval_once_and_state_dropped_behind_the_watermark(
        tmp_path: Path, how: str, interval: tuple[int, int], n_left: int, n_right: int, keys: int, disorder: int,
        seed: int, per_batch: int) -> None:
    lower, upper = interval
    broker, root = fresh(tmp_path)
    lq = produce(broker, "left", side_events(n_left, seed, "L", keys, 20_000, disorder))
    rq = produce(broker, "right", side_events(n_right, seed + 1, "R", keys, 20_000, disorder))
    builder = interval_join_job("ij", how, lower, upper)
    job = InProcessJob(builder.build(), broker, root / "job", {**EXACT, "max_records_per_queue": per_batch})
    job.run_until_idle(fire_idle=False)
    lefts, late_l = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, late_r = split_late(rq, lambda e: e["ts"], LATENESS)
    operator = "INTERVAL_JOIN-5" if how == "inner" else "LEFT_INTERVAL_JOIN-5"

    # the state holds exactly the on-time records whose interval the watermark has not passed
    waiting = waiting_records(lefts, rights, lower, upper, source_watermark(LATENESS, lq, rq))
    held = sorted((side, key, ts, value["v"]) for (side, key), entries in join_state(job, operator).items()
                  for ts, value, _matched in entries)
    assert held == waiting

    job.run_until_idle()  # the end of the input: every interval passes, a left join emits what met nobody
    assert emitted(broker) == interval_pairs(lefts, rights, lower, upper, how)
    assert sum(info["operators"].get(operator, {}).get("late", 0) for info in job.infos) == len(late_l) + len(late_r)
    assert join_state(job, operator) == {}


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(how=st.sampled_from(["inner", "left"]), interval=INTERVALS, seed=st.integers(0, 10_000))
def test_a_restart_with_the_local_state_deleted_gives_every_pair_once(
        tmp_path: Path, how: str, interval: tuple[int, int], seed: int) -> None:
    """Half the input, the job stopped with records waiting, its local RocksDB deleted; the rest of
    the input and a new job object on the same folders: the waiting records come back from the state
    topic, and the output is the reference's for the whole input, each pair once."""
    lower, upper = interval
    broker, root = fresh(tmp_path)
    ls, rs = side_events(60, seed, "L", 4, 30_000, 1500), side_events(60, seed + 1, "R", 4, 30_000, 1500)
    broker.create_topic("left", queues=2)
    broker.create_topic("right", queues=2)
    for topic, records in (("left", ls[:30]), ("right", rs[:30])):
        broker.send_batch(topic, [json.dumps(e) for e in records])
    builder = interval_join_job("restart", how, lower, upper)
    job = InProcessJob(builder.build(), broker, root / "job", {**EXACT, "max_records_per_queue": 7})
    job.run_until_idle(fire_idle=False)
    operator = "INTERVAL_JOIN-5" if how == "inner" else "LEFT_INTERVAL_JOIN-5"
    assert join_state(job, operator), "nothing waiting: the restart would prove nothing"
    shutil.rmtree(job.job_dir / "state")
    for topic, records in (("left", ls[30:]), ("right", rs[30:])):
        broker.send_batch(topic, [json.dumps(e) for e in records])
    again = InProcessJob(builder.build(), broker, job.job_dir, {**EXACT, "max_records_per_queue": 7})
    again.run_until_idle()
    assert sum(info["replayed_keys"] for info in again.infos) > 0
    per_queue = {t: {q: [json.loads(m.body) for m in broker.read(t, q)] for q in range(2)} for t in ("left", "right")}
    lefts, _ = split_late(per_queue["left"], lambda e: e["ts"], LATENESS)
    rights, _ = split_late(per_queue["right"], lambda e: e["ts"], LATENESS)
    assert emitted(broker) == interval_pairs(lefts, rights, lower, upper, how)


def test_a_record_behind_the_join_s_watermark_after_its_queue_was_idle_is_late(tmp_path: Path) -> None:
    """The end-of-input flush treats every queue as idle and drops every waiting record; a record
    that then comes on a queue that had been silent, at a data time the join's watermark already
    passed, would miss partners that were dropped: it is late (``interval passed``), not joined."""
    broker, root = fresh(tmp_path)
    broker.create_topic("left", queues=2)
    broker.create_topic("right", queues=1)
    broker.send_batch("left", [json.dumps({"id": "a", "ts": T0 + 1000, "v": "L0"})], queue=0)
    broker.send_batch("right", [json.dumps({"id": "a", "ts": T0 + 1500, "v": "R0"})], queue=0)
    job = InProcessJob(interval_join_job("idle", "left", -1000, 1000).build(), broker, root / "job", EXACT)
    job.run_until_idle()
    assert emitted(broker) == [("a", ["L0", "R0"])]
    broker.send_batch("left", [json.dumps({"id": "a", "ts": T0 + 1200, "v": "L1"})], queue=1)
    job.run_until_idle()
    assert emitted(broker) == [("a", ["L0", "R0"])]  # L1 would have met R0, dropped: not a half answer
    late = [json.loads(m.body) for m in broker.read(late_topic_name("idle"))]
    assert [(r["data_time"], r["cause"]) for r in late] == [(T0 + 1200, "interval passed")]


def test_the_interval_is_drawn_in_both_graphs_and_named_in_the_topology() -> None:
    topo = interval_join_job("drawn", "inner", Time.minutes(-5), Time.minutes(5)).build()
    shown = "between Time.minutes(-5) and Time.minutes(5)"
    assert shown in html.unescape(topo.logical_dot())
    assert shown in html.unescape(topo.real_dot())
    assert "interval_join" in topo.describe()


def _joined() -> Any:
    b = StreamBuilder("bad")
    left = b.source("l", JsonDeserializer())
    right = b.source("r", JsonDeserializer())
    return left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"])


@pytest.mark.parametrize(("call", "message"), [
    (lambda j: j.between(Time.minutes(5), Time.minutes(-5)), "lower <= upper"),
    (lambda j: j.between("5 minutes", 1000), "lower bound must be a duration"),
    (lambda j: j.between(0, 1.5), "upper bound must be whole milliseconds"),
    (lambda j: j.between(True, 10), "lower bound must be a duration"),
    (lambda j: j.window(TumblingWindow(1000)).between(0, 10), "windowed or an interval join"),
    (lambda j: j.between(0, 10).window(TumblingWindow(1000)), "windowed or an interval join"),
])
def test_bad_input_is_refused_with_a_clear_error(call: Any, message: str) -> None:
    with pytest.raises(DslError, match=message):
        call(_joined())


def test_between_takes_plain_milliseconds_and_a_left_join_makes_a_left_interval_join() -> None:
    b = StreamBuilder("ms")
    left, right = b.source("l", JsonDeserializer()), b.source("r", JsonDeserializer())
    left.left_join(right).where(len).equal_to(len).between(-250, 0).apply(lambda a, c: (a, c)).sink("out")
    [node] = [n for n in b.build().nodes if n.kind == "left_interval_join"]
    assert (node.params["lower"], node.params["upper"]) == (-250, 0)
