"""Notebook 06's graded exercises without Spark: Exercise 2's process check (Spark's record of lost
executors, batches after the loss, counts against the broker's ``reviews``) and Exercise 3's queue rule,
judged from a real embedded broker against stand-ins for a job and for Spark's status store."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from rstream import EmbeddedBroker
from rstream.runtime.progress import BatchProgress, QueueProgress
from rstream.widgets import graded
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG
from rstream.widgets.graded import executors_lost, exercises_of

pytestmark = pytest.mark.unit

REVIEWS = ["the mug came fast", "my mug came late", "a lamp broke"]


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


def batch(batch_id: int, committed_ms: int, executor: str, reviews_in: int = 0) -> BatchProgress:
    queue = QueueProgress(topic="reviews", queue=0, start=0, end=reviews_in, records_in=reviews_in,
                          records_out={}, replayed_keys=0, state_keys=None, changed_keys=0, error_count=0,
                          printed=[], operators={}, millis=1.0, skipped=False, batch_id=batch_id,
                          committed_ms=committed_ms, executor=executor)
    return BatchProgress.of(batch_id, [queue])


class Survivor:
    """What Exercise 2's check reads of a job: no Spark."""

    def __init__(self, broker: EmbeddedBroker, spark: Any, history: list[BatchProgress],
                 counts: dict[str, int], job_id: str = "cluster-wordcount", left: int = 0) -> None:
        self.job_id, self.broker, self.spark, self._history = job_id, broker, spark, history
        self.topology = SimpleNamespace(source_topics=["reviews"], sink_topics=["cluster-counts"],
                                        shuffle_topics={"cluster-wordcount-shuffle": 4})
        self._counts, self._left = counts, left

    def history(self) -> list[BatchProgress]:
        return self._history

    def lag(self) -> pd.DataFrame:
        return pd.DataFrame({"queue": [0], "lag": [self._left]})

    def state(self) -> pd.DataFrame:
        return pd.DataFrame({"key": list(self._counts), "value": list(self._counts.values())})


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    """``reviews``, and the sink of a word count that counted them once: every running count 1..n."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("reviews", queues=1)
    broker.send_batch("reviews", REVIEWS, progress=False)
    broker.create_topic("cluster-counts", queues=1)
    running, seen = [], Counter[str]()
    for word in " ".join(REVIEWS).split():
        seen[word] += 1
        running.append(f"{word}:{seen[word]}")
    broker.send_batch("cluster-counts", running, progress=False)
    return broker


@pytest.fixture(autouse=True)
def no_credit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graded, "_CREDITED", {})


def words() -> dict[str, int]:
    return dict(Counter(" ".join(REVIEWS).split()))


TWO_LOSSES = [_Summary("driver", None), _Summary("0", 1_000), _Summary("1", 5_000), _Summary("2", None)]
RAN_PAST = [batch(1, 500, "executor-0", 2), batch(2, 3_000, "executor-1", 1), batch(3, 6_000, "executor-2", 3)]


def test_spark_s_record_gives_the_lost_executors_oldest_first() -> None:
    lost = executors_lost(spark_with([_Summary("1", 9_000), _Summary("driver", None), _Summary("0", 2_000)]))
    assert [(e.executor, e.lost_ms) for e in lost] == [("executor-0", 2_000), ("executor-1", 9_000)]
    assert "137" in lost[0].reason


def test_a_job_through_a_second_loss_with_exact_counts_is_right_and_stays_right(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    job = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, words())
    found = ex.check("Exercise 2", job)
    assert found.verdict == RIGHT, found.message
    assert "executor-1" in found.message
    assert ex.check("Exercise 2", job).verdict == RIGHT  # checking again, nothing changed
    # one more round counted with no new loss: that loss was counted already
    job._history = [*RAN_PAST, batch(4, 7_000, "executor-2", 2)]
    again = ex.check("Exercise 2", job)
    assert again.verdict == WRONG and "counts once" in again.message


@pytest.mark.parametrize("answer", [None, ...])
def test_no_answer_is_not_yet(answer: Any) -> None:
    assert exercises_of("06").check("Exercise 2", answer).verdict == NOT_YET


@pytest.mark.parametrize("answer", [Counter({"mug": 2}), {"mug": 2, "came": 2}, 7])
def test_counts_typed_in_are_refused(answer: Any) -> None:
    found = exercises_of("06").check("Exercise 2", answer)
    assert found.verdict == WRONG and "A job" in found.message


def test_only_the_notebook_s_own_kill_is_not_enough(broker: EmbeddedBroker) -> None:
    job = Survivor(broker, spark_with(TWO_LOSSES[:2]), RAN_PAST, words())
    found = exercises_of("06").check("Exercise 2", job)
    assert found.verdict == WRONG and "Kill another" in found.message


def test_a_loss_the_job_did_not_run_past_is_refused(broker: EmbeddedBroker) -> None:
    job = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST[:2], words())
    found = exercises_of("06").check("Exercise 2", job)
    assert found.verdict == WRONG and "has read no review since" in found.message
    idle_after = [*RAN_PAST[:2], batch(3, 6_000, "executor-2", 0)]  # a batch after it, but of nothing new
    assert exercises_of("06").check("Exercise 2", Survivor(broker, spark_with(TWO_LOSSES), idle_after,
                                                           words())).verdict == WRONG


def test_a_job_that_never_ran_or_ran_only_after_the_loss_is_refused(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    assert "has not run" in ex.check("Exercise 2", Survivor(broker, spark_with(TWO_LOSSES), [], words())).message
    late_start = Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST[2:], words(), job_id="new")
    assert "no batch before" in ex.check("Exercise 2", late_start).message


def test_counts_that_differ_from_the_reviews_or_records_left_are_refused(broker: EmbeddedBroker) -> None:
    ex = exercises_of("06")
    off = {**words(), "mug": 3}
    found = ex.check("Exercise 2", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, off))
    assert found.verdict == WRONG and "'mug'" in found.message
    left = ex.check("Exercise 2", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, words(), left=4))
    assert left.verdict == WRONG and "4 records left" in left.message


def test_a_count_written_twice_across_the_kill_is_refused(broker: EmbeddedBroker) -> None:
    broker.send_batch("cluster-counts", ["mug:2"], progress=False)  # a rerun that wrote again
    found = exercises_of("06").check("Exercise 2", Survivor(broker, spark_with(TWO_LOSSES), RAN_PAST, words()))
    assert found.verdict == WRONG and "written twice" in found.message


def test_exercise_3_wants_one_shuffle_queue_per_core(broker: EmbeddedBroker) -> None:
    refuse = exercises_of("06").items["Exercise 3"].refuse
    assert refuse is not None
    job = SimpleNamespace(topology=SimpleNamespace(shuffle_topics={"s": 4}), spark=spark_with([], cores=2),
                          history=lambda: [], broker=broker)
    assert "more than the cluster's 2 cores" in (refuse(job) or "")
    job.topology.shuffle_topics = {"s": 1}
    assert "fewer than" in (refuse(job) or "")
    job.topology.shuffle_topics = {"s": 2}
    assert refuse(job) is None  # not run yet: the check says so itself


def test_exercise_1_compares_a_number_with_the_run() -> None:
    same = exercises_of("06").items["Exercise 1"].same
    assert same is not None
    shown = {"cores in the cluster": 2, "shuffle queues": 1, "most executors counting in one batch": 1}
    assert same(1, shown) and not same(2, shown) and not same(True, shown) and not same("1", shown)
