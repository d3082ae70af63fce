"""Keyed process functions (``grouped.process(fn)``) run in this process (no Spark) against the plain
reference of ``tests/support/reference.py`` on generated out-of-order input: de-duplication with a
time to live, unpaid orders, sessions by hand; timers through a restart with the local state deleted;
processing-time timers; a call that raises changes nothing; and bad input refused with clear errors."""

from __future__ import annotations

import itertools
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rstream import (
    DslError,
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    KeyedProcessFunction,
    RecordError,
    StreamBuilder,
    TumblingWindow,
)
from rstream.runtime.inprocess import InProcessJob
from rstream.state.store import StateStore
from tests.support.inprocess import emitted, produce
from tests.support.process import MINUTE, Pings, Sessions, Unpaid, events, orders, process_job
from tests.support.reference import keyed_process
from tools.functions import Dedup

LATENESS = 1000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
_RUNS = itertools.count()


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


def run(builder: StreamBuilder, broker: EmbeddedBroker, root: Path, fire_idle: bool = True, **props: Any) -> InProcessJob:
    job = InProcessJob(builder.build(), broker, root / "jobs" / builder.job_id, {**EXACT, **props})
    job.run_until_idle(fire_idle=fire_idle)
    return job


def user(e: dict[str, Any]) -> Any:
    return e["user"]


def ts(e: dict[str, Any]) -> int:
    return int(e["ts"])


@FAST
@given(n=st.integers(1, 80), seed=st.integers(0, 10_000), ttl=st.sampled_from([5000, 12_000]),
       chunk=st.integers(3, 40), shuffles=st.integers(1, 3))
def test_dedup_with_a_time_to_live_equals_the_reference(tmp_path: Path, n: int, seed: int, ttl: int, chunk: int,
                                                        shuffles: int) -> None:
    broker, root = fresh(tmp_path)
    [recs] = produce(broker, "events", events(n, seed), queues=1).values()
    run(process_job("dedup", Dedup(ttl), shuffle_queues=shuffles), broker, root, max_records_per_queue=chunk)
    assert emitted(broker, "out") == keyed_process(recs, Dedup(ttl), user, ts, LATENESS)


@FAST
@given(n=st.integers(1, 40), seed=st.integers(0, 10_000), chunk=st.integers(2, 30))
@example(n=1, seed=870, chunk=2)  # paid at exactly 15 minutes
def test_unpaid_order_alerts_equal_the_reference(tmp_path: Path, n: int, seed: int, chunk: int) -> None:
    broker, root = fresh(tmp_path)
    [recs] = produce(broker, "orders", orders(n, seed), queues=1).values()
    run(process_job("unpaid", Unpaid(), key="order", source="orders"), broker, root, max_records_per_queue=chunk)
    expected = keyed_process(recs, Unpaid(), lambda e: e["order"], ts, LATENESS)
    assert emitted(broker, "out") == expected
    # with the input in order of time: no alert for an order paid less than 15 minutes after it was
    # created, one for each order never paid; one paid later is alerted if the watermark passed its 15
    # minutes before the payment came. A payment at exactly 15 minutes is late: a timer at t fires before
    # the records of time t (rstream's rule, rstream.processors.ordered; Flink and Kafka Streams take such a
    # record first, since the watermark it brings stays below t)
    if all(ts(a) <= ts(b) for a, b in itertools.pairwise(recs)):
        paid = {e["order"]: ts(e) for e in recs if e["type"] == "paid"}
        created = {e["order"]: ts(e) for e in recs if e["type"] == "created"}
        late = {o for o, c in created.items() if o not in paid or paid[o] >= c + 15 * MINUTE}
        assert set(created) - set(paid) <= set(expected) <= late


@FAST
@given(n=st.integers(1, 80), seed=st.integers(0, 10_000), gap=st.sampled_from([5000, 9000]),
       chunk=st.integers(3, 40))
def test_sessions_by_hand_equal_the_reference(tmp_path: Path, n: int, seed: int, gap: int, chunk: int) -> None:
    broker, root = fresh(tmp_path)
    [recs] = produce(broker, "events", events(n, seed, step=2500), queues=1).values()
    run(process_job("sessions", Sessions(gap)), broker, root, max_records_per_queue=chunk)
    got = emitted(broker, "out")
    assert got == keyed_process(recs, Sessions(gap), user, ts, LATENESS)
    assert sum(s[2] for sessions in got.values() for s in sessions) == n  # every click in one session


def test_several_source_queues_give_the_reference_s_sessions_in_data_time_order(tmp_path: Path) -> None:
    """With 3 source queues the order a key's records arrive in depends on the schedule and the batch
    cut; taken in data-time order they give the reference's sessions, every click in one session,
    every session's timer fired once."""
    broker, root = fresh(tmp_path)
    queues = produce(broker, "events", events(150, 4, step=2500), queues=3)
    job = run(process_job("sessions3", Sessions(6000)), broker, root, max_records_per_queue=17)
    got = emitted(broker, "out")
    assert got == keyed_process(queues, Sessions(6000), user, ts, LATENESS)
    assert sum(s[2] for sessions in got.values() for s in sessions) == 150
    fired = sum(m.get("timers_fired", 0) for info in job.infos for name, m in info["operators"].items()
                if name.startswith("PROCESS"))
    assert fired == sum(len(v) for v in got.values())


def test_timers_set_before_a_restart_with_the_local_state_deleted_fire_after_it_once(tmp_path: Path) -> None:
    """Orders created, the job stopped before their 15 minutes passed; the local RocksDB deleted; a
    new job object on the same folders: the timers come back from the state topic and each alert is
    emitted once, as the reference says for the whole input read in the same chunks."""
    broker, root = fresh(tmp_path)
    all_orders = orders(30, seed=8)
    first, second = all_orders[:25], all_orders[25:]
    produce(broker, "orders", first, queues=1)
    builder = process_job("restart", Unpaid(), key="order", source="orders")
    job = run(builder, broker, root, fire_idle=False, max_records_per_queue=5)
    pending = sum(info["operators"]["PROCESS-4"]["timers_pending"] for info in job.infos[-3:]
                  if "PROCESS-4" in info["operators"])
    assert pending > 0
    before = emitted(broker, "out")
    shutil.rmtree(job.job_dir / "state")
    broker.send_batch("orders", [json.dumps(e) for e in second])
    # an end far in the future: the watermark passes every timer set before the restart
    broker.send_batch("orders", [json.dumps({"order": "end", "type": "paid", "ts": second[-1]["ts"] + 60 * MINUTE})])
    again = InProcessJob(builder.build(), broker, job.job_dir, {**EXACT, "max_records_per_queue": 5})
    again.run_until_idle()
    assert sum(info["replayed_keys"] for info in again.infos) > 0
    got = emitted(broker, "out")
    assert all(len(v) == 1 for v in got.values()), "an alert emitted twice"
    recs = [json.loads(m.body) for m in broker.read("orders", 0)]
    assert got == keyed_process(recs, Unpaid(), lambda e: e["order"], ts, LATENESS)
    assert set(before) <= set(got)


def test_processing_time_timers_fire_once_the_wall_clock_reaches_them(tmp_path: Path) -> None:
    """A ping 1.5 s of wall clock after a key's first record taken: it forwards how many records of the
    key were taken by then. Records the watermark has not passed yet are held (data-time order), so
    the first pings count what was taken; the end of input takes the rest, whose pings come 1.5 s
    later. Every ping fires once, and together they count every record."""
    broker, root = fresh(tmp_path)
    produce(broker, "events", events(20, 1, keys=3), queues=2)
    builder = process_job("pings", Pings(1500))
    job = InProcessJob(builder.build(), broker, root / "job", EXACT)
    job.run_until_idle(fire_idle=False)
    assert emitted(broker, "out") == {}  # not yet: 1.5 s of wall clock have not passed
    held = sum(m.get("held", 0) for info in job.infos[-2:] for name, m in info["operators"].items()
               if name.startswith("PROCESS"))
    assert held > 0  # the last records: the watermark has not passed them
    time.sleep(1.6)
    job.tick()  # an idle tick: the queues run, and their processing-time timers are checked
    job.run_until_idle(fire_idle=False)
    first = emitted(broker, "out")
    assert first and all(len(pings) == 1 for pings in first.values())
    job.run_until_idle()  # the end of input: the held records are taken, their keys' pings set
    time.sleep(1.6)
    job.tick()
    job.run_until_idle(fire_idle=False)
    got = emitted(broker, "out")
    expected: dict[str, int] = {}
    for e in events(20, 1, keys=3):
        expected[e["user"]] = expected.get(e["user"], 0) + 1
    assert {k: sum(v) for k, v in got.items()} == expected
    assert all(len(v) <= 2 for v in got.values())
    job.tick()
    job.run_until_idle(fire_idle=False)
    assert emitted(broker, "out") == got  # each fired once


class Fussy(KeyedProcessFunction[Any, Any]):
    """Keeps a running list per key, but raises on a value of 13, after changing its state."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        seen = ctx.state.get([])
        ctx.state.set([*seen, value["n"]])
        ctx.register_event_time_timer(1_700_000_100_000)  # one timer: set again, it stays one
        ctx.forward(key, value["n"])
        if value["n"] == 13:
            raise ValueError("unlucky")

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, ctx.state.get())


def test_a_call_that_raises_changes_nothing_and_becomes_a_dead_letter(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    recs = [{"user": "u", "ts": 1_700_000_000_000 + i, "n": i} for i in range(11, 16)]
    produce(broker, "events", recs, queues=1)
    job = run(process_job("fussy", Fussy(), shuffle_queues=1), broker, root)
    assert emitted(broker, "out") == {"u": [11, 12, 14, 15, [11, 12, 14, 15]]}
    [dead] = broker.read(f"{job.topology.job_id}-dlq")
    assert "ValueError: unlucky" in dead.headers["rstream-dlq-error"]
    with pytest.raises(RecordError, match="unlucky"):
        run(process_job("fussy-strict", Fussy(), shuffle_queues=1), broker, root, skip_data_error=False)


class FailsOnTimer(KeyedProcessFunction[Any, Any]):
    """A timer per key; ``on_timer`` raises for key ``u1`` after clearing its value."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.state.set(value["n"])
        ctx.register_event_time_timer(ctx.timestamp + 10_000)

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, ctx.state.get())
        ctx.state.clear()
        if key == "u1":
            raise KeyError("no such thing")


def test_an_on_timer_that_raises_is_a_dead_letter_and_the_other_timers_fire(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    recs = [{"user": f"u{i}", "ts": 1_700_000_000_000 + i, "n": i} for i in range(3)]
    produce(broker, "events", recs, queues=1)
    job = run(process_job("timer-fails", FailsOnTimer(), shuffle_queues=1), broker, root)
    assert emitted(broker, "out") == {"u0": [0], "u2": [2]}
    [dead] = broker.read(f"{job.topology.job_id}-dlq")
    assert "KeyError" in dead.headers["rstream-dlq-error"]
    assert "event_time timer 1700000010001 of key 'u1'" in dead.headers["rstream-dlq-value"]
    folder = next((job.job_dir / "state").glob("*/*-shuffleTopic/0"))
    store = StateStore(folder, job.topology.state_topics[job.topology.framed_topics[0]], 0).open(read_only=True)
    try:  # its value is still there (nothing its on_timer did was applied), its timer is gone
        assert {key: value for _op, key, value in store.items("PROCESS-4")} == {"u1": 1}
        assert store.timers("PROCESS-4") == []
    finally:
        store.close()


class KeepsALambda(KeyedProcessFunction[Any, Any]):
    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.state.set(lambda: value)


def test_a_state_value_that_cannot_be_stored_is_a_clear_error(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    produce(broker, "events", events(3, 0), queues=1)
    with pytest.raises(RecordError, match=r"ctx.state.set needs a value rstream can store .* type function"):
        run(process_job("lambda", KeepsALambda()), broker, root, skip_data_error=False)
    with pytest.raises(RecordError, match="ctx.state.set needs"):
        run(process_job("lock", _Holds(threading.Lock())), broker, root, skip_data_error=False)


class _Holds(KeyedProcessFunction[Any, Any]):
    def __init__(self, thing: Any) -> None:
        self.thing = thing

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ctx.state.set({"thing": self.thing})


class NoProcess(KeyedProcessFunction[Any, Any]):
    pass


def test_bad_uses_of_process_are_clear_errors() -> None:
    b = StreamBuilder("bad")
    stream = b.source("events", JsonDeserializer())
    grouped = stream.key_by(user)
    with pytest.raises(DslError, match="needs a keyed stream: key it first"):
        stream.process(Dedup(10))
    with pytest.raises(DslError, match="subclass of rstream.KeyedProcessFunction"):
        grouped.process(lambda k, v, ctx: None)
    with pytest.raises(DslError, match="an instance of Dedup, not the class"):
        grouped.process(Dedup)
    with pytest.raises(DslError, match="NoProcess must define process"):
        grouped.process(NoProcess())
    with pytest.raises(DslError, match="not on windows"):
        grouped.window(TumblingWindow(1000)).process(Dedup(10))
    with pytest.raises(TypeError, match="epoch milliseconds"):
        _register_bad_time()


def _register_bad_time() -> None:
    from rstream.processors.process import ProcessContext

    ctx = ProcessContext("P", None, lambda: 0)  # type: ignore[arg-type]
    ctx.register_event_time_timer("soon")  # type: ignore[arg-type]


def test_values_and_timers_are_in_the_store_and_the_graphs(tmp_path: Path) -> None:
    """The key's value is state like an aggregation's (what job.state() lists); timers are kept beside
    it, and so is a record held until the watermark passes it; both graphs draw the operator, and its
    shuffle topic carries the watermark."""
    broker, root = fresh(tmp_path)
    produce(broker, "orders", [e for e in orders(6, seed=3) if e["type"] == "created"], queues=1)
    builder = process_job("stored", Unpaid(), key="order", source="orders", shuffle_queues=1)
    topology = builder.build()
    assert "process" in topology.logical_dot() and "Unpaid" in topology.logical_dot()
    assert "PROCESS-4" in topology.real_dot()
    assert topology.framed_topics == ["stored-ROCKETMQ-PROCESS-4-shuffleTopic"]
    job = run(builder, broker, root, fire_idle=False)
    shuffle = topology.framed_topics[0]
    folder = next((job.job_dir / "state").glob(f"*/{shuffle}/0"))
    store = StateStore(folder, topology.state_topics[shuffle], 0).open(read_only=True)
    try:
        values = {key: value for op, key, value in store.items("PROCESS-4")}
        timers = store.timers("PROCESS-4")
        held = store.timer_values("PROCESS-4.held")
    finally:
        store.close()
    # the last order is held: the watermark (its time - lateness) has not passed it
    [(at, _where, (t, key, order, _frame))] = held
    assert at == t == order["ts"] and key == order["order"] == "o5"
    assert len(values) == 5 and key not in values and {key for _t, key in timers} == set(values)
    assert all(t == values[key] + 15 * MINUTE for t, key in timers)


def test_forward_may_change_the_key_and_results_continue_keyed(tmp_path: Path) -> None:
    class ByLength(KeyedProcessFunction[Any, Any]):
        def process(self, key: Any, value: Any, ctx: Any) -> None:
            ctx.forward(len(key), value["n"])

    broker, root = fresh(tmp_path)
    produce(broker, "events", [{"user": u, "ts": 1_700_000_000_000, "n": 1} for u in ["a", "bb", "cc", "ddd"]], 1)
    b = StreamBuilder("rekey", shuffle_queues=2)
    (b.source("events", JsonDeserializer()).key_by(user).process(ByLength()).count().to_rstream()
     .sink("out", JsonSerializer(with_key=True)))
    run(b, broker, root)
    assert {k: v[-1] for k, v in emitted(broker, "out").items()} == {1: 1, 2: 2, 3: 1}


def test_query_answers_a_keys_value_and_a_union_feeds_one_process(tmp_path: Path) -> None:
    """Two topics merged (``union``) into one keyed process function: every click ends in one session;
    while sessions are open, ``job.query`` answers a user's value (its open session)."""
    broker, root = fresh(tmp_path)
    a = produce(broker, "events", events(40, 1, step=2500), queues=2)
    b = produce(broker, "more-events", events(30, 2, step=2500), queues=1)
    builder = StreamBuilder("merged", shuffle_queues=2)
    merged = builder.source("events", JsonDeserializer()).union(builder.source("more-events", JsonDeserializer()))
    (merged.select_timestamp(ts).key_by(user).process(Sessions(6000)).to_rstream()
     .sink("out", JsonSerializer(with_key=True)))
    job = InProcessJob(builder.build(), broker, root / "job", EXACT)
    job.run_until_idle(fire_idle=False)
    name = next(n.name for n in job.topology.nodes if n.kind == "process")
    open_sessions = {u: job.query(name, u) for u in ("u0", "u1", "u2", "u3")}
    assert all(s is None or (len(s) == 3 and s[0] <= s[1]) for s in open_sessions.values())
    assert any(s is not None for s in open_sessions.values())
    job.run_until_idle()
    got = emitted(broker, "out")
    assert sum(s[2] for sessions in got.values() for s in sessions) == 70
    assert all(job.query(name, u) is None for u in open_sessions)
    assert sum(len(q) for q in [*a.values(), *b.values()]) == 70


class Expiry(KeyedProcessFunction[Any, Any]):
    """Forwards a key's first record, and ``["expired", time]`` when its timer 2 s later fires."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        if ctx.state.get() is None:
            ctx.state.set(ctx.timestamp)
            ctx.register_event_time_timer(ctx.timestamp + 2000)
            ctx.forward(key, value["n"])

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, ["expired", timestamp])
        ctx.state.clear()


def test_when_every_source_is_idle_the_held_records_are_taken_and_later_timers_wait(tmp_path: Path) -> None:
    """The README's rule for a job whose every source is idle: the records the watermark had not passed
    are taken, event time moves to the latest of them and fires the timers up to it; a timer beyond it
    waits (for data that brings its time, or the end of input, which fires it)."""
    from tests.support.process import T0

    broker, root = fresh(tmp_path)
    produce(broker, "events", [{"user": "a", "ts": T0, "n": 0}, {"user": "a", "ts": T0 + 1000, "n": 1},
                               {"user": "b", "ts": T0 + 5000, "n": 2}], queues=1)
    job = InProcessJob(process_job("idle", Expiry(), shuffle_queues=1).build(), broker, root / "job",
                       {"allowed_lateness_ms": 1000, "idle_timeout_ms": 300})
    job.run_until_idle(fire_idle=False)
    # the watermark T0 + 4000 passed a's records and a's timer; b's record is held
    assert emitted(broker, "out") == {"a": [0, ["expired", T0 + 2000]]}
    time.sleep(0.5)
    job.tick()  # the source is idle now
    job.run_until_idle(fire_idle=False)
    assert emitted(broker, "out") == {"a": [0, ["expired", T0 + 2000]], "b": [2]}  # taken; its timer waits
    time.sleep(0.5)
    job.tick()
    job.run_until_idle(fire_idle=False)
    assert emitted(broker, "out")["b"] == [2]  # idleness alone never moves event time past the data
    job.run_until_idle()  # the end of input fires it
    assert emitted(broker, "out") == {"a": [0, ["expired", T0 + 2000]], "b": [2, ["expired", T0 + 7000]]}
