"""Keyed aggregations run in this process (no Spark) against plain Python over the same records:
every key's emitted results, per-record and per-batch emission, and reduce against functools.reduce."""

from __future__ import annotations

import functools
import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import Accumulator, EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from tests.support.inprocess import emitted, keyed, produce, records, run

WORDS = st.lists(st.sampled_from(["ant", "bee", "cat", "dog", "eel"]), min_size=1, max_size=60)
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


_RUNS = itertools.count()


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


@FAST
@given(words=WORDS, queues=st.integers(1, 3))
def test_count_emits_one_to_n_per_key(tmp_path: Path, words: list[str], queues: int) -> None:
    broker, root = fresh(tmp_path)
    produce(broker, "in", records(words), queues)
    run(keyed("count", "count"), broker, root)
    assert emitted(broker, "out") == {w: list(range(1, n + 1)) for w, n in Counter(words).items()}


@pytest.mark.parametrize(("agg", "fn", "combine"), [
    ("sum", lambda r: r["n"], sum), ("min", lambda r: r["n"], min), ("max", lambda r: r["n"], max),
])
@pytest.mark.parametrize("emit", ["record", "batch"])
@pytest.mark.parametrize("order", ["arrival", "data_time"])
def test_sum_min_max_end_at_the_reference(tmp_path: Path, agg: str, fn: Any, combine: Any, emit: str,
                                          order: str) -> None:
    """In both orders and both emissions (per batch, a data-time order's framed shuffle carries the
    combined partials)."""
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "in", records(["ant", "bee", "cat"] * 30 + ["dog"], seed=3), queues=3)
    run(keyed(f"{agg}-{emit}", agg, fn, order), broker, root, aggregate_emit=emit, max_records_per_queue=7)
    by_key: dict[str, list[int]] = defaultdict(list)
    for recs in per_queue.values():
        for r in recs:
            by_key[r["k"]].append(r["n"])
    got = emitted(broker, "out")
    assert {k: v[-1] for k, v in got.items()} == {k: combine(v) for k, v in by_key.items()}
    if emit == "record":
        assert {k: len(v) for k, v in got.items()} == {k: len(v) for k, v in by_key.items()}
    else:  # once per batch that had the key: far fewer updates than records
        assert sum(len(v) for v in got.values()) < sum(len(v) for v in by_key.values())


@FAST
@given(words=WORDS)
def test_reduce_is_functools_reduce_in_order(tmp_path: Path, words: list[str]) -> None:
    """One source queue keeps the order: each key's results are the running functools.reduce."""
    broker, root = fresh(tmp_path)
    [recs] = produce(broker, "in", records(words), queues=1).values()
    b = StreamBuilder("reduce", shuffle_queues=2)
    (b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).map(lambda r: str(r["n"]))
     .reduce(lambda acc, s: f"{acc},{s}").to_rstream().sink("out", JsonSerializer(with_key=True)))
    run(b, broker, root)
    by_key: dict[str, list[str]] = defaultdict(list)
    for r in recs:
        by_key[r["k"]].append(str(r["n"]))
    expected = {k: list(itertools.accumulate(v, lambda a, s: f"{a},{s}")) for k, v in by_key.items()}
    assert emitted(broker, "out") == expected
    assert {k: v[-1] for k, v in expected.items()} == {
        k: functools.reduce(lambda a, s: f"{a},{s}", v) for k, v in by_key.items()}


class MeanAndCount(Accumulator[dict[str, Any], list[int], list[float]]):
    def initial(self) -> list[int]:
        return [0, 0]

    def add(self, acc: list[int], value: dict[str, Any]) -> list[int]:
        return [acc[0] + value["n"], acc[1] + 1]

    def result(self, acc: list[int]) -> list[float]:
        return [acc[0] / acc[1], acc[1]]


def test_aggregate_with_a_user_accumulator(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "in", records(["ant", "bee"] * 20, seed=5), queues=2)
    run(keyed("acc", "aggregate", MeanAndCount()), broker, root)
    by_key: dict[str, list[int]] = defaultdict(list)
    for recs in per_queue.values():
        for r in recs:
            by_key[r["k"]].append(r["n"])
    got = {k: v[-1] for k, v in emitted(broker, "out").items()}
    assert got == {k: [pytest.approx(sum(v) / len(v)), len(v)] for k, v in by_key.items()}


def test_state_is_what_a_new_run_goes_on_from(tmp_path: Path) -> None:
    """Two runs of one job: the second counts on from the state the first committed."""
    broker, root = fresh(tmp_path)
    produce(broker, "in", records(["ant", "bee", "ant"]), queues=2)
    run(keyed("twice", "count"), broker, root)
    broker.send_batch("in", ['{"k": "ant", "n": 1}'])
    run(keyed("twice", "count"), broker, root)
    assert emitted(broker, "out") == {"ant": [1, 2, 3], "bee": [1]}


@FAST
@given(words=WORDS, sink_queues=st.integers(1, 4), int_keys=st.booleans())
def test_each_keys_results_land_in_its_own_sink_queue_in_order(tmp_path: Path, words: list[str], sink_queues: int,
                                                              int_keys: bool) -> None:
    """A keyed count's results after the shuffle (4 queues): every one in the sink queue of its key's
    hash, each key's counts in order. With 1, 2 or 4 sink queues every shuffle queue's keys fall in one
    sink queue (the chunk is appended whole); with 3, or with int keys (whose message key is their
    text), they are routed one by one."""
    from rstream.serde.codec import encode, stable_queue

    broker, root = fresh(tmp_path)
    produce(broker, "in", records(words), 2)
    broker.create_topic("out", queues=sink_queues)
    b = StreamBuilder("placed", shuffle_queues=4)
    key = (lambda r: len(r["k"]) * 100 + ord(r["k"][0])) if int_keys else (lambda r: r["k"])
    b.source("in", JsonDeserializer()).key_by(key).count().to_rstream().sink("out", JsonSerializer(with_key=True))
    run(b, broker, root)
    seen: dict[Any, list[int]] = defaultdict(list)
    for m in sorted(broker.read("out"), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        assert m.queue_id == stable_queue(encode(doc["key"]), sink_queues)
        assert m.key == str(doc["key"])
        seen[doc["key"]].append(doc["value"])
    assert seen == {key({"k": w}): list(range(1, n + 1)) for w, n in Counter(words).items()}
