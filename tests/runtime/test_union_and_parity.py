"""``union`` and the RocketMQ Streams 1.1 parity operators on Spark, against the plain reference: a
window over two topics (one lagging), the same job through a restart with its local state deleted, a
record of the second topic traced through the union, and window filter/map/avg(), grouped flat_map
and count(selector) in one job."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    RocketMQStream,
    StreamBuilder,
    TumblingWindow,
)
from tests.support.jobs import job_id
from tests.support.reference import split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results

BASE = 1_700_000_000_000


def orders(n: int, seed: int, region: str, lag: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"region": region, "sku": f"s{rng.randrange(3)}", "amount": rng.randint(1, 50),
             "ts": BASE - lag + i * 30_000 // n - rng.randrange(4000)} for i in range(n)]


def union_window_sum(job: str) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    eu = b.source("eu", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    us = b.source("us", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    (eu.union(us).key_by(lambda o: o["sku"]).window(TumblingWindow(5000)).sum(lambda o: o["amount"])
     .to_rstream().sink("results", JsonSerializer(with_key=True)))
    return b


def stored(broker: EmbeddedBroker, *topics: str) -> dict[tuple[str, int], list[Any]]:
    """Every record of ``topics`` per (topic, queue), in offset order, as the broker holds them."""
    return {(t, q): [json.loads(m.body) for m in broker.read(t, q)]
            for t in topics for q in range(len(broker.end_offsets(t)))}


def expected_sums(per_queue: dict[tuple[str, int], list[Any]]) -> tuple[dict[Any, Any], int]:
    on_time, late = split_late(per_queue, lambda o: o["ts"], LATENESS)
    frame = window_frame(on_time, lambda o: o["sku"], lambda o: o["ts"], lambda o: o["amount"], 5000)
    return {(k, s, e): v for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].sum().items()}, len(late)


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
@given(seed=st.integers(0, 10_000), lag=st.sampled_from([3000, 15_000]), per_range=st.sampled_from([7, 1000]))
def test_a_window_over_a_union_of_two_topics_on_spark(spark: Any, tmp_path_factory: Any, seed: int, lag: int,
                                                      per_range: int) -> None:
    root = tmp_path_factory.mktemp("union")
    broker = EmbeddedBroker(root / "broker")
    produce(broker, "eu", orders(80, seed, "eu"), queues=2)
    produce(broker, "us", orders(50, seed + 1, "us", lag), queues=1)
    job = RocketMQStream(union_window_sum(job_id("union")).build(),
                         {"data_dir": str(root), "max_records_per_queue": per_range, **EXACT}, broker=broker, spark=spark)
    job.run_until_idle()
    expected, late = expected_sums(stored(broker, "eu", "us"))
    assert results(broker) == expected
    assert len(job.late_records()) == late


def test_a_union_survives_a_restart_with_its_local_state_deleted(broker: EmbeddedBroker, make_job: Any) -> None:
    eu_orders, us_orders = orders(160, 5, "eu"), orders(100, 6, "us", 6000)
    produce(broker, "eu", eu_orders[:80], queues=2)
    produce(broker, "us", us_orders[:50], queues=2)
    name = job_id("urestart")
    first = make_job(union_window_sum(name), max_records_per_queue=20, **EXACT)
    first.run_until_idle(fire_idle=False)
    assert first.state()["key"].size > 0  # windows left open in the local state...
    first.delete_local_state()  # ...and lost
    broker.send_batch("eu", [json.dumps(o) for o in eu_orders[80:]])
    broker.send_batch("us", [json.dumps(o) for o in us_orders[50:]])
    second = make_job(union_window_sum(name), max_records_per_queue=20, **EXACT)
    second.run_until_idle()
    assert sum(p.replayed_keys for p in second.progress) > 0
    expected, late = expected_sums(stored(broker, "eu", "us"))
    assert results(broker) == expected
    assert len(second.late_records()) == late


def test_a_record_of_the_second_input_is_traced_through_the_union(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("a", queues=1)
    broker.create_topic("b", queues=2)
    broker.send_batch("a", ["x y", "y"])
    broker.send_batch("b", ["y z", "x"])
    b = StreamBuilder(job_id("utrace"), shuffle_queues=2)
    words_a = b.source("a").flat_map(str.split)
    words_b = b.source("b").flat_map(str.split)
    words_a.union(words_b).key_by(lambda w: w).count().to_rstream().sink("counts")
    job = make_job(b.build(combine=False))
    job.run_until_idle()
    record = next(m for m in broker.read("b") if m.body == b"y z")
    trace = job.trace("b", record.queue_id, record.offset)
    assert trace.exact
    assert {"SOURCE-3", "FLAT_MAP-4", "UNION-5@b", "KEY_BY-6@b", "SHUFFLE_SINK-7@b", "COUNT-7"} <= set(trace.operators)
    assert not {"SOURCE-1", "FLAT_MAP-2", "UNION-5@a", "KEY_BY-6@a"} & set(trace.operators)  # the other input's branch is not on its path
    sinks = trace.to_pandas()
    sinks = sinks[sinks["kind"] == "sink"]
    y, z = sorted(sinks["value"])  # y's count then depends on the order of its shuffle queue
    assert y in {"y:1", "y:2", "y:3"} and z == "z:1"
    for row in sinks.itertuples():
        assert broker.read("counts", row.queue, row.offset, row.offset + 1)[0].body.decode() == row.value
    final = {k: max(int(m.body.decode().rpartition(":")[2]) for m in broker.read("counts")
                    if m.body.decode().rpartition(":")[0] == k) for k in "xyz"}
    assert final == {"x": 2, "y": 3, "z": 1}


def test_rocketmq_streams_1_1_parity_operators_on_spark(broker: EmbeddedBroker, make_job: Any) -> None:
    """``window(w).filter(...).map(...).avg()`` against pandas on generated out-of-order clicks, and
    ``key_by(...).flat_map(...).count(selector)`` (the selector changes nothing, as in 1.1)."""
    per_queue = produce(broker, "clicks", clicks(150, seed=3), queues=2)
    b = StreamBuilder(job_id("parity"), shuffle_queues=2)
    src = b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    (src.key_by(lambda e: e["user"]).window(TumblingWindow(4000)).filter(lambda e: e["amount"] > 10)
     .map(lambda e: e["amount"]).avg().to_rstream().sink("results", JsonSerializer(with_key=True)))
    (src.key_by(lambda e: e["user"]).flat_map(lambda e: [e["amount"]] * (e["amount"] % 3))
     .count(lambda amount: amount > 100).to_rstream().sink("counts", JsonSerializer(with_key=True)))
    job = make_job(b, **EXACT)
    job.run_until_idle()
    kept = {q: [e for e in records if e["amount"] > 10] for q, records in per_queue.items()}
    on_time, late = split_late(kept, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 4000)
    expected = frame.groupby(["key", "start", "end"])["value"].mean().to_dict()
    got = results(broker)
    assert got.keys() == expected.keys() and all(abs(got[k] - expected[k]) < 1e-9 for k in expected)
    assert len(job.late_records()) == len(late)
    totals = Counter[str]()
    for records in per_queue.values():
        for e in records:
            totals[e["user"]] += e["amount"] % 3
    counts: dict[str, list[int]] = {}
    for m in sorted(broker.read("counts"), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        counts.setdefault(doc["key"], []).append(doc["value"])
    assert counts == {user: list(range(1, n + 1)) for user, n in totals.items() if n}
