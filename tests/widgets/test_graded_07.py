"""Notebook 07's graded exercises without Spark or RocketMQ: the checks judged from a real embedded broker's
records (what the RocketMQ broker would hold, committed, and its decision log ``rstream_txn``) against
stand-ins for a job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets.exercises import NOT_YET, RIGHT, WRONG, check_prediction, predict, reveal
from rstream.widgets.graded import EX07_BROKEN, EX07_NOTEBOOK_JOB, exercises_of
from tests.support.graded import StandIn, written

pytestmark = pytest.mark.unit

EX = exercises_of("07")
ORDER_LOG = ["ann ordered a mug (o1, 12 euros)", "bob ordered a lamp (o2, 45 euros)",
             "ann ordered a rug (o3, 60 euros)", "cid ordered a clock (o4, 25 euros)"]
ORDERS = [{"order": "o1", "user": "ann", "product": "mug", "amount": 12, "ts": 1_000},
          {"order": "o2", "user": "bob", "product": "lamp", "amount": 45, "ts": 12_000},
          {"order": "o3", "user": "ann", "product": "mug", "amount": 12, "ts": 20_000},
          {"order": "o4", "user": "ann", "product": "mug", "amount": 12, "ts": 41_000}]
#: Exercise 2's windows, right: per (customer, product) and 30 s of the orders' time
WINDOWS = {("ann/mug", 0, 30_000): 2, ("bob/lamp", 0, 30_000): 1, ("ann/mug", 30_000, 60_000): 1}


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "broker")
    b.create_topic("order-log", queues=2)
    b.send_batch("order-log", ORDER_LOG)
    b.create_topic("order-events", queues=1)
    b.send_batch("order-events", [json.dumps(o) for o in ORDERS])
    b.create_topic("rstream_txn", queues=1)
    return b


def windows_written(broker: EmbeddedBroker, topic: str, windows: dict[tuple[str, int, int], int]) -> str:
    """A sink holding window results as ``JsonSerializer(with_key=True)`` writes them, each message keyed
    as rstream's sink keys it (``key@[start,end)``)."""
    broker.create_topic(topic, queues=1)
    for (key, start, end), n in windows.items():
        broker.send_batch(topic, [json.dumps({"key": [key, start, end], "value": n})], key=f"{key}@[{start},{end})")
    return topic


def test_the_debug_exercise_wants_one_key_per_message_and_windows_of_the_orders_time(broker: EmbeddedBroker) -> None:
    fixed = StandIn(broker, "order-windows-fixed", "order-events", [windows_written(broker, "f", WINDOWS)])
    assert EX.check("Exercise 2", fixed).verdict == RIGHT
    pair = {(k.replace("/", "|"), s, e): n for (k, s, e), n in WINDOWS.items()}  # any separator but a space
    assert EX.check("Exercise 2", StandIn(broker, "p", "order-events", [windows_written(broker, "p", pair)])).verdict == RIGHT
    spaced = {(k.replace("/", " "), s, e): n for (k, s, e), n in WINDOWS.items()}
    found = EX.check("Exercise 2", StandIn(broker, "s", "order-events", [windows_written(broker, "s", spaced)]))
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "more than one key" in found.message
    clock = 1_795_909_770_000
    born = {("ann/mug", clock, clock + 30_000): 3, ("bob/lamp", clock, clock + 30_000): 1}
    found = EX.check("Exercise 2", StandIn(broker, "b", "order-events", [windows_written(broker, "b", born)]))
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "clock of this year" in found.message
    both = {(k.replace("/", " "), s, e): n for (k, s, e), n in born.items()}
    found = EX.check("Exercise 2", StandIn(broker, "bb", "order-events", [windows_written(broker, "bb", both)]))
    assert found.verdict == WRONG and "none of them is fixed yet" in found.message
    off = {**WINDOWS, ("ann/mug", 0, 30_000): 1}
    found = EX.check("Exercise 2", StandIn(broker, "o", "order-events", [windows_written(broker, "o", off)]))
    assert found.verdict == WRONG and "causes" not in found.message
    given = StandIn(broker, EX07_BROKEN, "order-events", ["f"])
    assert "broken job itself" in EX.check("Exercise 2", given).message
    notebook = StandIn(broker, EX07_NOTEBOOK_JOB, "order-events", ["f"])
    assert "notebook's word count" in EX.check("Exercise 2", notebook).message


def decided(broker: EmbeddedBroker, job_id: str, sink: str, on_commit: bool) -> None:
    """The decision log entries of a job whose counting range wrote ``sink``: as half messages, or plain."""
    where = {"range": [job_id, f"{job_id}-shuffle", 0, 0]}
    opened = {"t": "open", "a": "x", **where, **({"half": [f"{sink}/0"]} if on_commit else {})}
    committed = {"t": "commit", "a": "x", **where, "out": {} if on_commit else {f"{sink}/0": [0, 4]}}
    broker.send_batch("rstream_txn", [json.dumps(opened), json.dumps(committed)])


RIGHT_COUNTS = [("ann", 1), ("bob", 1), ("ann", 2), ("cid", 1)]


def test_the_build_exercise_wants_the_feed_visible_on_commit(broker: EmbeddedBroker) -> None:
    decided(broker, "loyalty-feed", "feed", on_commit=True)
    job = StandIn(broker, "loyalty-feed", "order-log", [written(broker, "feed", RIGHT_COUNTS)])
    found = EX.check("Exercise 3", job)
    assert found.verdict == RIGHT, found.message
    decided(broker, "plain-feed", "plain", on_commit=False)
    plain = EX.check("Exercise 3", StandIn(broker, "plain-feed", "order-log", [written(broker, "plain", RIGHT_COUNTS)]))
    assert plain.verdict == WRONG and "plain messages" in plain.message
    decided(broker, "off-feed", "off", on_commit=True)
    off = StandIn(broker, "off-feed", "order-log", [written(broker, "off", [("ann", 1), ("cid", 1)])])
    found = EX.check("Exercise 3", off)
    assert found.verdict == WRONG and "'bob'" in found.message
    broker.create_topic("text-out", queues=1)
    broker.send_batch("text-out", ["ann:1", "bob:1", "ann:2", "cid:1"])
    text = EX.check("Exercise 3", StandIn(broker, "text-feed", "order-log", ["text-out"]))
    assert text.verdict == WRONG and "JsonSerializer" in text.message
    other = StandIn(broker, "windows", "order-events", [written(broker, "w", RIGHT_COUNTS)])
    assert "'order-log'" in EX.check("Exercise 3", other).message


def test_the_build_exercise_says_when_the_broker_keeps_no_decision_log(tmp_path: Path) -> None:
    b = EmbeddedBroker(tmp_path / "b")
    b.create_topic("order-log", queues=1)
    b.send_batch("order-log", ORDER_LOG)
    found = EX.check("Exercise 3", StandIn(b, "feed", "order-log", [written(b, "feed", RIGHT_COUNTS)]))
    assert found.verdict == WRONG and "decision log" in found.message


@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
@pytest.mark.parametrize("answer", [{"ann": 2, "bob": 1, "cid": 1}, 4, ["ann"]])
def test_results_typed_in_are_refused(exercise: str, answer: Any) -> None:
    found = EX.check(exercise, answer)
    assert found.verdict == WRONG and "A job" in found.message


@pytest.mark.parametrize("exercise", ["Exercise 2", "Exercise 3"])
def test_no_answer_is_not_yet(exercise: str) -> None:
    assert EX.check(exercise, None).verdict == NOT_YET


def test_a_job_never_run_or_with_records_left_is_refused(broker: EmbeddedBroker) -> None:
    sink = windows_written(broker, "fixed", WINDOWS)
    never = EX.check("Exercise 2", StandIn(broker, "unrun", "order-events", [sink], batches=0))
    assert never.verdict == WRONG and "has not run" in never.message
    left = EX.check("Exercise 2", StandIn(broker, "left", "order-events", [sink], left=3))
    assert left.verdict == WRONG and "3 records left" in left.message


def test_exercise_1_compares_two_named_numbers() -> None:
    same = EX.items["Exercise 1"].same
    assert same is not None
    shown = {"commits": 3, "commits_with_sink": 1}
    assert same({"commits": 3, "commits_with_sink": 1}, shown) and same((3, 1), shown)
    assert not same({"commits": 1, "commits_with_sink": 1}, shown)  # one per batch: not per range
    assert not same({"commits": 3, "commits_with_sink": 3}, shown) and not same(3, shown)


def test_exercise_1_refuses_a_prediction_made_after_the_run() -> None:
    ex = exercises_of("07")
    key = "07-test/Exercise 1"  # a ledger of this test's own, not the notebook's
    shown = {"commits": 3, "commits_with_sink": 1}
    predict("Exercise 1", {"commits": 1, "commits_with_sink": 1}, ledger=key)
    reveal("Exercise 1", lambda: shown, ledger=key)
    predict("Exercise 1", shown, ledger=key)
    spec = ex.items["Exercise 1"]
    found = check_prediction("Exercise 1", spec.hints, same=spec.same, ledger=key)
    assert found.verdict == WRONG and "after the run" in found.message
