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
MOVES = [("ann", 50), ("bob", -20), ("ann", -70), ("cid", 10), ("bob", 30), ("ann", -10), ("cid", -15), ("ann", 40),
         ("bob", -40)]


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "broker")
    b.create_topic("moves", queues=1)
    b.send_batch("moves", [json.dumps({"user": u, "amount": x}) for u, x in MOVES])
    orders = [{"order": "o1", "type": "created", "ts": 0}, {"order": "o2", "type": "created", "ts": 1},
              {"order": "o1", "type": "paid", "ts": 2}, {"order": "o3", "type": "created", "ts": 3}]
    b.create_topic("shop-orders", queues=1)
    b.send_batch("shop-orders", [json.dumps(e) for e in orders])
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


def test_the_debug_exercise_wants_one_alert_per_unpaid_order(broker: EmbeddedBroker) -> None:
    fixed = StandIn(broker, "unpaid-fixed", "shop-orders", [written(broker, "f", [("o2", 1), ("o3", 1)])])
    assert EX.check("Exercise 2", fixed).verdict == RIGHT
    every = StandIn(broker, "unpaid-again", "shop-orders", [written(broker, "e", [("o1", 1), ("o2", 1), ("o3", 1)])])
    result = EX.check("Exercise 2", every)
    assert result.verdict == WRONG and "['o1']" in result.message
    given = StandIn(broker, EX04_BROKEN, "shop-orders", ["f"])
    assert EX.check("Exercise 2", given).verdict == WRONG
    # the right alerts from a job that still keeps the unpaid orders' state: refused, naming them
    kept = StandIn(broker, "unpaid-kept", "shop-orders", ["f"], state={"o2": 1, "o3": 3})
    result = EX.check("Exercise 2", kept)
    assert result.verdict == WRONG and "['o2', 'o3']" in result.message
