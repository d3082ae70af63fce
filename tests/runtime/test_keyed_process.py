"""``grouped.process(fn)`` on Spark: unpaid-order alerts equal the plain reference, timers set before a
restart with the local state deleted (or a kill -9) fire after it exactly once, and the operator is in
both graphs, in ``job.state()``, in the progress counters and in ``job.trace``; a running job's idle
ticks fire processing-time timers."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rstream import EmbeddedBroker
from tests.support.inprocess import emitted
from tests.support.jobs import broker_arg, job_id
from tests.support.process import MINUTE, UNPAID_TO_KILL, Pings, Unpaid, events, orders, process_job
from tests.support.processes import kill_when
from tests.support.reference import keyed_process

LATENESS = 1000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
CHUNK = 6


def ts(e: dict[str, Any]) -> int:
    return int(e["ts"])


def order_of(e: dict[str, Any]) -> Any:
    return e["order"]


def test_unpaid_orders_through_a_restart_with_local_state_deleted(broker: EmbeddedBroker, make_job: Any) -> None:
    every = orders(40, seed=11)
    first, second = every[:30], every[30:]
    broker.create_topic("orders", queues=1)
    broker.send_batch("orders", [json.dumps(e) for e in first])
    name = job_id("unpaid")
    job = make_job(process_job(name, Unpaid(), key="order", source="orders"), max_records_per_queue=CHUNK, **EXACT)
    job.run_until_idle(fire_idle=False)
    totals = job.operator_totals()["PROCESS-4"]
    assert totals["timers_pending"] > 0 and totals["records_in"] == len(first)
    state = job.state("PROCESS-4")
    assert set(state["key"]) and all(v in {ts(e) for e in first} for v in state["value"])  # created times
    assert "PROCESS-4" in job.topology.real_dot() and "Unpaid" in job.topology.logical_dot()

    # the path of the first order's "created" record: shuffled, then the key's value set in the store
    trace = job.trace("orders", 0, 0).to_pandas()
    assert list(trace["kind"][:2]) == ["source", "shuffle"]
    changed = trace[trace["kind"] == "state"]
    assert list(changed["operator"]) == ["PROCESS-4"] and list(changed["after"]) == [first[0]["ts"]]
    assert job.trace("orders", 0, 0).exact

    job.delete_local_state()
    broker.send_batch("orders", [json.dumps(e) for e in second])
    end = {"order": "end", "type": "paid", "ts": second[-1]["ts"] + 60 * MINUTE}  # the watermark passes every timer
    broker.send_batch("orders", [json.dumps(end)])
    again = make_job(process_job(name, Unpaid(), key="order", source="orders"), max_records_per_queue=CHUNK, **EXACT)
    again.run_until_idle()
    assert sum(p.replayed_keys for p in again.progress) > 0
    got = emitted(broker, "out")
    assert all(len(alerts) == 1 for alerts in got.values()), "an alert emitted twice"
    records = [json.loads(m.body) for m in broker.read("orders", 0)]
    assert got == keyed_process(records, Unpaid(), order_of, ts, LATENESS)
    assert again.operator_totals()["PROCESS-4"]["timers_pending"] == 0

    # an alerted order's "created" record: its trace follows the timer to the alert, in a later batch
    alerted = sorted(got)[0]
    offset = next(i for i, e in enumerate(records) if e["order"] == alerted and e["type"] == "created")
    hops = again.trace("orders", 0, offset).to_pandas()
    [alert] = hops[hops["kind"] == "emitted"].itertuples()
    assert alert.topic == "out" and alert.operator == "SINK-6" and alert.key == alerted
    assert "PROCESS-4 emitted in batch" in alert.note


def test_kill_9_mid_batch_then_restart_fires_each_timer_once(broker: EmbeddedBroker, make_job: Any, tmp_path: Path) -> None:
    """The whole job process (driver, JVM, Python workers) killed with SIGKILL while it works through
    the orders; a new job resumes from the checkpoint: every alert once, as the reference says."""
    every = orders(120, seed=5)
    broker.create_topic("orders", queues=1)
    broker.send_batch("orders", [json.dumps(e) for e in every])
    name = job_id("unpaid-kill")
    shuffle = f"{name}-ROCKETMQ-PROCESS-4-shuffleTopic"

    def mid_run() -> bool:  # timers pending
        tag = broker.last_commit(name, "orders", 0)
        return tag is not None and tag.end_offset >= 8 * CHUNK and broker.has_topic("out") and sum(broker.end_offsets("out")) > 0

    kill_when(["-c", UNPAID_TO_KILL, broker_arg(broker), str(tmp_path / "data"), str(tmp_path / "tmp"), name, str(CHUNK)],
              mid_run)
    assert broker.last_commit(name, "orders", 0).end_offset < len(every)
    assert broker.has_topic(shuffle)
    resumed = make_job(process_job(name, Unpaid(), key="order", source="orders"), max_records_per_queue=CHUNK, **EXACT)
    resumed.run_until_idle()
    got = emitted(broker, "out")
    assert all(len(alerts) == 1 for alerts in got.values()), "an alert emitted twice"
    assert got == keyed_process(every, Unpaid(), order_of, ts, LATENESS)


def test_a_running_job_fires_processing_time_timers_while_no_input_comes(broker: EmbeddedBroker, make_job: Any) -> None:
    clicks = events(30, seed=2, keys=3)
    broker.create_topic("events", queues=2)
    job = make_job(process_job(job_id("pings"), Pings(1500)), idle_timeout_ms=600, trigger_interval_ms=100)
    job.start()
    try:
        broker.send_batch("events", [json.dumps(e) for e in clicks])
        users = {e["user"] for e in clicks}
        job.wait_for(lambda j: set(emitted(broker, "out")) == users, timeout=120, what="every key's ping")
        time.sleep(2)  # more ticks: nothing fires twice
    finally:
        job.stop()
    expected = {u: [sum(1 for e in clicks if e["user"] == u)] for u in users}
    assert emitted(broker, "out") == expected
    assert job.operator_totals()["PROCESS-4"]["timers_pending"] == 0
