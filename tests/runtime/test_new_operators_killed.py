"""Issue 40's operators through ``kill -9`` on Spark: one job with a union of two click topics into a
windowed count with ``.late()``, an interval left join of orders and payments, and the orders joined
with a table of customer tiers runs in a process of its own and is SIGKILLed twice mid-run (driver,
JVM and Python workers), after its first batch and half-way; a job resumed from the checkpoint runs to
the end. Every sink then holds what plain Python says, each result once, and so does the state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.time.windows import WindowKey
from tests.support.four_operators import (
    CUSTOMERS,
    EXACT,
    FOUR_OPERATORS_TO_KILL,
    LOWER,
    QUEUES,
    UPPER,
    enrichments,
    final_watermark,
    four_operators,
    late_clicks,
    on_time_and_late,
    send_all,
    sink,
    window_counts,
)
from tests.support.jobs import broker_arg, job_id
from tests.support.joins import interval_pairs, waiting_records
from tests.support.late import as_rows, late_rows, late_stream
from tests.support.processes import TIMEOUT, kill_when
from tests.support.tables import join_queue_as_taken, join_queue_records

pytestmark = pytest.mark.spark

SEED = 40
CHUNK = 6  # records per source queue and batch: clicks-web's queues (45 each) take 8 batches
HALF = 24


def test_union_late_interval_and_table_joins_survive_two_kill_9s(broker: EmbeddedBroker, make_job: Any,
                                                                 tmp_path: Path) -> None:
    send_all(broker, SEED)
    name = job_id("four-killed")
    builder = four_operators(name)
    count, interval, table_join, table = (next(n.name for n in builder.graph.nodes if n.kind == kind)
                                          for kind in ("count", "left_interval_join", "table_join", "table"))
    shuffles = list(builder.build().shuffle_topics)

    def committed(topic: str = "clicks-web") -> int:
        tag = broker.last_commit(name, topic, 0)
        return -1 if tag is None else tag.end_offset

    def first_batch() -> bool:  # a shuffle queue committed: the first batch is half done or done
        return any(broker.has_topic(t) and broker.last_commit(name, t, q) is not None for t in shuffles for q in (0, 1))

    for round_, ready in enumerate([first_batch, lambda: committed() >= HALF]):
        kill_when(["-c", FOUR_OPERATORS_TO_KILL, broker_arg(broker), str(tmp_path / "data"), str(tmp_path / f"tmp{round_}"),
                   name, str(CHUNK)], ready, timeout=TIMEOUT)
        assert 0 <= committed() < (HALF if round_ == 0 else broker.end_offsets("clicks-web")[0]), "not killed mid-run"

    # the batch the kill cut off is rerun as planned, then the rest in larger batches (data_dir: tmp_path / "data")
    resumed = make_job(four_operators(name), max_records_per_queue=1000, **EXACT)
    resumed.run_until_idle(fire_idle=False)
    assert resumed.progress[0].batch_id > 0, "resumed from the checkpoint, not from the start"

    clicks, late = on_time_and_late(broker, "clicks-web", "clicks-app")
    orders, late_orders = on_time_and_late(broker, "orders")
    payments, late_payments = on_time_and_late(broker, "payments")
    assert late and late_orders and late_payments

    # the state before the idle flush: the windows still open, the records that may still meet a
    # partner, and the table as the join's queues built it
    windows = window_counts(clicks)
    wm = final_watermark(broker, "clicks-web", "clicks-app")
    open_windows = {WindowKey(*w): n for w, n in windows.items() if w[2] > wm}
    state = resumed.state(count)
    assert dict(zip(state["key"], state["value"])) == open_windows and open_windows
    for user in {c["user"] for c in clicks}:
        assert (resumed.query(count, user) or {}) == {w: n for w, n in open_windows.items() if w.key == user}
    state = resumed.state(interval)
    held = sorted((side, key, ts, value["v"]) for (side, key), entries in zip(state["key"], state["value"])
                  for ts, value, _matched in entries)
    assert held == waiting_records(orders, payments, LOWER, UPPER, final_watermark(broker, "orders", "payments"))

    [join_topic] = [t for t in shuffles if table_join in t]
    records = join_queue_records(broker, join_topic)
    sent = {t: [json.loads(m.body) for m in broker.read(t)] for t in ("orders", "tiers")}
    assert sorted(json.dumps(v) for side, _k, v in records if side == 0) == sorted(json.dumps(o) for o in sent["orders"])
    assert sorted(json.dumps([k, v]) for side, k, v in records if side == 1) == sorted(
        json.dumps([t["customer"], t["tier"]]) for t in sent["tiers"])  # each record shuffled once
    # before the flush the join has taken what the watermark passed (the rest is held)
    _enriched, tiers = enrichments(join_queue_as_taken(broker, join_topic, final_watermark(broker, "orders", "tiers")))
    state = resumed.state(table_join)
    assert dict(zip(state["key"], state["value"])) == tiers and tiers
    customers = [f"c{i}" for i in range(CUSTOMERS)]
    assert [resumed.query(table, c) for c in customers] == [tiers.get(c) for c in customers]

    resumed.run_until_idle()
    assert sink(broker, "counts") == sorted((([*w], n) for w, n in windows.items()), key=json.dumps)
    stream = late_stream(broker, "late-clicks")
    assert [s[:5] for s in stream] == late_clicks(late) and all(s[5] == count for s in stream)
    rows = resumed.late_records().to_dict("records")
    assert late_rows([r for r in rows if r["operator"] == count]) == as_rows(stream)
    assert sorted((r["data_time"], r["watermark"], r["cause"]) for r in rows if r["operator"] == interval) == sorted(
        (e["ts"], w, "behind watermark") for e, w in late_orders + late_payments)
    assert {r["operator"] for r in rows} == {count, interval}
    assert sink(broker, "paid") == sorted(interval_pairs(orders, payments, LOWER, UPPER, "left"), key=json.dumps)
    enriched, tiers = enrichments(join_queue_as_taken(broker, join_topic))
    assert sink(broker, "enriched") == enriched and enriched
    assert resumed.state(count).empty and resumed.state(interval).empty  # every window fired, every record expired
    state = resumed.state(table_join)
    assert dict(zip(state["key"], state["value"])) == tiers
    for topic, queues in QUEUES.items():  # each range committed once, by the batches of one checkpoint
        for q in range(queues):
            tags = resumed.queue_tags(topic, q)
            assert [t.start_offset for t in tags] == [0, *(t.end_offset for t in tags[:-1])]
            assert tags[-1].end_offset == broker.end_offsets(topic)[q]
            assert [t.batch_id for t in tags] == sorted({t.batch_id for t in tags})
