"""What RocketMQ Streams 1.1 has and rstream added for parity, run in this process against plain
Python: ``filter`` and ``map`` on a window stream before it aggregates, ``avg()`` without a function,
``flat_map`` on a grouped stream, and ``count(selector)`` (which, as in 1.1, counts every record)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    SlidingWindow,
    StreamBuilder,
    TumblingWindow,
)
from rstream.processors.base import dead_letter_row
from rstream.runtime.topics import dlq_topic_name
from tests.support.inprocess import emitted, produce, record_by_record, results, run
from tests.support.reference import split_late, window_frame
from tests.support.windows import clicks

LATENESS = 2000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
_RUNS = itertools.count()
FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


def filtered_avg(job: str, window: Any, threshold: int) -> StreamBuilder:
    """RocketMQ Streams 1.1's WindowAvg shape: window -> filter -> map -> avg()."""
    b = StreamBuilder(job, shuffle_queues=3)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(window).filter(lambda e: e["amount"] >= threshold).map(lambda e: e["amount"]).avg()
     .to_rstream().sink("results", JsonSerializer(with_key=True)))
    return b


@FAST
@given(n=st.integers(1, 80), seed=st.integers(0, 10_000), threshold=st.sampled_from([0, 20, 45]),
       slide=st.sampled_from([None, 1000]), queues=st.integers(1, 3), per_range=st.sampled_from([5, 1000]))
def test_window_filter_map_and_avg_equal_the_reference(tmp_path: Path, n: int, seed: int, threshold: int,
                                                       slide: int | None, queues: int, per_range: int) -> None:
    """A record filtered out before the window never reaches the shuffle: it moves no watermark and
    is never late, so the reference splits late records among the kept ones."""
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "clicks", clicks(n, seed), queues)
    window = TumblingWindow(3000) if slide is None else SlidingWindow(3000, slide)
    job = run(filtered_avg("parity-avg", window, threshold), broker, root, max_records_per_queue=per_range, **EXACT)
    kept = {q: [e for e in records if e["amount"] >= threshold] for q, records in per_queue.items()}
    on_time, late = split_late(kept, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 3000, slide)
    expected = {(k, s, e): v for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].mean().items()}
    got = results(broker)
    assert got.keys() == expected.keys()
    assert all(abs(got[k] - expected[k]) < 1e-9 for k in expected)
    assert sum(info.get("late", 0) for info in job.infos) == len(late)


def test_avg_without_a_function_sends_a_value_that_is_no_number_to_the_dead_letters(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    values = [{"user": "u", "ts": 1_700_000_000_000 + i, "v": v} for i, v in enumerate([1, 2.5, "x", None, True, 6])]
    produce(broker, "clicks", values, 1)
    b = StreamBuilder("parity-nan", shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(TumblingWindow(1000)).map(lambda e: e["v"]).avg().to_rstream()
     .sink("results", JsonSerializer(with_key=True)))
    job = run(b, broker, root, **EXACT)
    assert results(broker) == {("u", 1_700_000_000_000, 1_700_000_001_000): (1 + 2.5 + 6) / 3}
    rows = [dead_letter_row(m) for m in broker.read(dlq_topic_name("parity-nan"))]
    assert len(rows) == 3 and all("avg() without a function" in row["error"] for row in rows)
    assert sorted(row["value"] for row in rows) == ["'x'", "None", "True"]
    assert sum(info["error_count"] for info in job.infos) == 3


@FAST
@given(lines=st.lists(st.text(alphabet="ab c", max_size=12), max_size=25), chunked=st.booleans())
def test_flat_map_on_a_grouped_stream_keeps_the_key(tmp_path: Path, lines: list[str], chunked: bool) -> None:
    """Lines keyed by their first letter, split into words: each word counted under its line's key."""
    broker, root = fresh(tmp_path)
    produce(broker, "lines", lines, 2)
    b = StreamBuilder("parity-flat", shuffle_queues=2)
    (b.source("lines", JsonDeserializer()).key_by(lambda s: s[:1]).flat_map(str.split)
     .to_rstream().sink("words", JsonSerializer(with_key=True)))
    if chunked:
        run(b, broker, root)
    else:
        with record_by_record():
            run(b, broker, root)
    got = Counter((k, w) for k, ws in emitted(broker, "words").items() for w in ws)
    assert got == Counter((s[:1], w) for s in lines for w in s.split())


def test_flat_map_on_a_grouped_stream_then_count(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    orders = [{"shop": f"s{i % 3}", "items": ["x"] * (i % 4)} for i in range(30)]
    produce(broker, "orders", orders, 2)
    b = StreamBuilder("parity-items", shuffle_queues=2)
    (b.source("orders", JsonDeserializer()).key_by(lambda o: o["shop"]).flat_map(lambda o: o["items"])
     .count().to_rstream().sink("counts", JsonSerializer(with_key=True)))
    run(b, broker, root)
    totals = Counter[str]()
    for o in orders:
        totals[o["shop"]] += len(o["items"])
    assert emitted(broker, "counts") == {shop: list(range(1, n + 1)) for shop, n in totals.items() if n}


@FAST
@given(names=st.lists(st.sampled_from(["ann", "bob", "", "cy"]), min_size=1, max_size=40))
def test_count_with_a_selector_counts_every_record_as_rocketmq_streams_1_1(tmp_path: Path, names: list[str]) -> None:
    """1.1's Demo: ``keyBy(User::getAge).count(User::getName)``. The selector never changes the
    count (1.1 never calls it): the results equal ``count()``'s."""
    broker, root = fresh(tmp_path)
    users = [{"name": name, "age": len(name) % 2} for name in names]
    produce(broker, "users", users, 2)
    b = StreamBuilder("parity-count", shuffle_queues=2)
    grouped = b.source("users", JsonDeserializer()).key_by(lambda u: u["age"])
    grouped.count(lambda u: u["name"]).to_rstream().sink("with", JsonSerializer(with_key=True))
    grouped.count().to_rstream().sink("without", JsonSerializer(with_key=True))
    run(b, broker, root)
    expected = {age: list(range(1, n + 1)) for age, n in Counter(u["age"] for u in users).items()}
    assert emitted(broker, "with") == emitted(broker, "without") == expected
    assert json.loads(next(iter(broker.read("with"))).body)["value"] == 1


@FAST
@given(n=st.integers(1, 80), seed=st.integers(0, 10_000), combine=st.booleans(), per_range=st.sampled_from([6, 1000]))
def test_a_window_count_after_filter_equals_the_reference_with_and_without_the_combine_rewrite(
        tmp_path: Path, n: int, seed: int, combine: bool, per_range: int) -> None:
    """The combine node (partial counts per key and window) comes after the filter, in the source's pipeline."""
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "clicks", clicks(n, seed), 2)
    b = StreamBuilder("parity-count-win", shuffle_queues=3)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(SlidingWindow(4000, 2000)).filter(lambda e: e["amount"] % 3 != 0).count()
     .to_rstream().sink("results", JsonSerializer(with_key=True)))
    assert any(node.kind == "combine" for node in b.build().nodes)
    job = run(b, broker, root, combine=combine, max_records_per_queue=per_range, **EXACT)
    kept = {q: [e for e in records if e["amount"] % 3 != 0] for q, records in per_queue.items()}
    on_time, late = split_late(kept, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 4000, 2000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
    assert sum(info.get("late", 0) for info in job.infos) == len(late)
