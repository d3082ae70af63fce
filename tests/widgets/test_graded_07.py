"""Notebook 07's graded exercises without Spark or RocketMQ: the checks judged from a real embedded broker's
records (what the RocketMQ broker would hold, committed) against stand-ins for a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG, check_prediction, predict, reveal
from rstream.widgets.graded import EX07_BROKEN, EX07_NOTEBOOK_JOB, exercises_of
from tests.support.graded import StandIn, written

pytestmark = pytest.mark.unit

EX = exercises_of("07")
ORDERS = ["ann ordered a mug", "bob ordered a lamp", "ann ordered a rug", "cid ordered a clock"]
REVIEWS = ["the mug came fast", "my lamp broke", "the rug is fine", "a clock"]


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "broker")
    b.create_topic("order-log", queues=2)
    b.send_batch("order-log", ORDERS)
    b.create_topic("reviews", queues=2)
    b.send_batch("reviews", REVIEWS)
    return b


RIGHT_ORDERS = [("ann", 1), ("bob", 1), ("ann", 2), ("cid", 1)]


def test_the_debug_exercise_wants_json_counts_per_customer(broker: EmbeddedBroker) -> None:
    fixed = StandIn(broker, "order-counts-fixed", "order-log", [written(broker, "fixed", RIGHT_ORDERS)])
    found = EX.check("Exercise 2", fixed)
    assert found.verdict == RIGHT, found.message
    off = StandIn(broker, "off", "order-log", [written(broker, "off", [("ann", 1), ("cid", 1)])])
    found = EX.check("Exercise 2", off)
    assert found.verdict == WRONG and "'bob'" in found.message


def test_the_debug_exercise_refuses_a_text_sink_the_broken_job_and_the_notebook_s_job(
        broker: EmbeddedBroker) -> None:
    broker.create_topic("text-out", queues=1)
    broker.send_batch("text-out", ["ann:1", "bob:1", "ann:2", "cid:1"])
    text = EX.check("Exercise 2", StandIn(broker, "order-counts-again", "order-log", ["text-out"]))
    assert text.verdict == WRONG and "JsonSerializer" in text.message
    given = StandIn(broker, EX07_BROKEN, "order-log", [written(broker, "given", RIGHT_ORDERS)])
    assert "broken job itself" in EX.check("Exercise 2", given).message
    notebook = StandIn(broker, EX07_NOTEBOOK_JOB, "reviews", [written(broker, "wc", [("mug", 2)])])
    assert "notebook's word count" in EX.check("Exercise 2", notebook).message


@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
@pytest.mark.parametrize("answer", [{"ann": 2, "bob": 1, "cid": 1}, 4, ["ann"]])
def test_results_typed_in_are_refused(exercise: str, answer: Any) -> None:
    found = EX.check(exercise, answer)
    assert found.verdict == WRONG and "A job" in found.message


@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
def test_no_answer_is_not_yet(exercise: str) -> None:
    assert EX.check(exercise, None).verdict == NOT_YET


def test_a_job_never_run_or_with_records_left_is_refused(broker: EmbeddedBroker) -> None:
    sink = written(broker, "fixed", RIGHT_ORDERS)
    never = EX.check("Exercise 2", StandIn(broker, "unrun", "order-log", [sink], batches=0))
    assert never.verdict == WRONG and "has not run" in never.message
    left = EX.check("Exercise 2", StandIn(broker, "left", "order-log", [sink], left=3))
    assert left.verdict == WRONG and "3 records left" in left.message


def test_the_build_exercise_wants_the_reviews_per_first_word(broker: EmbeddedBroker) -> None:
    right = [("the", 1), ("my", 1), ("the", 2), ("a", 1)]
    job = StandIn(broker, "first-words", "reviews", [written(broker, "first", right)])
    found = EX.check("Exercise 3", job)
    assert found.verdict == RIGHT, found.message
    every = [("the", 1), ("mug", 1), ("came", 1), ("fast", 1), ("my", 1), ("lamp", 1), ("broke", 1), ("the", 2),
             ("rug", 1), ("is", 1), ("fine", 1), ("a", 1), ("clock", 1)]
    assert EX.check("Exercise 3", StandIn(broker, "every-word", "reviews",
                                          [written(broker, "every", every)])).verdict == WRONG
    other = StandIn(broker, "order-counts-fixed", "order-log", [written(broker, "orders", RIGHT_ORDERS)])
    found = EX.check("Exercise 3", other)
    assert found.verdict == WRONG and "'reviews'" in found.message
    notebook = StandIn(broker, EX07_NOTEBOOK_JOB, "reviews", [written(broker, "nb", right)])
    assert EX.check("Exercise 3", notebook).verdict == WRONG


def test_exercise_1_compares_two_named_numbers() -> None:
    same = EX.items["Exercise 1"].same
    assert same is not None
    shown = {"mug_messages": 4, "queues_with_mug": 1}
    assert same({"mug_messages": 4, "queues_with_mug": 1}, shown) and same((4, 1), shown)
    assert not same({"mug_messages": 1, "queues_with_mug": 1}, shown)  # one final count: not per record
    assert not same({"mug_messages": 4, "queues_with_mug": 4}, shown) and not same(4, shown)


def test_exercise_1_refuses_a_prediction_made_after_the_run() -> None:
    ex = exercises_of("07")
    key = "07-test/Exercise 1"  # a ledger of this test's own, not the notebook's
    shown = {"mug_messages": 4, "queues_with_mug": 1}
    predict("Exercise 1", {"mug_messages": 3, "queues_with_mug": 2}, ledger=key)
    reveal("Exercise 1", lambda: shown, ledger=key)
    predict("Exercise 1", shown, ledger=key)
    spec = ex.items["Exercise 1"]
    found = check_prediction("Exercise 1", spec.hints, same=spec.same, ledger=key)
    assert found.verdict == WRONG and "after the run" in found.message
