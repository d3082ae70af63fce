"""``union`` run in this process (no Spark) against plain Python: streams of two topics (and branches of
one stream) merged, then windowed, counted or written out. Generated out-of-order input; the window
after a union closes only when every input's watermark has passed its end (the minimum)."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from tests.support.inprocess import emitted, produce, record_by_record, results, run
from tests.support.reference import split_late, window_frame

LATENESS = 2000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
BASE = 1_700_000_000_000
_RUNS = itertools.count()
FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


def orders(n: int, seed: int, region: str, lag: int = 0, spread: int = 30_000, disorder: int = 4000) -> list[dict[str, Any]]:
    """Orders of one region, roughly in time order, some out of order (some beyond the lateness);
    ``lag`` ms behind the base time."""
    rng = random.Random(seed)
    return [{"region": region, "sku": f"s{rng.randrange(3)}", "amount": rng.randint(1, 50),
             "ts": BASE - lag + i * spread // max(n, 1) - rng.randrange(disorder)} for i in range(n)]


def by_topic_queue(**per_topic: dict[int, list[Any]]) -> dict[tuple[str, int], list[Any]]:
    return {(topic, q): records for topic, queues in per_topic.items() for q, records in queues.items()}


def union_window_sum(job: str, size: int, stamp_after: bool) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    eu, us = b.source("eu", JsonDeserializer()), b.source("us", JsonDeserializer())
    if stamp_after:
        merged = eu.union(us).select_timestamp(lambda o: o["ts"])
    else:
        merged = eu.select_timestamp(lambda o: o["ts"]).union(us.select_timestamp(lambda o: o["ts"]))
    (merged.key_by(lambda o: o["sku"]).window(TumblingWindow(size)).sum(lambda o: o["amount"])
     .to_rstream().sink("results", JsonSerializer(with_key=True)))
    return b


@FAST
@given(n_eu=st.integers(0, 60), n_us=st.integers(1, 60), seed=st.integers(0, 10_000),
       lag=st.sampled_from([0, 5000, 20_000]), size=st.sampled_from([1000, 5000]),
       queues=st.tuples(st.integers(1, 3), st.integers(1, 3)), per_range=st.sampled_from([4, 1000]),
       stamp_after=st.booleans())
def test_a_window_over_a_union_of_two_topics_equals_the_reference(
        tmp_path: Path, n_eu: int, n_us: int, seed: int, lag: int, size: int, queues: tuple[int, int],
        per_range: int, stamp_after: bool) -> None:
    """The US orders lag behind: were the window's watermark not the minimum over both topics, their
    windows would fire before they came, and on-time US orders would be reported late."""
    broker, root = fresh(tmp_path)
    eu = produce(broker, "eu", orders(n_eu, seed, "eu"), queues[0])
    us = produce(broker, "us", orders(n_us, seed + 1, "us", lag), queues[1])
    job = run(union_window_sum("union-win", size, stamp_after), broker, root, max_records_per_queue=per_range, **EXACT)
    on_time, late = split_late(by_topic_queue(eu=eu, us=us), lambda o: o["ts"], LATENESS)
    frame = window_frame(on_time, lambda o: o["sku"], lambda o: o["ts"], lambda o: o["amount"], size)
    expected = {(k, s, e): v for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].sum().items()}
    assert results(broker) == expected
    assert sum(info.get("late", 0) for info in job.infos) == len(late)


def test_a_window_after_a_union_waits_for_the_slowest_input(tmp_path: Path) -> None:
    """EU has passed the window's end; US has not, so nothing fires. Once US passes it, it fires."""
    broker, root = fresh(tmp_path)
    produce(broker, "eu", [{"sku": "a", "amount": 1, "ts": BASE + t} for t in (0, 500, 9000)], 1)
    produce(broker, "us", [{"sku": "a", "amount": 10, "ts": BASE + 100}], 1)
    job = InProcessJob(union_window_sum("union-wait", 1000, False).build(), broker, root / "job", EXACT)
    while job.run_batch():
        pass
    assert results(broker) == {}  # the EU watermark (BASE + 7000) is past [BASE, BASE + 1000), US's is not
    broker.send_batch("us", [json.dumps({"sku": "a", "amount": 100, "ts": BASE + 8000})])
    while job.run_batch():
        pass
    assert results(broker) == {("a", BASE, BASE + 1000): 12}  # 1 + 1 from EU, 10 from US


@FAST
@given(n=st.integers(1, 50), m=st.integers(0, 50), seed=st.integers(0, 10_000), per_range=st.sampled_from([3, 1000]),
       chunked=st.booleans())
def test_a_keyed_count_over_branches_of_one_stream_and_another_topic_is_exact(
        tmp_path: Path, n: int, m: int, seed: int, per_range: int, chunked: bool) -> None:
    """Big EU orders, EU orders again (the same stream given twice: each record comes twice) and US
    orders, counted per sku: every sku's running counts are 1, 2, ..., its total, each once."""
    broker, root = fresh(tmp_path)
    eu_orders, us_orders = orders(n, seed, "eu"), orders(m, seed + 1, "us")
    produce(broker, "eu", eu_orders, 2)
    produce(broker, "us", us_orders, 1)
    b = StreamBuilder("union-count", shuffle_queues=3)
    eu, us = b.source("eu", JsonDeserializer()), b.source("us", JsonDeserializer())
    big = eu.filter(lambda o: o["amount"] > 25)
    (big.union(eu, us, eu).key_by(lambda o: o["sku"]).count().to_rstream()
     .sink("counts", JsonSerializer(with_key=True)))
    with contextlib.nullcontext() if chunked else record_by_record():
        run(b, broker, root, max_records_per_queue=per_range)
    expected = Counter(o["sku"] for o in eu_orders if o["amount"] > 25)
    expected.update(o["sku"] for o in eu_orders + eu_orders + us_orders)
    assert emitted(broker, "counts") == {sku: list(range(1, total + 1)) for sku, total in expected.items()}


def test_stateless_operators_after_a_union_see_every_record_of_every_input(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    eu_orders, us_orders = orders(40, 1, "eu"), orders(30, 2, "us")
    produce(broker, "eu", eu_orders, 2)
    produce(broker, "us", us_orders, 3)
    b = StreamBuilder("union-map", shuffle_queues=2)
    eu, us = b.source("eu", JsonDeserializer()), b.source("us", JsonDeserializer())
    (eu.union(us).filter(lambda o: o["amount"] % 2 == 0).map(lambda o: f"{o['region']}:{o['amount']}")
     .sink("lines", JsonSerializer()))
    run(b, broker, root)
    got = Counter(json.loads(m.body) for m in broker.read("lines"))
    assert got == Counter(f"{o['region']}:{o['amount']}" for o in eu_orders + us_orders if o["amount"] % 2 == 0)


def test_a_union_of_an_aggregation_s_results_and_a_source(tmp_path: Path) -> None:
    """Counts per sku (a shuffle topic's pipeline) merged with raw US orders (a source's pipeline)."""
    broker, root = fresh(tmp_path)
    eu_orders, us_orders = orders(20, 3, "eu"), orders(10, 4, "us")
    produce(broker, "eu", eu_orders, 1)
    produce(broker, "us", us_orders, 1)
    b = StreamBuilder("union-mixed", shuffle_queues=2)
    counts = b.source("eu", JsonDeserializer()).key_by(lambda o: o["sku"]).count().to_rstream()
    us = b.source("us", JsonDeserializer()).map(lambda o: o["amount"])
    counts.union(us).sink("mixed", JsonSerializer())
    run(b, broker, root)
    got = Counter(json.loads(m.body) for m in broker.read("mixed"))
    running = Counter[Any]()
    for n in Counter(o["sku"] for o in eu_orders).values():
        running.update(range(1, n + 1))
    running.update(o["amount"] for o in us_orders)
    assert got == running


@FAST
@given(n=st.integers(1, 40), seed=st.integers(0, 10_000), per_range=st.sampled_from([3, 1000]))
def test_one_topic_read_twice_and_merged_gives_each_record_twice(tmp_path: Path, n: int, seed: int, per_range: int) -> None:
    """Two sources of one topic are two roots of its pipeline, both feeding one union node: what comes
    after it runs (and flushes, and keeps its watermark) once per batch, with every record twice."""
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "eu", orders(n, seed, "eu"), 2)
    b = StreamBuilder("union-twice", shuffle_queues=2)
    first = b.source("eu", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    second = b.source("eu", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    merged = first.union(second)
    merged.key_by(lambda o: o["sku"]).count().to_rstream().sink("counts", JsonSerializer(with_key=True))
    (merged.key_by(lambda o: o["sku"]).window(TumblingWindow(5000)).sum(lambda o: o["amount"]).to_rstream()
     .sink("results", JsonSerializer(with_key=True)))
    job = run(b, broker, root, max_records_per_queue=per_range, **EXACT)
    everything = [o for records in per_queue.values() for o in records]
    totals = Counter(o["sku"] for o in everything + everything)
    assert emitted(broker, "counts") == {sku: list(range(1, n + 1)) for sku, n in totals.items()}
    twice = {q: [o for o in records for _ in range(2)] for q, records in per_queue.items()}
    on_time, late = split_late(twice, lambda o: o["ts"], LATENESS)
    frame = window_frame(on_time, lambda o: o["sku"], lambda o: o["ts"], lambda o: o["amount"], 5000)
    assert results(broker) == {(k, s, e): v for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].sum().items()}
    assert sum(info.get("late", 0) for info in job.infos) == len(late)
