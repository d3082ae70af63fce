"""A stream–table join on Spark: the wiring (both sides shuffled into one join topic, the table kept
as the join's keyed state, queried and traced), and a table's changelog (``to_stream()``); the in-process
tests check their semantics on generated input."""

from __future__ import annotations

import json
from typing import Any

from rstream import EmbeddedBroker
from tests.support.inprocess import emitted
from tests.support.jobs import job_id
from tests.support.tables import (
    changelog,
    changelog_job,
    join_queue_as_taken,
    joined_in_time_order,
    replay,
    table_job,
    timed_table_job,
    write_timed,
)


def test_left_stream_table_join_on_spark(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("prices", queues=1)
    broker.create_topic("orders", queues=2)
    prices = [{"k": "a", "v": 2}, {"k": "b", "v": 3}, {"k": "b", "v": None}, {"k": "c", "v": 7}]
    broker.send_batch("prices", [json.dumps(p) for p in prices])
    name = job_id("tables")
    make_job(table_job(name, "left")).run_until_idle()
    orders = [{"k": k, "n": i} for i, k in enumerate("abcdab")]
    broker.send_batch("orders", [json.dumps(o) for o in orders])
    job = make_job(table_job(name, "left"))
    job.run_until_idle()
    assert emitted(broker, "out") == {"a": [[0, 2], [4, 2]], "b": [[1, None], [5, None]], "c": [[2, 7]], "d": [[3, None]]}
    node = next(n for n in job.topology.nodes if n.kind == "left_table_join")
    assert replay(join_queue_as_taken(broker, node.pipeline), "left")[0] == emitted(broker, "out")
    assert [job.query(node.name, k) for k in "abcd"] == [2, None, 7, None] == [job.query("TABLE-4", k) for k in "abcd"]
    assert {row["key"]: row["value"] for row in job.state(node.name).to_dict("records")} == {"a": 2, "c": 7}

    # a stream record's trace: shuffled into the join topic, then the enriched record in the sink
    order = next(m for m in broker.read("orders") if json.loads(m.body) == {"k": "c", "n": 2})
    hops = job.trace("orders", order.queue_id, order.offset).to_pandas()
    assert list(hops["kind"])[:2] == ["source", "shuffle"] and hops.iloc[1]["topic"] == node.pipeline
    [sink] = hops[hops["kind"] == "sink"].itertuples()
    assert json.loads(broker.read("out", sink.queue, sink.offset, sink.offset + 1)[0].body) == {"key": "c", "value": [2, 7]}
    # a table update's trace: the table's state entry it changed, and no result
    update = broker.read("prices", 0, 2, 3)[0]  # b deleted
    hops = job.trace("prices", 0, update.offset).to_pandas()
    state = hops[hops["kind"] == "state"]
    assert state[["key", "before", "after"]].values.tolist() == [["b", 3, None]]
    assert "sink" not in set(hops["kind"])


def test_a_new_job_over_both_sides_joins_in_data_time_order_on_spark(broker: EmbeddedBroker, make_job: Any) -> None:
    """Prices and orders written before the job starts, their data times interleaved, so the join's
    first batch holds both sides in whatever order Spark's source tasks wrote them: each order meets
    the price of its own time, and a second job over the same topics writes the same."""
    prices = [{"k": k, "v": v, "ts": ts} for k, v, ts in
              [("a", 1, 100), ("b", 5, 150), ("a", 2, 300), ("b", None, 350), ("a", 3, 500), ("b", 6, 600)]]
    orders = [[{"k": k, "n": i, "ts": ts} for i, (k, ts) in enumerate([("a", 50), ("a", 200), ("b", 300), ("a", 500)])],
              [{"k": k, "n": 10 + i, "ts": ts} for i, (k, ts) in enumerate([("b", 160), ("a", 320), ("b", 400), ("b", 650)])]]
    write_timed(broker, prices, orders)
    want = joined_in_time_order(prices, orders, "left")
    assert want == {"a": [[0, None], [1, 1], [11, 2], [3, 3]], "b": [[10, 5], [2, 5], [12, None], [13, 6]]}
    for run in range(2):
        out = f"out{run}"
        broker.create_topic(out, queues=1)
        job = make_job(timed_table_job(job_id("timed"), "left", queues=2, out=out))
        job.run_until_idle()
        assert emitted(broker, out) == want
    # the trace of an order taken at the end of its batch: its enriched record, with the price of its time
    order = next(m for m in broker.read("orders", 1) if json.loads(m.body)["n"] == 11)
    hops = job.trace("orders", 1, order.offset).to_pandas()
    [sink] = hops[hops["kind"] == "sink"].itertuples()
    assert json.loads(broker.read(out, sink.queue, sink.offset, sink.offset + 1)[0].body) == {"key": "a", "value": [11, 2]}
    # and of a price: the table's entry it changed
    price = broker.read("prices", 0, 2, 3)[0]  # a: 2 at 300
    state = job.trace("prices", 0, price.offset).to_pandas()
    assert state[state["kind"] == "state"][["key", "before", "after"]].values.tolist() == [["a", 1, 2]]
    assert list(state["kind"]) == ["source", "shuffle", "state"]  # the orders its batch joined are not its results
    assert state.iloc[1]["operator"].startswith("SHUFFLE_SINK_RIGHT")  # the table side's writer
    assert hops[hops["kind"] == "shuffle"].iloc[0]["operator"].startswith("SHUFFLE_SINK_LEFT")  # the order's


def test_a_table_s_changelog_on_spark(broker: EmbeddedBroker, make_job: Any) -> None:
    """``to_stream()`` on Spark: every update and delete once, each key's in one queue, in the order
    of its source queue (one here), at its data time."""
    broker.create_topic("prices", queues=1)
    ups = [("a", 2), ("b", 3), ("a", None), ("b", None), ("c", 7), ("a", 5), ("x", None), ("c", 8)]
    broker.send_batch("prices", [json.dumps({"k": k, "v": v, "ts": 1000 + i}) for i, (k, v) in enumerate(ups)])
    make_job(changelog_job(job_id("changes"))).run_until_idle()
    assert changelog(broker) == {"a": [(1000, 2), (1002, None), (1005, 5)], "b": [(1001, 3), (1003, None)],
                                 "c": [(1004, 7), (1007, 8)], "x": [(1006, None)]}


def test_a_running_join_takes_what_it_holds_once_its_sources_are_idle(broker: EmbeddedBroker, make_job: Any) -> None:
    """A started job's join holds each record until the watermark passes it; when no more input comes,
    its idle ticks declare the sources idle and it takes the rest: every order is enriched without
    another record to move time on."""
    broker.create_topic("prices", queues=1)
    broker.create_topic("orders", queues=2)
    job = make_job(timed_table_job(job_id("idle-join"), "left"), idle_timeout_ms=600, trigger_interval_ms=100)
    job.start()
    try:
        t = 1_700_000_000_000
        broker.send_batch("prices", [json.dumps({"k": "a", "v": 5, "ts": t})])
        orders = [{"k": "a", "n": i, "ts": t + 1000 * i} for i in range(1, 7)]
        broker.send_batch("orders", [json.dumps(o) for o in orders])
        job.wait_for(lambda j: len(emitted(broker, "out").get("a", [])) == len(orders), timeout=120,
                     what="every order enriched")
    finally:
        job.stop()
    assert sorted(emitted(broker, "out")["a"]) == [[o["n"], 5] for o in orders]
