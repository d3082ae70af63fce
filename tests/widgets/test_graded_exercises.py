"""The graded exercises' mechanism without Spark: predict-then-run's order, hints kept closed, and the job
checks, judged from a real embedded broker's records against stand-ins for a job (what a check reads of a
``RocketMQStream``: its id, topology's topics, broker, batches, lag, late records, settings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets.exercises import (
    NOT_YET,
    RIGHT,
    WRONG,
    Hints,
    check,
    check_job,
    check_prediction,
    predict,
    reveal,
)
from rstream.widgets.graded import (
    EX01_BROKEN,
    EX02_BROKEN,
    EX03_CHOICES,
    EX05_BROKEN,
    exercises_of,
    split_by_rule,
)
from tests.support.graded import StandIn

pytestmark = pytest.mark.unit

HINTS = Hints(nudge="look here", concept="the rule is", call="do_this()")


def sink(broker: EmbeddedBroker, topic: str, windows: dict[tuple[Any, int, int], Any]) -> str:
    broker.create_topic(topic, queues=1)
    broker.send_batch(topic, [json.dumps({"key": list(k), "value": v}) for k, v in windows.items()], progress=False)
    return topic


@pytest.fixture
def views(tmp_path: Path) -> EmbeddedBroker:
    """Page views on two web servers. Queue 0: home at 1 s, 5 s, 12 s; queue 1: home at 3 s, then cart at
    0.5 s, late with 2 s of lateness (queue 1's watermark is 1 s by then)."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("views", queues=2)
    for queue, events in {0: [("ann", "home", 1_000), ("bob", "home", 5_000), ("ann", "home", 12_000)],
                          1: [("cid", "home", 3_000), ("ann", "cart", 500)]}.items():
        broker.send_batch("views", [json.dumps({"user": u, "page": p, "ts": t}) for u, p, t in events],
                          queue=queue, progress=False)
    return broker


# -- predict, then run -----------------------------------------------------------------------------------

def test_a_prediction_made_before_the_run_is_judged_by_what_the_run_showed() -> None:
    assert check_prediction("t1", HINTS).verdict == NOT_YET
    predict("t1", 42)
    assert check_prediction("t1", HINTS).verdict == NOT_YET  # recorded, not yet run
    assert "42" in repr(reveal("t1", lambda: 42))
    assert check_prediction("t1", HINTS).verdict == RIGHT
    predict("t2", 41)
    reveal("t2", lambda: 42)
    wrong = check_prediction("t2", HINTS)
    assert wrong.verdict == WRONG and "41" in wrong.message and "42" in wrong.message


def test_a_prediction_written_after_the_reveal_is_refused_even_when_right() -> None:
    predict("t3", 0)
    reveal("t3", lambda: 7)
    note = predict("t3", 7)
    assert "does not count" in repr(note)
    found = check_prediction("t3", HINTS)
    assert found.verdict == WRONG and "after the run was shown" in found.message
    reveal("t3", lambda: 7)  # running the reveal again does not make the late prediction an early one
    assert check_prediction("t3", HINTS).verdict == WRONG


def test_the_run_stays_hidden_until_a_prediction_is_recorded() -> None:
    ran = []
    predict("t4", None)  # the untouched cell: no prediction
    note = reveal("t4", lambda: ran.append(1) or 5)
    assert ran == [] and "waits for your prediction" in repr(note)
    assert check_prediction("t4", HINTS).verdict == NOT_YET
    predict("t4", 5)  # predicted now, before anything was shown: it counts
    reveal("t4", lambda: ran.append(1) or 5)
    assert ran == [1] and check_prediction("t4", HINTS).verdict == RIGHT


def test_a_check_made_with_hints_opens_none_of_them_by_itself() -> None:
    """The judging functions keep every level closed (a check's output holds no hint text); the notebooks'
    ``exercises.check`` opens those the ledger says were earned (tests/widgets/test_exercise_ledger.py)."""
    predict("t5", 1)
    reveal("t5", lambda: 2)
    found = check_prediction("t5", HINTS)
    assert found.verdict == WRONG
    for level in ("look here", "the rule is", "do_this()"):
        assert level not in found._repr_html_() and level not in repr(found)


def test_the_look_up_check_still_works() -> None:
    assert check("Exercise 9", None, 1, hint="h").verdict == NOT_YET
    assert check("Exercise 9", 1, 1, hint="h").verdict == RIGHT
    assert check("Exercise 9", 2, 1, hint="h").verdict == WRONG


# -- checks of a job ---------------------------------------------------------------------------------------

def test_a_job_check_refuses_an_answer_that_is_no_job_or_a_job_that_did_not_run(views: EmbeddedBroker) -> None:
    def judge(_facts: Any) -> None:
        return None

    assert check_job("E", None, HINTS, "views", judge).verdict == NOT_YET
    for typed_in in ({("home", 0, 10_000): 3}, 3, [1, 2], "job"):
        found = check_job("E", typed_in, HINTS, "views", judge)
        assert found.verdict == WRONG and "A job" in found.message
    out = sink(views, "out", {})
    never_ran = StandIn(views, "j", "views", [out], batches=0)
    assert "has not run" in check_job("E", never_ran, HINTS, "views", judge).message
    half_read = StandIn(views, "j", "views", [out], left=3)
    assert "3 records left" in check_job("E", half_read, HINTS, "views", judge).message
    other_topic = StandIn(views, "j", "orders", [out])
    assert "should read 'views'" in check_job("E", other_topic, HINTS, "views", judge).message
    assert check_job("E", StandIn(views, "j", "views", [out]), HINTS, "views", judge).verdict == RIGHT


def values_only(broker: EmbeddedBroker, topic: str, values: list[int]) -> str:
    """A sink as ``JsonSerializer()`` writes window counts: the values alone."""
    broker.create_topic(topic, queues=1)
    broker.send_batch(topic, [json.dumps(v) for v in values], progress=False)
    return topic


def test_notebook_02_debug_exercise_says_which_of_its_two_causes_still_show(views: EmbeddedBroker) -> None:
    ex = exercises_of("02")
    right = {("home", 0, 10_000): 3, ("home", 10_000, 20_000): 1}  # cart at 0.5 s is late: not counted
    fixed = StandIn(views, "fixed", "views", [sink(views, "fixed-counts", right)])
    assert ex.check("Exercise 2", fixed).verdict == RIGHT
    tiny = {("home", 1_000, 1_010): 1, ("home", 3_000, 3_010): 1, ("home", 5_000, 5_010): 1,
            ("home", 12_000, 12_010): 1}  # windows of 10 ms
    found = ex.check("Exercise 2", StandIn(views, "tiny", "views", [sink(views, "tiny-counts", tiny)]))
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "a view or two" in found.message
    keyless = ex.check("Exercise 2", StandIn(views, "nokey", "views", [values_only(views, "nokey", [3, 1])]))
    assert keyless.verdict == WRONG and "1 fixed, 1 to go" in keyless.message and "not which page" in keyless.message
    both = ex.check("Exercise 2", StandIn(views, "both", "views", [values_only(views, "both", [1, 1, 1, 1])]))
    assert both.verdict == WRONG and "none of them is fixed yet" in both.message
    wall_clock = {("home", 1_795_782_470_000, 1_795_782_480_000): 4, ("cart", 1_795_782_470_000, 1_795_782_480_000): 1}
    broken = StandIn(views, "again", "views", [sink(views, "again-counts", wall_clock)])
    found = ex.check("Exercise 2", broken)
    assert found.verdict == WRONG and "wall-clock" in found.message
    given = StandIn(views, EX02_BROKEN, "views", [sink(views, "given-counts", right)])
    assert "broken job itself" in ex.check("Exercise 2", given).message
    counted_late = StandIn(views, "late", "views", [sink(views, "late-counts", {**right, ("cart", 0, 10_000): 1})])
    assert ex.check("Exercise 2", counted_late).verdict == WRONG
    other_lateness = StandIn(views, "l5", "views", [sink(views, "l5-counts", right)], lateness=5_000)
    assert "allowed_lateness_ms=5000" in ex.check("Exercise 2", other_lateness).message


def test_notebook_02_build_exercise_wants_users_in_20_s_windows(views: EmbeddedBroker) -> None:
    ex = exercises_of("02")
    right = {("ann", 0, 20_000): 2, ("bob", 0, 20_000): 1, ("cid", 0, 20_000): 1}
    assert ex.check("Exercise 3", StandIn(views, "u", "views", [sink(views, "u", right)])).verdict == RIGHT
    pages = {("home", 0, 10_000): 3, ("home", 10_000, 20_000): 1}
    assert ex.check("Exercise 3", StandIn(views, "p", "views", [sink(views, "p", pages)])).verdict == WRONG
    empty = StandIn(views, "e", "views", [sink(views, "e", {})])
    assert "no window result" in ex.check("Exercise 3", empty).message


def test_notebook_03_build_exercise_wants_the_smallest_lateness_that_is_enough(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("views", queues=1)
    # delays behind the newest ts: 900 ms and 3 000 ms (once each), 6 000 ms (once)
    times = [0, 500, 1_000, 4_000, 3_100, 5_000, 2_000, 9_000, 3_000]
    broker.send_batch("views", [json.dumps({"server": 0, "ts": t}) for t in times], progress=False)
    late_at = {ms: len(split_by_rule(broker, "views", lambda r: r["ts"], ms)[1]) for ms in EX03_CHOICES}
    assert late_at[0] == 3 and late_at[1_500] == 2 and late_at[4_000] == 1 and late_at[8_000] == 0
    ex = exercises_of("03")

    def job(ms: int, late: int | None = None) -> StandIn:
        late = late_at.get(ms, 0) if late is None else late
        counts = {("server-0", 0, 10_000): len(times) - late}
        return StandIn(broker, f"pick-{ms}", "views", [sink(broker, f"pick-{ms}-{late}", counts)], lateness=ms,
                       late=late)

    assert ex.check("Exercise 3", job(0)).verdict == RIGHT  # at most 5 late: 0 ms is enough here
    assert "not one of the choices" in ex.check("Exercise 3", job(1_000)).message
    assert "smaller lateness is enough" in ex.check("Exercise 3", job(8_000)).message
    assert "should hold those the rule finds late" in ex.check("Exercise 3", job(0, late=1)).message


def test_notebook_03_debug_exercise_says_which_of_its_two_causes_still_show(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("views", queues=1)
    views = [(0, 0), (4_000, 4_100), (1_000, 4_200), (6_000, 6_300)]  # ts, arrival: delays 0, 100, 3 200, 300
    broker.send_batch("views", [json.dumps({"server": 0, "user": "ann", "page": "home", "ts": t, "arrival": a})
                                for t, a in views], progress=False)
    ex = exercises_of("03")
    by_event_time = {("server-0", 0, 5_000): 100, ("server-0", 5_000, 10_000): 300}  # 1 s is late: 3 s behind
    fixed = StandIn(broker, "sf", "views", [sink(broker, "sf-max", by_event_time)], lateness=1_000, late=1)
    assert ex.check("Exercise 2", fixed).verdict == RIGHT
    by_arrival = {("server-0", 0, 5_000): 3_200, ("server-0", 5_000, 10_000): 300}
    both = StandIn(broker, "sb", "views", [sink(broker, "sb-max", by_arrival)], lateness=1)
    found = ex.check("Exercise 2", both)
    assert found.verdict == WRONG and "none of them is fixed yet" in found.message and "not the 1 s" in found.message
    arrival = StandIn(broker, "sa", "views", [sink(broker, "sa-max", by_arrival)], lateness=1_000)
    found = ex.check("Exercise 2", arrival)
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "not one view is late" in found.message
    # event time, but 1 ms of lateness: the view of 4 000 is late behind 4 000 - 1, and 1 000 too
    one_ms = StandIn(broker, "sm", "views", [sink(broker, "sm-max", {("server-0", 5_000, 10_000): 300})],
                     lateness=1, late=2)
    found = ex.check("Exercise 2", one_ms)
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "the rule with 1 s" in found.message
    no_late = StandIn(broker, "sn", "views", [sink(broker, "sn-max", by_event_time)], lateness=1_000)
    assert "late views" in ex.check("Exercise 2", no_late).message


def test_notebook_02_prediction_may_write_windows_as_lists_or_tuples() -> None:
    ex = exercises_of("02")
    assert repr(ex.check("Exercise 1")).startswith("… Exercise 1: not yet.")  # one line, as check(...) shows
    note = ex.predict("Exercise 1", {"watermark": 11_000, "fired": [[0, 10_000]]})
    assert repr(note).startswith("Exercise 1 · prediction recorded")
    ex.reveal("Exercise 1", lambda: {"watermark": 11_000, "fired": [(0, 10_000)]})
    assert repr(ex.check("Exercise 1")).startswith("✔ Exercise 1: right.")


# notebook 05 ------------------------------------------------------------------------------------------

def joined(broker: EmbeddedBroker, topic: str, pairs: list[tuple[str, Any]]) -> str:
    broker.create_topic(topic, queues=1)
    broker.send_batch(topic, [json.dumps({"key": k, "value": v}) for k, v in pairs], progress=False)
    return topic


@pytest.fixture
def shop(tmp_path: Path) -> EmbeddedBroker:
    """o0 paid 2 s later in its window; o1 paid 3 s later across the 10 s edge; o2 never paid; o3 paid 4 s
    later. Then the profiles (ann gold, bob silver), the next orders (ann's, eve's: no profile, bob's), and
    bob's tier changed after them."""
    broker = EmbeddedBroker(tmp_path / "broker")
    orders = [{"order": "o0", "amount": 5, "ts": 1_000}, {"order": "o1", "amount": 7, "ts": 8_000},
              {"order": "o2", "amount": 9, "ts": 12_000}, {"order": "o3", "amount": 3, "ts": 13_000}]
    payments = [{"order": "o0", "ts": 3_000}, {"order": "o1", "ts": 11_000}, {"order": "o3", "ts": 17_000}]
    for topic, records in {"orders": orders, "payments": payments}.items():
        broker.create_topic(topic, queues=1)
        broker.send_batch(topic, [json.dumps(r) for r in records], progress=False)
    broker.create_topic("profiles", queues=1)
    broker.create_topic("next-orders", queues=1)
    broker.send_batch("profiles", [json.dumps({"user": "ann", "tier": "gold"}), json.dumps({"user": "bob", "tier": "silver"})],
                      born_timestamp=1_000, progress=False)
    broker.send_batch("next-orders", [json.dumps({"order": o, "user": u}) for o, u in
                                      (("n1", "ann"), ("n2", "eve"), ("n3", "bob"))], born_timestamp=2_000, progress=False)
    broker.send_batch("profiles", [json.dumps({"user": "bob", "tier": "gold"})], born_timestamp=3_000, progress=False)
    return broker


def test_notebook_05_debug_exercise_says_which_of_its_two_causes_still_show(shop: EmbeddedBroker) -> None:
    ex = exercises_of("05")

    def job(job_id: str, rows: list[tuple[str, str, Any]]) -> StandIn:
        return StandIn(shop, job_id, "next-orders", [joined(shop, f"{job_id}-tiers", [
            (user, {"order": order, "tier": tier}) for user, order, tier in rows])])

    right = [("ann", "n1", "gold"), ("eve", "n2", None), ("bob", "n3", "silver")]
    assert ex.check("Exercise 2", job("fixed", right)).verdict == RIGHT
    stream = ex.check("Exercise 2", job("stream", [*right, ("bob", "n3", "gold")]))  # the update sent n3 again
    assert stream.verdict == WRONG and "1 fixed, 1 to go" in stream.message and "came after an order" in stream.message
    inner = ex.check("Exercise 2", job("inner", [right[0], right[2]]))
    assert inner.verdict == WRONG and "1 fixed, 1 to go" in inner.message and "n2" in inner.message
    both = ex.check("Exercise 2", job("both", [right[0], right[2], ("bob", "n3", "gold")]))
    assert both.verdict == WRONG and "none of them is fixed yet" in both.message
    # the stream taken in another order: n3 meets bob's later profile first
    late_tier = ex.check("Exercise 2", job("late-tier", [*right[:2], ("bob", "n3", "gold")]))
    assert late_tier.verdict == WRONG and "1 fixed, 1 to go" in late_tier.message and "(n3)" in late_tier.message
    odd = ex.check("Exercise 2", job("odd", [*right[:2], ("bob", "n3", "bronze")]))  # no cause gives that
    assert odd.verdict == WRONG and "causes" not in odd.message
    given = StandIn(shop, EX05_BROKEN, "next-orders", [joined(shop, "given", [("ann", {"order": "n1", "tier": "gold"})])])
    assert "broken job itself" in ex.check("Exercise 2", given).message
    orders_topic = StandIn(shop, "two", "orders", [joined(shop, "two-orders", [("o0", {"paid": True})])])
    assert "should read 'next-orders'" in ex.check("Exercise 2", orders_topic).message


def test_notebook_05_build_exercise_wants_the_orders_paid_within_3_s(shop: EmbeddedBroker) -> None:
    ex = exercises_of("05")

    def job(job_id: str, pairs: list[tuple[str, Any]], sources: tuple[str, ...] = ("orders", "payments")) -> StandIn:
        stand_in = StandIn(shop, job_id, "orders", [joined(shop, f"{job_id}-out", pairs)])
        stand_in.topology.source_topics = list(sources)
        return stand_in

    assert ex.check("Exercise 3", job("q", [("o0", 2_000), ("o1", 3_000)])).verdict == RIGHT  # 3 s included
    left = ex.check("Exercise 3", job("l", [("o0", 2_000), ("o1", 3_000), ("o2", None), ("o3", None)]))
    assert left.verdict == WRONG and "should not come out: ['o2', 'o3']" in left.message
    exclusive = ex.check("Exercise 3", job("x", [("o0", 2_000)]))  # the 3 s bound left out
    assert "not paired but should be: ['o1']" in exclusive.message
    assert "'payments'" in ex.check("Exercise 3", job("o", [("o0", 0), ("o1", 0)], ("orders",))).message


def test_notebook_05_prediction_counts_each_order_s_pairs() -> None:
    ex = exercises_of("05")
    ex.predict("Exercise 1", {"o0": 2, "o2": 1, "o4": 0})  # an order written with 0 is one that never comes out
    ex.reveal("Exercise 1", lambda: {"o0": 2, "o2": 1})
    assert ex.check("Exercise 1").verdict == RIGHT


# notebook 01 ------------------------------------------------------------------------------------------

def test_notebook_01_debug_exercise_says_which_of_its_two_causes_still_show(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("new-reviews", queues=1)
    broker.send_batch("new-reviews", ["my mug came fast", "A MUG CAME LATE", "zoë".encode("latin-1")],
                      progress=False)
    ex = exercises_of("01")

    def job(job_id: str, counts: dict[str, int], dead: int) -> StandIn:
        topic = f"{job_id}-counts"
        broker.create_topic(topic, queues=1)
        broker.send_batch(topic, [json.dumps({"key": k, "value": n}) for k, n in counts.items()], progress=False)
        broker.create_topic(f"{job_id}-dlq", queues=1)
        if dead:
            broker.send_batch(f"{job_id}-dlq", ["dead"] * dead, progress=False)
        return StandIn(broker, job_id, "new-reviews", [topic])

    lower = {"my": 1, "mug": 2, "came": 2, "fast": 1, "a": 1, "late": 1}
    assert ex.check("Exercise 2", job("fixed", lower, 1)).verdict == RIGHT
    cased = {"my": 1, "mug": 1, "came": 1, "fast": 1, "A": 1, "MUG": 1, "CAME": 1, "LATE": 1}
    found = ex.check("Exercise 2", job("cased", cased, 1))
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "more than one key" in found.message
    found = ex.check("Exercise 2", job("latin", {**lower, "zoë": 1}, 0))
    assert found.verdict == WRONG and "1 fixed, 1 to go" in found.message and "dead-letter topic is empty" in found.message
    found = ex.check("Exercise 2", job("both", {**cased, "zoë": 1}, 0))
    assert found.verdict == WRONG and "none of them is fixed yet" in found.message
    found = ex.check("Exercise 2", job("extra-dead", lower, 2))
    assert found.verdict == WRONG and "dead-letter topic holds 2" in found.message
    given = ex.check("Exercise 2", job(EX01_BROKEN, lower, 1))
    assert "broken job itself" in given.message


def test_notebook_01_prediction_names_batches_and_lag() -> None:
    same = exercises_of("01").items["Exercise 1"].same
    assert same is not None
    shown = {"batches": 3, "lag_after_first": 6}
    assert same({"batches": 3, "lag_after_first": 6}, shown) and same((3, 6), shown)
    assert not same({"batches": 1, "lag_after_first": 0}, shown) and not same(3, shown)


def test_notebook_03_prediction_is_the_late_views_in_any_order() -> None:
    ex = exercises_of("03")
    same = ex.items["Exercise 1"].same
    assert same is not None
    assert same([1_200, 3_900], [1_200, 3_900]) and same([3_900, 1_200], [1_200, 3_900])
    assert not same([1_200, 1_800, 3_900], [1_200, 3_900])  # 1 800 came after 2 500: watermark 1 500, on time
    assert not same([1_200], [1_200, 3_900])
    ex.predict("Exercise 1", 2)  # a number, not the views: judged wrong, not an error
    ex.reveal("Exercise 1", lambda: [1_200, 3_900])
    assert ex.check("Exercise 1").verdict == WRONG
