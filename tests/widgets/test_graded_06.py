"""Notebook 06's graded exercises without Spark: Exercise 2's debug check (two topics through a crash, each
review once) and Exercise 3's process check (Spark's record of lost executors, batches after the loss, the
revenue per customer against the broker's ``orders``), judged from a real embedded broker against stand-ins
for a job and for Spark's status store."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from rstream import EmbeddedBroker
from rstream.runtime.commit import crash_file
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.widgets import graded
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG
from rstream.widgets.graded import EX06_BROKEN, executors_lost, exercises_of
from tests.support.graded import StandIn

pytestmark = pytest.mark.unit

REVIEWS = ["the mug came fast", "my mug came late", "a lamp broke", "my mug broke"]
ORDERS = [{"user": "ann", "amount": 12}, {"user": "bob", "amount": 45}, {"user": "ann", "amount": 30},
          {"user": "ann", "amount": 12}]


class _Option:
    def __init__(self, value: Any) -> None:
        self.value = value

    def isDefined(self) -> bool:  # noqa: N802 (py4j's Scala names)
        return self.value is not None

    def get(self) -> Any:
        return self.value


class _Summary:
    """One ``v1.ExecutorSummary`` as py4j shows it."""

    def __init__(self, executor_id: str, removed_ms: int | None, reason: str = "Command exited with code 137"):
        self._id, self._removed = executor_id, removed_ms
        self._reason = reason

    def id(self) -> str:
        return self._id

    def isActive(self) -> bool:  # noqa: N802
        return self._removed is None

    def removeTime(self) -> _Option:  # noqa: N802
        return _Option(None if self._removed is None else SimpleNamespace(getTime=lambda: self._removed))

    def removeReason(self) -> _Option:  # noqa: N802
        return _Option(None if self._removed is None else self._reason)


def spark_with(executors: list[_Summary], cores: int = 2) -> Any:
    listed = SimpleNamespace(size=lambda: len(executors), apply=lambda i: executors[i])
    store = SimpleNamespace(executorList=lambda active_only: listed)
    context = SimpleNamespace(_jsc=SimpleNamespace(sc=lambda: SimpleNamespace(statusStore=lambda: store)),
                              getConf=lambda: {"spark.cores.max": str(cores)}, defaultParallelism=cores)
    return SimpleNamespace(sparkContext=context)


def batch(batch_id: int, committed_ms: int, executor: str, orders_in: int = 0) -> BatchProgress:
    queue = QueueProgress(topic="orders", queue=0, start=0, end=orders_in, records_in=orders_in,
                          records_out={}, replayed_keys=0, state_keys=None, changed_keys=0, error_count=0,
                          printed=[], operators={}, millis=1.0, skipped=False, batch_id=batch_id,
                          committed_ms=committed_ms, executor=executor)
    return BatchProgress.of(batch_id, [queue])


class Survivor:
    """What Exercise 3's check reads of a job: no Spark."""

    def __init__(self, broker: EmbeddedBroker, spark: Any, history: list[BatchProgress],
                 totals: dict[str, int], job_id: str = "revenue", left: int = 0) -> None:
        self.job_id, self.broker, self.spark, self._history = job_id, broker, spark, history
        self.topology = SimpleNamespace(source_topics=["orders"], sink_topics=["revenue"],
                                        shuffle_topics={"revenue-shuffle": 4})
        self._totals, self._left = totals, left

    def history(self) -> list[BatchProgress]:
        return self._history

    def lag(self) -> pd.DataFrame:
        return pd.DataFrame({"queue": [0], "lag": [self._left]})

    def state(self) -> pd.DataFrame:
        return pd.DataFrame({"key": list(self._totals), "value": list(self._totals.values())})


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    """``orders``, the sink of a revenue job that summed them once (every running total once), and
    ``reviews``."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("orders", queues=1)
    broker.send_batch("orders", [json.dumps(o) for o in ORDERS], progress=False)
    broker.create_topic("revenue", queues=1)
    running: Counter[str] = Counter()
    bodies = []
    for order in ORDERS:
        running[order["user"]] += order["amount"]
        bodies.append(json.dumps({"key": order["user"], "value": running[order["user"]]}))
    broker.send_batch("revenue", bodies, progress=False)
    broker.create_topic("reviews", queues=1)
    broker.send_batch("reviews", REVIEWS, progress=False)
    return broker


@pytest.fixture(autouse=True)
def no_credit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graded, "_CREDITED", {})


def totals() -> dict[str, int]:
    out: Counter[str] = Counter()
    for order in ORDERS:
        out[order["user"]] += order["amount"]
    return dict(out)


TWO_LOSSES = [_Summary("driver", None), _Summary("0", 1_000), _Summary("1", 5_000), _Summary("2", None)]
RAN_PAST = [batch(1, 500, "executor-0", 2), batch(2, 3_000, "executor-1", 1), batch(3, 6_000, "executor-2", 3)]


def test_spark_s_record_gives_the_lost_executors_oldest_first() -> None:
    lost = executors_lost(spark_with([_Summary("1", 9_000), _Summary("driver", None), _Summary("0", 2_000)]))
    assert [(e.executor, e.lost_ms) for e in lost] == [("executor-0", 2_000), ("executor-1", 9_000)]
    assert "137" in lost[0].reason


def test_a_job_through_a_second_loss_with_exact_totals_is_right_and_stays_right(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    job = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, totals())
    found = ex.check("Exercise 3", job)
    assert found.verdict == RIGHT, found.message
    assert "executor-1" in found.message
    assert ex.check("Exercise 3", job).verdict == RIGHT  # checking again, nothing changed
    # one more round counted with no new loss: that loss was counted already
    job._history = [*RAN_PAST, batch(4, 7_000, "executor-2", 2)]
    again = ex.check("Exercise 3", job)
    assert again.verdict == WRONG and "counts once" in again.message


@pytest.mark.parametrize("answer", [None, ...])
@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
def test_no_answer_is_not_yet(answer: Any, exercise: str) -> None:
    assert exercises_of("06").check(exercise, answer).verdict == NOT_YET


@pytest.mark.parametrize("answer", [Counter({"ann": 54}), {"ann": 54, "bob": 45}, 7])
@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
def test_results_typed_in_are_refused(answer: Any, exercise: str) -> None:
    found = exercises_of("06").check(exercise, answer)
    assert found.verdict == WRONG and "A job" in found.message


def test_only_the_notebook_s_own_kill_is_not_enough(broker: EmbeddedBroker) -> None:
    job = Survivor(broker, spark_with(TWO_LOSSES[:2]), RAN_PAST, totals())
    found = exercises_of("06").check("Exercise 3", job)
    assert found.verdict == WRONG and "Kill another" in found.message


def test_a_loss_the_job_did_not_run_past_is_refused(broker: EmbeddedBroker) -> None:
    job = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST[:2], totals())
    found = exercises_of("06").check("Exercise 3", job)
    assert found.verdict == WRONG and "has read no new orders since" in found.message
    idle_after = [*RAN_PAST[:2], batch(3, 6_000, "executor-2", 0)]  # a batch after it, but of nothing new
    assert exercises_of("06").check("Exercise 3", Survivor(broker, spark_with(TWO_LOSSES), idle_after,
                                                           totals())).verdict == WRONG


def test_a_job_that_never_ran_or_ran_only_after_the_loss_is_refused(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    assert "has not run" in ex.check("Exercise 3", Survivor(broker, spark_with(TWO_LOSSES), [], totals())).message
    late_start = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST[2:], totals(), job_id="new")
    assert "no batch before" in ex.check("Exercise 3", late_start).message


def test_totals_that_differ_from_the_orders_or_records_left_are_refused(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    off = {**totals(), "bob": 90}
    found = ex.check("Exercise 3", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, off))
    assert found.verdict == WRONG and "'bob'" in found.message
    left = ex.check("Exercise 3", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, totals(), left=4))
    assert left.verdict == WRONG and "4 records left" in left.message


def test_a_total_written_twice_across_the_kill_is_refused(broker: EmbeddedBroker) -> None:
    broker.send_batch("revenue", [json.dumps({"key": "bob", "value": 45})], progress=False)  # a rerun wrote again
    found = exercises_of("06").check("Exercise 3", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, totals()))
    assert found.verdict == WRONG and "written twice" in found.message


# -- Exercise 2: the search index and the support queue, each review once through a crash ------------------

def feed(broker: EmbeddedBroker, tmp_path: Path, job_id: str, index: list[str], support: list[str],
         support_is_a_sink: bool = True, guarantee: str = "exactly_once", crashed: bool = True) -> StandIn:
    """A stand-in for a support feed whose topics hold ``index`` and ``support`` (JSON strings), its crash
    armed and taken (``crashed``), or never armed."""
    for topic, texts in ((f"{job_id}-out", index), (f"{job_id}-broke", support)):
        broker.create_topic(topic, queues=1)
        broker.send_batch(topic, [json.dumps(t) for t in texts], progress=False)
    sinks = [f"{job_id}-out", *([f"{job_id}-broke"] if support_is_a_sink else [])]
    job = StandIn(broker, job_id, "reviews", sinks)
    job.properties = SimpleNamespace(processing_guarantee=guarantee)  # type: ignore[assignment]
    job.job_dir = str(tmp_path / "jobs" / job_id)  # type: ignore[attr-defined]
    if crashed:
        Path(crash_file(job.job_dir, "before_commit")).parent.mkdir(parents=True)  # type: ignore[attr-defined]
    return job


UPPER = [r.upper() for r in REVIEWS]
BROKE = [r for r in UPPER if "BROKE" in r]


def test_exercise_2_wants_each_review_once_in_each_topic_through_the_crash(broker: EmbeddedBroker,
                                                                            tmp_path: Path) -> None:
    ex = exercises_of("06")
    assert ex.check("Exercise 2", feed(broker, tmp_path, "fixed", UPPER, BROKE)).verdict == RIGHT
    both = ex.check("Exercise 2", feed(broker, tmp_path, "both", UPPER + UPPER[:2], BROKE + BROKE[:1],
                                       support_is_a_sink=False, guarantee="at_least_once"))
    assert both.verdict == WRONG and "none of them is fixed yet" in both.message
    once = ex.check("Exercise 2", feed(broker, tmp_path, "once", UPPER, BROKE + BROKE[:1], support_is_a_sink=False))
    assert once.verdict == WRONG and "1 fixed, 1 to go" in once.message and "support queue" in once.message
    assert "(2)" not in once.message
    alo = ex.check("Exercise 2", feed(broker, tmp_path, "alo", UPPER + UPPER[:1], BROKE + BROKE[:1],
                                      guarantee="at_least_once"))
    assert alo.verdict == WRONG and "1 fixed, 1 to go" in alo.message and "search index" in alo.message


def test_exercise_2_refuses_the_given_job_and_a_job_without_a_crash(broker: EmbeddedBroker, tmp_path: Path) -> None:
    ex = exercises_of("06")
    given = ex.check("Exercise 2", feed(broker, tmp_path, EX06_BROKEN, UPPER, BROKE))
    assert given.verdict == WRONG and "broken job itself" in given.message
    calm = ex.check("Exercise 2", feed(broker, tmp_path, "calm", UPPER, BROKE, crashed=False))
    assert calm.verdict == WRONG and "crash_once" in calm.message
    armed = feed(broker, tmp_path, "armed", UPPER, BROKE, crashed=False)
    Path(crash_file(armed.job_dir, "before_commit")).parent.mkdir(parents=True)  # type: ignore[attr-defined]
    Path(crash_file(armed.job_dir, "before_commit")).touch()  # type: ignore[attr-defined]
    assert "no task of it reached" in ex.check("Exercise 2", armed).message


def test_exercise_1_compares_a_number_with_the_run() -> None:
    same = exercises_of("06").items["Exercise 1"].same
    assert same is not None
    shown = {"cores in the cluster": 2, "shuffle queues": 1, "most executors counting in one batch": 1}
    assert same(1, shown) and not same(2, shown) and not same(True, shown) and not same("1", shown)
