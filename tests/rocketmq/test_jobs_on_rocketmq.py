"""rstream jobs on a real Apache RocketMQ broker (a ``LocalRocketMQ`` of the test session), checked
against plain Python references: word count, windows with late data and a restart that lost its
local state, a windowed join, the whole job killed with SIGKILL again and again, and the broker
process killed and restarted while the job runs. Exact every time: every output record once."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from rstream import Time, TumblingWindow
from tests.support.jobs import (
    WORDCOUNT_TO_KILL,
    assert_exact_counts,
    broker_arg,
    crash_then_finish,
    job_id,
    repeated_counts,
    sink_values,
    wordcount,
)
from tests.support.joins import emitted, events, join_job, windowed_pairs
from tests.support.processes import kill_when
from tests.support.reference import split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results, windowed

pytestmark = pytest.mark.e2e


def _sentences(n: int, seed: int = 0) -> list[str]:
    return [f"w{(i * 7 + seed) % 11} w{(i + seed) % 5} w{i % 3}" for i in range(n)]


def test_word_count_is_exact(rocket_broker: Any, make_rocket_job: Any) -> None:
    text = _sentences(300)
    rocket_broker.create_topic("sentences", queues=3)
    rocket_broker.send_batch("sentences", text)
    job = make_rocket_job(wordcount(job_id("rwc")), max_records_per_queue=40)
    job.run_until_idle()
    assert_exact_counts(rocket_broker, "counts", text)
    state = job.state()
    assert dict(zip(state["key"], state["value"])) == {w: int(vs[-1]) for w, vs in
                                                       sink_values(rocket_broker, "counts").items()}
    assert len(job.progress) > 1 and job.state_diff(0, len(job.progress) - 1) is not None


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_task_killed_between_its_sink_write_and_its_commit(rocket_broker: Any, make_rocket_job: Any,
                                                            guarantee: str) -> None:
    """At least once, the dead range's sink records are read back twice from RocketMQ (they were sent
    without an attempt, so they count); exactly once, every running count once."""
    text = _sentences(40)
    crash_then_finish(rocket_broker, make_rocket_job, text, guarantee, "before_commit")
    if guarantee == "at_least_once":
        assert repeated_counts(rocket_broker, "counts", text) > 0
    else:
        assert_exact_counts(rocket_broker, "counts", text)


def test_windows_with_late_data_through_a_restart_that_lost_local_state(rocket_broker: Any,
                                                                       make_rocket_job: Any) -> None:
    stream = clicks(240, seed=5)
    produce(rocket_broker, "clicks", stream[:120])
    name = job_id("rwin")
    first = make_rocket_job(windowed(name, TumblingWindow(Time.seconds(5)), "count"), max_records_per_queue=30,
                            **EXACT)
    first.run_until_idle(fire_idle=False)
    first.delete_local_state()
    rocket_broker.send_batch("clicks", [json.dumps(e) for e in stream[120:]])
    per_queue = {q: [json.loads(m.body) for m in rocket_broker.read("clicks", q)] for q in range(2)}
    second = make_rocket_job(windowed(name, TumblingWindow(Time.seconds(5)), "count"), max_records_per_queue=30,
                             **EXACT)
    second.run_until_idle()
    assert sum(p.replayed_keys for p in second.progress) > 0  # its state came back from the state topic
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    assert results(rocket_broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
    assert len(second.late_records()) == len(late) > 0


def test_a_windowed_join_is_exact(rocket_broker: Any, make_rocket_job: Any) -> None:
    lq = produce(rocket_broker, "left", events(100, 1, "L"))
    rq = produce(rocket_broker, "right", events(80, 2, "R"))
    job = make_rocket_job(join_job(job_id("rjoin"), "inner", TumblingWindow(Time.seconds(10))), **EXACT)
    job.run_until_idle()
    lefts, late_l = split_late(lq, lambda e: e["ts"], LATENESS)
    rights, late_r = split_late(rq, lambda e: e["ts"], LATENESS)
    assert emitted(rocket_broker) == windowed_pairs(lefts, rights, 10_000, "inner")
    assert len(job.late_records()) == len(late_l) + len(late_r)




def test_the_whole_job_killed_again_and_again_then_finished(rocket_broker: Any, make_rocket_job: Any,
                                                            tmp_path: Path) -> None:
    """SIGKILL of the driver, its JVM and its Python workers, mid-batch, twice over; each run resumes
    where the last commit left off; the last one finishes: every count exactly once. (On two brokers, one
    of them away meanwhile: ``test_cluster.py``.)"""
    text = _sentences(450, seed=3)
    rocket_broker.create_topic("sentences", queues=2)
    rocket_broker.send_batch("sentences", text)
    name = job_id("rcrash")
    data_dir = tmp_path / "data"
    reached = 0
    for round_ in range(2):
        def mid_run(before: int = reached) -> bool:
            tag = rocket_broker.last_commit(name, "sentences", 0)
            return tag is not None and tag.end_offset >= before + 30

        kill_when(["-c", WORDCOUNT_TO_KILL, broker_arg(rocket_broker), str(data_dir), str(tmp_path / f"tmp{round_}"),
                   name], mid_run, timeout=180)
        reached = rocket_broker.last_commit(name, "sentences", 0).end_offset
    assert reached < len(text) // 2  # killed before it was done
    make_rocket_job(wordcount(name), max_records_per_queue=1000).run_until_idle()
    assert_exact_counts(rocket_broker, "counts", text)


def test_the_broker_process_killed_and_restarted_while_the_job_runs(local_rocketmq: Any, rocket_broker: Any,
                                                                    make_rocket_job: Any) -> None:
    """The broker's JVM gets SIGKILL between two rounds of input while the job is started; it comes
    back on the same store and ports; the job goes on (its requests wait for the broker, an append
    cut off mid-way is aborted and appended anew): nothing lost, nothing doubled."""
    rocket_broker.create_topic("sentences", queues=2)
    job = make_rocket_job(wordcount(job_id("rkill")), max_records_per_queue=50, trigger_interval_ms=50)
    job.start()
    sent: list[str] = []
    for round_ in range(4):
        batch = _sentences(120, seed=round_)
        rocket_broker.send_batch("sentences", batch)
        sent += batch
        if round_ == 1:
            time.sleep(0.5)  # the job is mid-run
            local_rocketmq.kill_broker()
            time.sleep(1.0)
            local_rocketmq.start_broker()
    job.run_until_idle(timeout=300)
    assert_exact_counts(rocket_broker, "counts", sent)
