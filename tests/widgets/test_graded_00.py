"""Notebook 00's graded exercises without Spark: the references computed from a real embedded broker's
``reviews`` (the shop's), judged against stand-ins for a job (what a check reads of a ``RocketMQStream``)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from rstream import EmbeddedBroker
from rstream.story import Shop
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG
from rstream.widgets.graded import EX00_BROKEN, EX00_NOTEBOOK_JOB, exercises_of
from tests.support.graded import StandIn

pytestmark = pytest.mark.unit

REVIEWS = Shop().reviews(6) + ["a mug broke", "my chair came late but came late"]


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("reviews", queues=2)
    broker.send_batch("reviews", REVIEWS, progress=False)
    return broker


def job_writing(broker: EmbeddedBroker, job_id: str, counts: dict[str, int], text: bool = False) -> StandIn:
    """A stand-in whose sink topic holds ``counts``, as updates 1, 2, ... per key (as a count writes them)."""
    topic = f"{job_id}-counts"
    broker.create_topic(topic, queues=1)
    bodies = [f"{k}:{i}" if text else json.dumps({"key": k, "value": i})
              for k, n in counts.items() for i in range(1, n + 1)]
    broker.send_batch(topic, bodies, progress=False)
    return StandIn(broker, job_id, "reviews", [topic])


def words() -> dict[str, int]:
    return dict(Counter(w for r in REVIEWS for w in r.split()))


def first_words() -> dict[str, int]:
    return dict(Counter(r.split()[0] for r in REVIEWS))


def test_exercise_1_wants_the_number_the_run_showed_predicted_before_it() -> None:
    ex = exercises_of("00")
    assert ex.check("Exercise 1").verdict == NOT_YET
    ex.predict("Exercise 1", 6)
    ex.reveal("Exercise 1", lambda: 6)
    assert ex.check("Exercise 1").verdict == RIGHT
    same = ex.items["Exercise 1"].same
    assert same is not None
    assert same(6, 6) and same(6.0, 6)
    assert not same("6", 6) and not same(True, 1) and not same(5, 6) and not same([6], 6)


def test_exercise_2_wants_the_words_counted_by_a_new_job_and_says_which_causes_show(broker: EmbeddedBroker) -> None:
    ex = exercises_of("00")
    assert ex.check("Exercise 2").verdict == NOT_YET
    assert ex.check("Exercise 2", job_writing(broker, "fixed", words())).verdict == RIGHT
    great = [r for r in REVIEWS if "great" in r]
    both = ex.check("Exercise 2", job_writing(broker, "both", dict(Counter(great))))
    assert both.verdict == WRONG and "none of them is fixed yet" in both.message and "(2)" in both.message
    whole = ex.check("Exercise 2", job_writing(broker, "whole-reviews", dict(Counter(REVIEWS))))
    assert whole.verdict == WRONG and "1 fixed, 1 to go" in whole.message and "single words" in whole.message
    filtered = ex.check("Exercise 2", job_writing(broker, "filtered", dict(Counter(w for r in great for w in r.split()))))
    assert filtered.verdict == WRONG and "1 fixed, 1 to go" in filtered.message and "no trace" in filtered.message
    other = ex.check("Exercise 2", job_writing(broker, "other", {**words(), "mug": 99}))
    assert other.verdict == WRONG and "'mug'" in other.message and "causes" not in other.message
    assert ex.check("Exercise 2", words()).verdict == WRONG  # a count typed in, no job
    given = ex.check("Exercise 2", job_writing(broker, EX00_BROKEN, words()))
    assert given.verdict == WRONG and "broken job itself" in given.message
    notebooks = ex.check("Exercise 2", job_writing(broker, EX00_NOTEBOOK_JOB, words(), text=True))
    assert notebooks.verdict == WRONG and "top of the notebook" in notebooks.message
    text = ex.check("Exercise 2", job_writing(broker, "text-sink", words(), text=True))
    assert text.verdict == WRONG and "not JSON" in text.message
    unrun = StandIn(broker, "unrun", "reviews", ["fixed-counts"], batches=0)
    assert "has not run" in ex.check("Exercise 2", unrun).message


def test_exercise_3_wants_the_reviews_counted_per_first_word(broker: EmbeddedBroker) -> None:
    ex = exercises_of("00")
    assert ex.check("Exercise 3").verdict == NOT_YET
    assert ex.check("Exercise 3", job_writing(broker, "first", first_words())).verdict == RIGHT
    every = ex.check("Exercise 3", job_writing(broker, "every", words()))
    assert every.verdict == WRONG and "first word" in every.message
    assert ex.check("Exercise 3", first_words()).verdict == WRONG
    notebooks = ex.check("Exercise 3", job_writing(broker, EX00_NOTEBOOK_JOB, words(), text=True))
    assert notebooks.verdict == WRONG and "top of the notebook" in notebooks.message


def test_a_review_with_no_word_has_no_first_word(broker: EmbeddedBroker) -> None:
    broker.send_batch("reviews", ["", "   "], progress=False)
    assert exercises_of("00").check("Exercise 3", job_writing(broker, "first", first_words())).verdict == RIGHT
