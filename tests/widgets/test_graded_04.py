"""Notebook 04's graded exercises without Spark: the checks judged from a real embedded broker's records
against stand-ins for a job (as tests/widgets/test_graded_exercises.py does for the other notebooks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstream import EmbeddedBroker
from rstream.widgets.exercises import RIGHT, WRONG
from rstream.widgets.graded import EX04_BROKEN, exercises_of
from tests.support.graded import StandIn, written

pytestmark = pytest.mark.unit

EX = exercises_of("04")
CREDIT = [("ann", 10), ("bob", 5), ("ann", -20), ("bob", 25), ("cid", 100)]
MOVES = [("ann", 50), ("bob", -20), ("ann", -70), ("cid", 10), ("bob", 30), ("ann", -10), ("cid", -15), ("ann", 40),
         ("bob", -40)]


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "broker")
    b.create_topic("moves", queues=1)
    b.send_batch("moves", [json.dumps({"user": u, "amount": x}) for u, x in MOVES])
    b.create_topic("credit-log", queues=1)
    b.send_batch("credit-log", [json.dumps({"user": u, "amount": x}) for u, x in CREDIT])
    return b


def test_the_build_exercise_wants_every_balance_below_zero_per_customer(broker: EmbeddedBroker) -> None:
    right = [("bob", -20), ("ann", -20), ("ann", -30), ("cid", -5), ("bob", -30)]
    job = StandIn(broker, "overdrawn", "moves", [written(broker, "overdrawn", right)])
    assert EX.check("Exercise 3", job).verdict == RIGHT
    every = StandIn(broker, "all", "moves", [written(broker, "all", [*right, ("ann", 50)])])
    assert EX.check("Exercise 3", every).verdict == WRONG
    text = StandIn(broker, "text", "moves", [written(broker, "text", [])])
    broker.send_batch("text", ["bob:-20"])
    assert EX.check("Exercise 3", text).verdict == WRONG


def test_the_debug_exercise_wants_every_balance_kept_as_state(broker: EmbeddedBroker) -> None:
    right = [("ann", 10), ("bob", 5), ("ann", -10), ("bob", 30), ("cid", 100)]
    state = {"ann": -10, "bob": 30, "cid": 100}
    fixed = StandIn(broker, "credit-totals-fixed", "credit-log", [written(broker, "f", right)], state=state)
    assert EX.check("Exercise 2", fixed).verdict == RIGHT
    # the broken job: balances from a dict (no state), and only the moves after it started
    broken = StandIn(broker, "credit-totals-again", "credit-log", [written(broker, "b", [("bob", 25), ("cid", 100)])])
    found = EX.check("Exercise 2", broken)
    assert found.verdict == WRONG and "none of them is fixed yet" in found.message
    dict_only = StandIn(broker, "dict", "credit-log", [written(broker, "d", right)])
    found = EX.check("Exercise 2", dict_only)
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "job.state()" in found.message
    late = StandIn(broker, "late", "credit-log", [written(broker, "l", [("cid", 100)])], state={"cid": 100})
    found = EX.check("Exercise 2", late)
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "1 of the 5 moves" in found.message
    off = StandIn(broker, "off", "credit-log", [written(broker, "o", [*right[:4], ("cid", 99)])], state=state)
    found = EX.check("Exercise 2", off)
    assert found.verdict == WRONG and "'cid'" in found.message
    given = StandIn(broker, EX04_BROKEN, "credit-log", ["f"], state=state)
    assert "broken job itself" in EX.check("Exercise 2", given).message


def test_the_debug_exercise_says_a_job_that_ran_read_nothing(broker: EmbeddedBroker, tmp_path: Path) -> None:
    started = StandIn(broker, "credit-totals-late", "credit-log", [written(broker, "n", [])], batches=0)
    started.job_dir = tmp_path / "jobs" / "credit-totals-late"  # type: ignore[attr-defined]
    found = EX.check("Exercise 2", started)
    assert found.verdict == WRONG and "has not run" in found.message  # never started: the usual words
    started.job_dir.mkdir(parents=True)  # type: ignore[attr-defined]
    (started.job_dir / "initial-offsets.json").write_text("{}")  # type: ignore[attr-defined]
    found = EX.check("Exercise 2", started)
    assert found.verdict == WRONG and "read none of the 5 moves" in found.message


def test_the_prediction_names_state_messages_and_replayed_keys_and_is_judged_by_the_run() -> None:
    ex = exercises_of("04")
    shown = {"messages": 5, "replayed_keys": 3}
    ex.predict("Exercise 1", {"messages": 8, "replayed_keys": 4})  # one message per move: the usual mistake
    ex.reveal("Exercise 1", lambda: shown)
    found = ex.check("Exercise 1")
    assert found.verdict == WRONG
    same = ex.items["Exercise 1"].same
    assert same is not None
    assert same({"messages": 5, "replayed_keys": 3}, shown) and same((5, 3), shown)
    assert not same({"messages": 5, "replayed_keys": 4}, shown)  # dan is new: nothing of his to replay
    assert not same(5, shown) and not same({"messages": 5}, shown)
