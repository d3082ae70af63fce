"""Operators on Spark against pandas over the same records: sum, min, max, aggregate, branches."""

from __future__ import annotations

import json
import random
from typing import Any

import pandas as pd
import pytest

from rstream import Accumulator, EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from tests.support.jobs import job_id, sink_values


def orders(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"id": i, "user": rng.choice(["ann", "bob", "cy", "dee"]), "item": rng.choice(["pen", "ink", "pad"]),
         "amount": rng.randint(-5, 100), "price": round(rng.uniform(0.5, 20), 2)}
        for i in range(n)
    ]


def produce(broker: EmbeddedBroker, topic: str, records: list[dict[str, Any]], queues: int = 3) -> None:
    broker.create_topic(topic, queues=queues)
    broker.send_batch(topic, [json.dumps(r) for r in records])


def parse_json_kv(body: bytes) -> tuple[Any, Any]:
    doc = json.loads(body)
    key = tuple(doc["key"]) if isinstance(doc["key"], list) else doc["key"]
    return key, doc["value"]


def last_per_key(broker: EmbeddedBroker, topic: str) -> dict[Any, Any]:
    return {k: vs[-1] for k, vs in sink_values(broker, topic, parse_json_kv).items()}


class AvgPrice(Accumulator):
    def initial(self) -> list[float]:
        return [0.0, 0]

    def add(self, acc: list[float], value: dict[str, Any]) -> list[float]:
        return [acc[0] + value["price"], acc[1] + 1]

    def result(self, acc: list[float]) -> float:
        return round(acc[0] / acc[1], 6)


@pytest.mark.parametrize("emit", ["record", "batch"])
def test_sum_min_max_aggregate_match_pandas(broker: EmbeddedBroker, make_job: Any, emit: str) -> None:
    records = orders(400, seed=1)
    produce(broker, "orders", records)
    b = StreamBuilder(job_id("agg"), shuffle_queues=4)
    s = b.source("orders", JsonDeserializer())
    by_user = s.key_by(lambda o: o["user"])
    ser = JsonSerializer(with_key=True)
    by_user.sum(lambda o: o["amount"]).sink("sum", ser)
    by_user.min(lambda o: o["amount"]).sink("min", ser)
    by_user.max(lambda o: o["price"]).sink("max", ser)
    by_user.aggregate(AvgPrice()).sink("avg", ser)
    s.key_by(lambda o: (o["user"], o["item"])).count().sink("pairs", ser)  # composite key
    make_job(b, aggregate_emit=emit, max_records_per_queue=50).run_until_idle()

    df = pd.DataFrame(records)
    g = df.groupby("user")
    assert last_per_key(broker, "sum") == g["amount"].sum().to_dict()
    assert last_per_key(broker, "min") == g["amount"].min().to_dict()
    assert last_per_key(broker, "max") == g["price"].max().to_dict()
    assert last_per_key(broker, "avg") == pytest.approx(g["price"].mean().to_dict(), abs=1e-5)
    assert last_per_key(broker, "pairs") == df.groupby(["user", "item"]).size().to_dict()
    running = sink_values(broker, "sum", parse_json_kv)
    if emit == "record":
        # every input emits the updated value: per user, the emitted sums are running sums over some
        # interleaving of the source queues, so their steps are exactly that user's amounts
        for user, frame in g:
            steps = [b - a for a, b in zip([0, *running[user]], running[user])]
            assert sorted(steps) == sorted(frame["amount"].tolist())
    else:
        # one update per key and batch: fewer than the inputs, and the counts only grow
        assert 0 < sum(len(v) for v in running.values()) < len(records)
        for counts in sink_values(broker, "pairs", parse_json_kv).values():
            assert counts == sorted(set(counts))


def test_branches_feed_several_sinks(broker: EmbeddedBroker, make_job: Any) -> None:
    sentences = ["The cat sat", "on the mat", "", "THE END of it"]
    broker.create_topic("text", queues=2)
    broker.send_batch("text", sentences)
    b = StreamBuilder(job_id("branch"))
    words = b.source("text").flat_map(str.split).map(str.lower)
    words.filter(lambda w: len(w) >= 3).sink("long-words", lambda k, v: v.encode())
    words.map(len).sink("lengths", lambda k, v: str(v).encode())
    counts = words.key_by(lambda w: w).count()
    counts.sink("counts")
    counts.filter(lambda c: c > 1).map(lambda c: c * 100).to_rstream().sink("repeated")
    make_job(b).run_until_idle()

    all_words = [w.lower() for s in sentences for w in s.split()]
    assert sorted(m.body.decode() for m in broker.read("long-words")) == sorted(w for w in all_words if len(w) >= 3)
    assert sorted(int(m.body) for m in broker.read("lengths")) == sorted(len(w) for w in all_words)
    counted = {k: [int(v) for v in vs] for k, vs in sink_values(broker, "counts").items()}
    expected = pd.Series(all_words).value_counts().to_dict()
    assert {k: vs[-1] for k, vs in counted.items()} == expected
    assert {k: [int(v) for v in vs] for k, vs in sink_values(broker, "repeated").items()} == \
        {k: [c * 100 for c in range(2, n + 1)] for k, n in expected.items() if n > 1}


def test_print_lines_reach_the_driver(broker: EmbeddedBroker, make_job: Any, capsys: Any) -> None:
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["x", "y"])
    b = StreamBuilder(job_id("print"))
    b.source("in").map(str.upper).print(prefix="> ")
    make_job(b).run_until_idle()
    assert capsys.readouterr().out.splitlines() == ["> None: X", "> None: Y"]


def test_select_timestamp_sets_the_time_records_carry(broker: EmbeddedBroker, make_job: Any) -> None:
    events = [{"id": i, "ts": 1_700_000_000_000 + i * 1000} for i in range(5)]
    produce(broker, "events", events, queues=1)
    b = StreamBuilder(job_id("ts"))
    s = b.source("events", JsonDeserializer())
    s.sink("born-time", JsonSerializer())
    s.select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["id"] % 2).count().sink("event-time", JsonSerializer())
    make_job(b).run_until_idle()
    born = [m.born_timestamp for m in broker.read("born-time")]
    assert born == [m.born_timestamp for m in broker.read("events")]  # without select_timestamp: born time
    assert sorted(m.born_timestamp for m in broker.read("event-time")) == [e["ts"] for e in events]


def test_foreach_runs_for_every_record(broker: EmbeddedBroker, make_job: Any, tmp_path: Any) -> None:
    broker.create_topic("in", queues=2)
    broker.send_batch("in", [f"line {i}" for i in range(20)])
    seen = tmp_path / "seen"
    seen.mkdir()

    def remember(value: str) -> None:  # runs in the Spark task: leave a trace on disk
        (seen / value.replace(" ", "-")).write_text(value)

    b = StreamBuilder(job_id("foreach"))
    b.source("in").foreach(remember).map(len).sink("lengths", lambda k, v: str(v).encode())
    make_job(b).run_until_idle()
    assert sorted(p.read_text() for p in seen.iterdir()) == sorted(f"line {i}" for i in range(20))
    assert len(broker.read("lengths")) == 20


def test_consume_from_last_skips_what_was_there_before(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("in", queues=2)
    broker.send_batch("in", ["old-1", "old-2"])
    b = StreamBuilder(job_id("last"))
    b.source("in").sink("out", lambda k, v: v.encode())
    job = make_job(b, consume_from="last", trigger_interval_ms=100)
    job.start()  # "last" is the end of each queue when the job starts
    try:
        broker.send_batch("in", ["new-1", "new-2", "new-3"])
        job.run_until_idle(timeout=120)
    finally:
        job.stop()
    assert sorted(m.body.decode() for m in broker.read("out")) == ["new-1", "new-2", "new-3"]
