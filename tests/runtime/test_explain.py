"""``explain``: the input records behind a sink record, per operator kind (aggregation, window, session
window, join, interval join, stream–table join, process function, stateless), against a plain Python
reference over the generated input (in this process, without Spark); on Spark after a crash and a
restart, and after a SIGKILL of the whole job process mid-run and a restart."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JobError,
    JsonDeserializer,
    JsonSerializer,
    KeyedProcessFunction,
    SessionWindow,
    StreamBuilder,
    Time,
    TumblingWindow,
)
from rstream.runtime.explain import ExplainError
from rstream.runtime.inprocess import InProcessJob
from tests.support.explain import (
    EXPLAIN_TO_KILL,
    SIZE,
    T0,
    Where,
    bits,
    by_queue,
    generate,
    table_updates,
    window_and_table_join,
)
from tests.support.jobs import broker_arg, job_id
from tests.support.processes import TIMEOUT, kill_when
from tests.support.reference import fixed_windows, in_time_order, sessions, split_late

EXAMPLES = settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))


def run(builder: StreamBuilder, broker: EmbeddedBroker, tmp: Path, combine: bool = True, **props: Any) -> InProcessJob:
    job = InProcessJob(builder.build(combine=combine), broker, tmp / builder.job_id, props)
    job.run_until_idle()
    return job


def sink_records(broker: EmbeddedBroker, topic: str) -> list[tuple[int, int, dict[str, Any]]]:
    return [(m.queue_id, m.offset, json.loads(m.body)) for m in broker.read(topic)]


def in_read_order(queues: dict[int, list[dict[str, Any]]], batch: int) -> list[dict[str, Any]]:
    """The records in the order a key's shuffle queue gets them in this process: round by round
    (``batch`` records per source queue), source queue by source queue."""
    rounds = max(len(v) for v in queues.values()) // batch + 1
    return [r for i in range(rounds) for q in sorted(queues) for r in queues[q][i * batch:(i + 1) * batch]]


# -- keyed aggregations ------------------------------------------------------------------------------
@pytest.mark.unit
@pytest.mark.parametrize("agg", ["sum", "count", "ordered sum"])
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 40), combine=st.booleans())
def test_an_aggregations_update_is_explained_by_every_record_of_its_key_up_to_it(
        tmp_path_factory: Any, seed: int, batch: int, agg: str, combine: bool) -> None:
    tmp = tmp_path_factory.mktemp("explain-agg")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 60, seed)
    b = StreamBuilder(job_id("explain-agg"), shuffle_queues=2)
    grouped = b.source("in", JsonDeserializer()).key_by(lambda r: r["k"])
    bit = lambda r: 1 << r["id"]  # noqa: E731
    (grouped.count() if agg == "count" else grouped.sum(bit, order="data_time" if agg == "ordered sum" else "arrival")
     ).to_rstream().sink("out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp, combine=combine, max_records_per_queue=batch)
    order = in_read_order(by_queue(broker), batch)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, 8):
        e = job.explain("out", queue, offset)
        if agg != "ordered sum":  # records as they come: the first n in read order
            n = doc["value"] if agg == "count" else bin(doc["value"]).count("1")
            expected = {where[r["id"]] for r in [r for r in order if r["k"] == doc["key"]][:n]}
        else:  # in data-time order: its bits name the records it had taken
            expected = {where[i] for i in bits(doc["value"])}
        assert e.records == expected and e.exact and e.kind == "aggregation"
        if agg == "sum":  # the sum's bits name its records: the same set
            assert {where[i] for i in bits(doc["value"])} == expected
        if agg == "ordered sum":  # the sums of powers of two grow: the last it took left the largest
            last = max(e.inputs, key=lambda c: c.after)
        else:
            last = max(e.inputs, key=lambda c: int(c.via.rsplit("/", 1)[-1]))
        assert last.after == doc["value"]  # the operator's state right after the last record: the result


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 40))
def test_a_result_two_shuffles_away_is_explained_down_to_its_source_records(tmp_path_factory: Any, seed: int,
                                                                           batch: int) -> None:
    """A stage after another stage's shuffle: a running sum of bits per key, then the OR of those sums
    over all keys. The OR's bits name the source records that went into it, through the first stage's
    updates; the explanation follows each input of the second stage back through the first."""
    tmp = tmp_path_factory.mktemp("explain-stages")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 50, seed)
    b = StreamBuilder(job_id("explain-stages"), shuffle_queues=2)
    (b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).sum(lambda r: 1 << r["id"]).to_rstream()
     .key_by(lambda s: 0).reduce(lambda acc, s: acc | s).to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp, max_records_per_queue=batch)
    for queue, offset, doc in random.Random(seed).sample(sink_records(broker, "out"), 5):
        e = job.explain("out", queue, offset)
        assert e.kind == "aggregation" and e.exact
        assert all(c.topic in job.topology.shuffle_topics for c in e.inputs)  # the second stage reads a shuffle
        assert set(e.upstream) == {c.via for c in e.inputs}  # each followed back through the first stage
        assert e.sources == {where[i] for i in bits(doc["value"])}
        assert "from" in e.summary and "came from" in e._repr_html_()


@pytest.mark.unit
def test_a_stage_before_that_combined_its_results_is_not_followed_and_says_so(tmp_path: Path) -> None:
    """A count of counts: with the combine rewrite the first stage sends its counts to the second as
    partials, which an explanation does not follow (it says so, and names the rewrite); without it,
    it follows each input back to the source records of its key."""
    broker = EmbeddedBroker(tmp_path / "broker")
    generate(broker, 40, 3)

    def counts_of_counts(name: str) -> StreamBuilder:
        b = StreamBuilder(job_id(name), shuffle_queues=2)
        (b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).count().to_rstream()
         .key_by(lambda n: n).count().to_rstream().sink(f"{name}-out", JsonSerializer(with_key=True)))
        return b

    for name, combine in (("combined", True), ("plain", False)):
        job = run(counts_of_counts(name), broker, tmp_path, combine=combine)
        queue, offset, doc = sink_records(broker, f"{name}-out")[-1]
        e = job.explain(f"{name}-out", queue, offset)
        if combine:
            assert not e.upstream and any("COMBINE" in n and "combine" in n for n in e.notes), e.notes
        else:  # each input: one key's n-th count, from that key's first n records
            assert e.upstream and all(t == "in" for t, _q, _o in e.sources)
            for up in e.upstream.values():
                assert len(up.records) == doc["key"] and len({json.dumps(c.value["k"]) for c in up.inputs}) == 1


@pytest.mark.unit
def test_a_stage_after_a_combined_count_follows_every_count_it_took(tmp_path: Path) -> None:
    """Counts per key (their source records combined before the first shuffle: one partial stands for
    many updates), then the sum of the even and of the odd counts so far (each count changes its sum):
    the last result of each comes from every key's records up to its largest count of that parity,
    in read order."""
    broker = EmbeddedBroker(tmp_path / "broker")
    where = generate(broker, 60, 5)
    b = StreamBuilder(job_id("explain-largest"), shuffle_queues=2)
    (b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).count().to_rstream()
     .key_by(lambda n: n % 2).sum(lambda n: n).to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp_path)
    order = in_read_order(by_queue(broker), 10**6)
    last = {doc["key"]: (queue, offset) for queue, offset, doc in sorted(sink_records(broker, "out"))}
    for parity, (queue, offset) in last.items():
        per_key: dict[str, list[dict[str, Any]]] = {}
        for r in order:
            per_key.setdefault(r["k"], []).append(r)
        expected = set()
        for records in per_key.values():
            n = len(records) if len(records) % 2 == parity else len(records) - 1
            expected |= {where[r["id"]] for r in records[:n]}
        assert job.explain("out", queue, offset).sources == expected


# -- windows -----------------------------------------------------------------------------------------
@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(5, 40), agg=st.sampled_from(["sum", "count"]))
@example(seed=561, batch=16, agg="count")  # a record of the window late after its final result's range
def test_a_windows_result_is_explained_by_its_keys_on_time_records_and_its_late_ones(
        tmp_path_factory: Any, seed: int, batch: int, agg: str) -> None:
    tmp = tmp_path_factory.mktemp("explain-window")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 80, seed, disorder=6000)
    lateness = 2000
    b = StreamBuilder(job_id("explain-window"), shuffle_queues=2)
    ws = (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
          .window(TumblingWindow(Time.milliseconds(SIZE))))
    (ws.sum(lambda r: 1 << r["id"]) if agg == "sum" else ws.count()).to_rstream().sink(
        "out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp, max_records_per_queue=batch, allowed_lateness_ms=lateness, idle_timeout_ms=600_000)
    on_time, late = split_late(by_queue(broker), lambda r: r["ts"], lateness)

    def of(records: list[dict[str, Any]], key: str, start: int) -> set[Where]:
        return {where[r["id"]] for r in records if r["k"] == key and fixed_windows(r["ts"], SIZE) == [(start, start + SIZE)]}

    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        key, start, end = doc["key"]
        e = job.explain("out", queue, offset)
        assert e.kind == "window" and e.exact
        assert e.records == of(on_time, key, start)
        assert len(e.records) == (doc["value"] if agg == "count" else bin(doc["value"]).count("1"))
        assert {c.where for c in e.late} == of([r for r, _wm in late], key, start)
        assert all("behind watermark" in c.note for c in e.late)
        assert e.watermark is not None and e.watermark.window_end == end
        assert e.watermark.watermark is None or e.watermark.watermark >= end  # None: every producer idle (the end)


@pytest.mark.unit
def test_a_window_fired_by_the_watermark_names_the_queue_that_held_the_minimum(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=2)
    # queue 0 runs ahead; queue 1 holds the watermark back until its record at T0 + 25 s
    for q, times in ((0, [1000, 2000, 30_000]), (1, [1500, 12_000, 25_000])):
        broker.send_batch("in", [json.dumps({"id": q * 10 + i, "k": "a", "ts": T0 + t, "side": ""})
                                 for i, t in enumerate(times)], queue=q)
    b = StreamBuilder(job_id("explain-wm"), shuffle_queues=1)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .window(TumblingWindow(Time.milliseconds(SIZE))).count().to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp_path, combine=False, max_records_per_queue=1, allowed_lateness_ms=0,
              idle_timeout_ms=600_000)
    first = next((q, o) for q, o, doc in sink_records(broker, "out") if doc["key"][1] == T0 - T0 % SIZE)
    e = job.explain("out", *first)
    assert e.watermark is not None and e.watermark.held_by is not None and e.watermark.held_by.startswith("in/1/")
    assert e.watermark.watermark is not None and e.watermark.watermark >= e.watermark.window_end
    assert e.records == {("in", 0, 0), ("in", 0, 1), ("in", 1, 0)}
    assert "fired in batch" in repr(e) and "<table" in e._repr_html_()


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(4, 30), gap=st.sampled_from([800, 1500, 2500]))
def test_a_sessions_result_is_explained_by_the_on_time_records_of_every_session_merged_into_it(
        tmp_path_factory: Any, seed: int, batch: int, gap: int) -> None:
    tmp = tmp_path_factory.mktemp("explain-session")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 60, seed, disorder=2500)
    lateness = 1200
    b = StreamBuilder(job_id("explain-session"), shuffle_queues=2)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .window(SessionWindow(Time.milliseconds(gap))).sum(lambda r: 1 << r["id"]).to_rstream()
     .sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp, max_records_per_queue=batch, allowed_lateness_ms=lateness, idle_timeout_ms=600_000)
    on_time, late = split_late(by_queue(broker), lambda r: r["ts"], lateness)
    reference = sessions(on_time, lambda r: r["k"], lambda r: r["ts"], gap)
    outs = sink_records(broker, "out")
    assert {tuple(doc["key"]): len(bits(doc["value"])) for _q, _o, doc in outs} == reference

    def of(records: list[dict[str, Any]], key: str, start: int, end: int) -> set[Where]:
        return {where[r["id"]] for r in records if r["k"] == key and start <= r["ts"] < end}

    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        key, start, end = doc["key"]
        e = job.explain("out", queue, offset)
        assert e.kind == "window" and e.exact
        assert e.records == of(on_time, key, start, end) == {where[i] for i in bits(doc["value"])}
        assert {c.where for c in e.late} == of([r for r, _wm in late], key, start, end)
        assert e.watermark is not None and e.watermark.window_end == end
        last = max(e.inputs, key=lambda c: (c.batch_id, int(c.via.rsplit("/", 1)[-1])))
        assert bits(last.after) <= bits(doc["value"])  # (the session that record made or grew, as it then was)


# -- joins -------------------------------------------------------------------------------------------
def join_builder(name: str, how: str, window: bool) -> StreamBuilder:
    b = StreamBuilder(name, shuffle_queues=2)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    joined = (left.join(right) if how == "inner" else left.left_join(right)).where(lambda r: r["k"]).equal_to(
        lambda r: r["k"])
    if window:
        joined = joined.window(TumblingWindow(Time.milliseconds(SIZE)))
    joined.apply(lambda x, y: [x["id"], None if y is None else y["id"]]).sink("out", JsonSerializer(with_key=True))
    return b


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 20), how=st.sampled_from(["inner", "left"]),
       window=st.booleans())
def test_a_joins_result_is_explained_by_the_two_records_that_met(
        tmp_path_factory: Any, seed: int, batch: int, how: str, window: bool) -> None:
    tmp = tmp_path_factory.mktemp("explain-join")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 25, seed, topic="left", side="L", disorder=0)
    where |= generate(broker, 25, seed + 1, topic="right", side="R", disorder=0)
    job = run(join_builder(job_id("explain-join"), how, window), broker, tmp, max_records_per_queue=batch,
              allowed_lateness_ms=60_000, idle_timeout_ms=600_000)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        e = job.explain("out", queue, offset)
        assert e.kind == ("window join" if window else "join") and e.exact
        assert e.records == {where[i] for i in doc["value"] if i is not None}, (doc, e)
        sides = {c.where: c.side for c in e.inputs}
        assert sides[where[doc["value"][0]]] == "left"


def interval_builder(name: str, how: str, lower: int, upper: int) -> StreamBuilder:
    b = StreamBuilder(name, shuffle_queues=2)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    joined = left.join(right) if how == "inner" else left.left_join(right)
    (joined.where(lambda r: r["k"]).equal_to(lambda r: r["k"]).between(lower, upper)
     .apply(lambda x, y: [x["id"], None if y is None else y["id"]]).sink("out", JsonSerializer(with_key=True)))
    return b


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 20), how=st.sampled_from(["inner", "left"]),
       bounds=st.sampled_from([(-1000, 1000), (0, 3000), (-2500, 500)]))
def test_an_interval_joins_result_is_explained_by_the_two_records_that_met(
        tmp_path_factory: Any, seed: int, batch: int, how: str, bounds: tuple[int, int]) -> None:
    tmp = tmp_path_factory.mktemp("explain-interval")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 30, seed, topic="left", side="L", disorder=2500)
    where |= generate(broker, 30, seed + 1, topic="right", side="R", queues=1, disorder=2500)
    lower, upper = bounds
    lateness = 1500
    job = run(interval_builder(job_id("explain-interval"), how, lower, upper), broker, tmp,
              max_records_per_queue=batch, allowed_lateness_ms=lateness, idle_timeout_ms=600_000)
    lefts, late_lefts = split_late(by_queue(broker, "left"), lambda r: r["ts"], lateness)
    rights, late_rights = split_late(by_queue(broker, "right"), lambda r: r["ts"], lateness)
    # the reference: each pair of on-time records of a key within the bounds; a left join's unmatched lefts
    expected = []
    for x in lefts:
        mates = [y["id"] for y in rights if y["k"] == x["k"] and lower <= y["ts"] - x["ts"] <= upper]
        expected += [[x["id"], m] for m in mates] + ([[x["id"], None]] if how == "left" and not mates else [])
    outs = sink_records(broker, "out")
    assert sorted((doc["value"] for _q, _o, doc in outs), key=json.dumps) == sorted(expected, key=json.dumps)
    times = {r["id"]: r["ts"] for q in (by_queue(broker, "left"), by_queue(broker, "right")) for rs in q.values()
             for r in rs}
    late = [r for r, _wm in late_lefts + late_rights]
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        left_id, right_id = doc["value"]
        e = job.explain("out", queue, offset)
        assert e.kind == "interval join" and e.exact
        assert e.records == {where[left_id]} | ({where[right_id]} if right_id is not None else set()), (doc, e)
        assert {c.where: c.side for c in e.inputs}[where[left_id]] == "left"
        if right_id is None:  # a left record that met nobody: out once the watermark passed its interval
            assert e.watermark is not None and e.watermark.window_end == times[left_id] + upper + 1
        assert {c.where for c in e.late} <= {where[r["id"]] for r in late if r["k"] == doc["key"]}


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 25), how=st.sampled_from(["inner", "left"]),
       lateness=st.sampled_from([1000, 5000]))
def test_a_stream_table_joins_result_is_explained_by_its_record_and_the_update_whose_value_it_met(
        tmp_path_factory: Any, seed: int, batch: int, how: str, lateness: int) -> None:
    tmp = tmp_path_factory.mktemp("explain-table")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 40, seed, disorder=2500)
    taken = {r["ts"] for rs in by_queue(broker).values() for r in rs}
    where |= table_updates(broker, 25, seed + 1, taken)
    job = run(window_and_table_join(job_id("explain-table"), how), broker, tmp, max_records_per_queue=batch,
              allowed_lateness_ms=lateness, idle_timeout_ms=600_000)
    met = the_updates_met(broker, lateness)
    expected = [[r_id, None if u is None or u["delete"] else u["id"]] for r_id, u in met.items()
                if how == "left" or u is not None and not u["delete"]]
    outs = sink_records(broker, "enriched")
    assert sorted((doc["value"] for _q, _o, doc in outs), key=json.dumps) == sorted(expected, key=json.dumps)
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        record_id, _value = doc["value"]
        update = met[record_id]
        e = job.explain("enriched", queue, offset)
        assert e.kind == "stream-table join" and e.exact
        assert e.records == {where[record_id]} | ({where[update["id"]]} if update is not None else set()), (doc, e)
        sides = {c.where: c.side for c in e.inputs}
        assert sides[where[record_id]] == "stream" and (update is None or sides[where[update["id"]]] == "table")


def the_updates_met(broker: EmbeddedBroker, lateness: int) -> dict[int, dict[str, Any] | None]:
    """Per stream record of ``in`` (by id), the update of ``tbl`` whose value it met (None: its key had
    none yet): the join's records in the order it takes them (``in_time_order``: each at its data time
    or the watermark it was read with, table updates first at equal times, then by source queue)."""
    queues = {f"{topic}/{q}": records for topic in ("in", "tbl") for q, records in by_queue(broker, topic).items()}
    table: dict[str, dict[str, Any]] = {}
    met: dict[int, dict[str, Any] | None] = {}
    for _at, r, _t in in_time_order(queues, lambda r: r["ts"], lateness, rank_of=lambda r: 0 if "delete" in r else 1):
        if "delete" in r:
            table[r["k"]] = r
        else:
            met[r["id"]] = table.get(r["k"])
    return met


# -- keyed process functions ---------------------------------------------------------------------------
class Collect(KeyedProcessFunction[Any, Any]):
    """Forwards the ids of its key's records so far at each record, and once more from a timer
    ``delay`` ms of data time after the key's first record."""

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        ids = ctx.state.get([])
        if not ids:
            ctx.register_event_time_timer(ctx.timestamp + self.delay)
        ctx.state.set([*ids, value["id"]])
        ctx.forward(key, {"ids": [*ids, value["id"]], "timer": None})

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, {"ids": ctx.state.get([]), "timer": timestamp})


@pytest.mark.unit
@EXAMPLES
@given(seed=st.integers(0, 10_000), batch=st.integers(3, 30))
def test_a_process_functions_forward_is_explained_by_its_keys_records_and_timer(
        tmp_path_factory: Any, seed: int, batch: int) -> None:
    tmp = tmp_path_factory.mktemp("explain-process")
    broker = EmbeddedBroker(tmp / "broker")
    where = generate(broker, 50, seed, disorder=2000)
    b = StreamBuilder(job_id("explain-process"), shuffle_queues=2)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .process(Collect(8000)).to_rstream().sink("out", JsonSerializer(with_key=True)))
    job = run(b, broker, tmp, max_records_per_queue=batch, allowed_lateness_ms=5000, idle_timeout_ms=600_000)
    outs = sink_records(broker, "out")
    for queue, offset, doc in random.Random(seed).sample(outs, min(8, len(outs))):
        e = job.explain("out", queue, offset)
        assert e.kind == "process" and e.exact
        assert e.records == {where[i] for i in doc["value"]["ids"]}, (doc, e)
        timers = [c for c in e.inputs if c.kind == "timer"]
        assert [t.data_time for t in timers] == ([doc["value"]["timer"]] if doc["value"]["timer"] else [])


# -- stateless, and what cannot be explained ------------------------------------------------------------
@pytest.mark.unit
def test_a_stateless_record_is_explained_by_the_one_record_it_came_from_and_bad_requests_are_named(
        tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    where = generate(broker, 20, 1)
    b = StreamBuilder(job_id("explain-map"))
    b.source("in", JsonDeserializer()).filter(lambda r: r["id"] % 3 == 0).map(lambda r: r["id"]).sink(
        "out", JsonSerializer())
    job = run(b, broker, tmp_path, max_records_per_queue=4)
    for queue, offset, value in sink_records(broker, "out"):
        e = job.explain("out", queue, offset)
        assert e.records == {where[value]} and e.kind == "stateless"  # type: ignore[index]
    with pytest.raises(ExplainError, match="no sink topic"):
        job.explain("in", 0, 0)
    with pytest.raises(ExplainError, match=r"has offsets 0\.\.\d+, not 99"):
        job.explain("out", 0, 99)
    broker.send_batch("out", ["written by someone else"], queue=0)
    with pytest.raises(ExplainError, match="no committed range of the job wrote it"):
        job.explain("out", 0, broker.end_offsets("out")[0] - 1)


@pytest.mark.unit
def test_an_explanation_whose_state_was_compacted_away_says_so(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    generate(broker, 40, 2)
    b = StreamBuilder(job_id("explain-compacted"), shuffle_queues=1)
    b.source("in", JsonDeserializer()).key_by(lambda r: r["k"]).count().to_rstream().sink(
        "out", JsonSerializer(with_key=True))
    job = run(b, broker, tmp_path, max_records_per_queue=5)
    for state_topic in job.topology.state_topics.values():
        broker.compact(state_topic)
    queue, offset, _doc = sink_records(broker, "out")[-1]
    with pytest.raises(ExplainError, match="compacted away"):
        job.explain("out", queue, offset)


@pytest.mark.unit
def test_re_execution_is_exact_when_the_clock_moves_while_a_task_starts(tmp_path: Path) -> None:
    """A task reads its processing time once (``now_ms`` in its progress) and a re-execution is given
    that time: a second read of a moving clock (the operator watermark's start, kept in the state
    topic) would make the state it writes differ from the committed one by a millisecond."""
    broker = EmbeddedBroker(tmp_path / "broker")
    generate(broker, 30, 3)
    b = StreamBuilder(job_id("explain-clock"), shuffle_queues=1)
    (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
     .window(TumblingWindow(Time.milliseconds(SIZE))).count().to_rstream().sink("out", JsonSerializer(with_key=True)))
    ticks = iter(range(10**6))

    def moving_clock() -> int:  # a millisecond more at every read
        return (T0 + next(ticks)) * 1_000_000

    with mock.patch("rstream.processors.base.time.time_ns", moving_clock):
        job = run(b, broker, tmp_path, max_records_per_queue=5, allowed_lateness_ms=2000, idle_timeout_ms=600_000)
    for queue, offset, _doc in sink_records(broker, "out"):
        assert job.explain("out", queue, offset).exact


# -- on Spark, after a crash and a restart ------------------------------------------------------------
def test_a_windows_result_is_explained_after_a_crash_and_a_restart_on_spark(broker: EmbeddedBroker,
                                                                            make_job: Any) -> None:
    where = generate(broker, 60, 7, disorder=5000)
    lateness = 1500
    name = job_id("explain-spark")

    def builder() -> StreamBuilder:
        b = StreamBuilder(name, shuffle_queues=2)
        (b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"]).key_by(lambda r: r["k"])
         .window(TumblingWindow(Time.milliseconds(SIZE))).sum(lambda r: 1 << r["id"]).to_rstream()
         .sink("out", JsonSerializer(with_key=True)))
        return b

    props = {"max_records_per_queue": 10, "allowed_lateness_ms": lateness, "idle_timeout_ms": 600_000}
    job = make_job(builder(), **props)
    job.crash_once("after_commit")
    with pytest.raises(JobError, match="crashed|exited"):
        job.run_until_idle(progress=False)
    again = make_job(builder(), **props)  # the same job, from its checkpoint
    again.run_until_idle(progress=False)
    on_time, _late = split_late(by_queue(broker), lambda r: r["ts"], lateness)
    for queue, offset, doc in sink_records(broker, "out"):
        key, start, _end = doc["key"]
        e = again.explain("out", queue, offset)
        expected = {where[r["id"]] for r in on_time if r["k"] == key and start <= r["ts"] < start + SIZE}
        assert e.records == expected == {where[i] for i in bits(doc["value"])} and e.exact


def test_explain_answers_exactly_after_a_kill_9_mid_run_and_a_restart_on_spark(
        broker: EmbeddedBroker, make_job: Any, tmp_path: Path) -> None:
    """The whole job process (driver, JVM, Python workers) SIGKILLed while it works through its input
    (windows open, table updates and stream records held by the join); a job resumed from the
    checkpoint finishes it. Every sink record is then explained exactly: a window's by its on-time
    records, an enriched record by itself and the table update whose value it met."""
    where = generate(broker, 80, 21, disorder=2500)
    taken = {r["ts"] for rs in by_queue(broker).values() for r in rs}
    where |= table_updates(broker, 30, 22, taken)
    lateness, chunk = 1500, 5
    name = job_id("explain-killed")

    def mid_run() -> bool:  # a few batches in, the join's shuffle queues written to
        tag = broker.last_commit(name, "in", 0)
        return tag is not None and tag.end_offset >= 3 * chunk and any(
            broker.last_commit(name, t, q) is not None for t in shuffles for q in (0, 1) if broker.has_topic(t))

    shuffles = list(window_and_table_join(name).build().shuffle_topics)
    kill_when(["-c", EXPLAIN_TO_KILL, broker_arg(broker), str(tmp_path / "data"), str(tmp_path / "tmp"), name,
               str(chunk), str(lateness)], mid_run, timeout=TIMEOUT)
    assert broker.last_commit(name, "in", 0).end_offset < 40, "not killed mid-run"
    resumed = make_job(window_and_table_join(name), max_records_per_queue=chunk, allowed_lateness_ms=lateness,
                       idle_timeout_ms=3_600_000)
    resumed.run_until_idle(progress=False)
    assert resumed.progress[0].batch_id > 0, "resumed from the checkpoint, not from the start"

    on_time, _late = split_late(by_queue(broker), lambda r: r["ts"], lateness)
    windows = sink_records(broker, "out")
    assert windows
    for queue, offset, doc in windows:
        key, start, _end = doc["key"]
        e = resumed.explain("out", queue, offset)
        expected = {where[r["id"]] for r in on_time if r["k"] == key and start <= r["ts"] < start + SIZE}
        assert e.records == expected == {where[i] for i in bits(doc["value"])} and e.exact
    met = the_updates_met(broker, lateness)
    enriched = sink_records(broker, "enriched")
    assert len(enriched) == len(met)  # a left join: one result per stream record, each once
    for queue, offset, doc in enriched:
        record_id, value = doc["value"]
        update = met[record_id]
        assert value == (None if update is None or update["delete"] else update["id"])
        e = resumed.explain("enriched", queue, offset)
        assert e.records == {where[record_id]} | ({where[update["id"]]} if update else set()) and e.exact, (doc, e)
