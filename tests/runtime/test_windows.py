"""Windows on Spark against the reference: RocketMQ Streams' window examples, generated out-of-order
streams, the seeds' completeness table, restarts and state loss."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import (
    Accumulator,
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    RocketMQStream,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    Time,
    TumblingWindow,
    WindowError,
)
from rstream.time import next_watermark
from tests.support.jobs import job_id
from tests.support.reference import sessions, split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results, windowed


def test_seeds_completeness_table() -> None:
    wm = -(10**9)
    seen = []
    for t in (5, 7, 6, 3):
        wm = next_watermark(wm, t, 2)
        seen.append((t, wm, t < wm))
    assert seen == [(5, 3, False), (7, 5, False), (6, 5, False), (3, 5, True)]


def test_seeds_completeness_table_on_spark(broker: EmbeddedBroker, make_job: Any) -> None:
    produce(broker, "clicks", [{"user": "u", "ts": t} for t in (5, 7, 6, 3)], queues=1)
    job = make_job(windowed(job_id("seed"), TumblingWindow(10), "count"), allowed_lateness_ms=2, idle_timeout_ms=600_000)
    job.run_until_idle()
    late = job.late_records()
    assert late[["data_time", "watermark", "late_ms", "topic", "queue", "offset"]].values.tolist() == [[3, 5, 2, "clicks", 0, 3]]
    assert "behind its source queue's watermark 5" in late["reason"][0]
    assert results(broker) == {("u", 0, 10): 3}
    last = [q for q in job.progress[-1].queues if q.topic in job.topology.framed_topics]
    assert last and all(q.held_back_by is None for q in last)  # the end-of-input flush: every source idle
    assert all(p["idle"] for q in last for p in q.producers.values())
    # one batch: its source tasks read the clicks, then (its second Spark job) the window queues read
    # what they wrote and the idle flush the driver sent after them; no batch of its own for either
    assert [b.batch_id for b in job.progress] == [0] and sum(q.records_in for q in last) == 4


def test_a_job_reading_from_last_flushes_after_the_records_of_its_run(broker: EmbeddedBroker, make_job: Any) -> None:
    # with consume_from="last" a source queue has no commit until a record reaches it after the job started:
    # the idle flush of run_until_idle() must still wait until the run read what was sent before it
    produce(broker, "clicks", [{"user": "old", "ts": 1}], queues=2)  # before the job: never read
    name = job_id("last")
    job = make_job(windowed(name, TumblingWindow(10), "count"), consume_from="last",
                   allowed_lateness_ms=2, idle_timeout_ms=600_000)
    job.run_until_idle()  # nothing to read: the flush goes out at once
    assert results(broker) == {}
    broker.send_batch("clicks", [json.dumps({"user": "u", "ts": t}) for t in (5, 7, 16, 12)])
    again = make_job(windowed(name, TumblingWindow(10), "count"), consume_from="last",
                     allowed_lateness_ms=2, idle_timeout_ms=600_000)  # a restarted kernel: a new object
    again.run_until_idle()
    assert results(broker) == {("u", 0, 10): 2, ("u", 10, 20): 2} and again.late_records().empty


def test_the_flush_of_a_window_fed_by_another_shuffle_stage_waits_for_that_stage(
        broker: EmbeddedBroker, make_job: Any) -> None:
    # the window reads what a running count writes (a shuffle topic fed by a shuffle stage, not by a
    # source): run_until_idle's idle flush must follow the count's last outputs, not the sources' last
    # records, or those outputs would come after it and be late; and every window must fire
    name = job_id("chained")

    def builder() -> StreamBuilder:
        b = StreamBuilder(name, shuffle_queues=3)
        counts = (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
                  .key_by(lambda e: e["user"]).count().to_rstream())
        counts.key_by(lambda n: "all").window(TumblingWindow(Time.seconds(5))).count().to_rstream().sink(
            "results", JsonSerializer(with_key=True))
        return b

    first, second = clicks(200, seed=11, disorder=1), clicks(100, seed=12, disorder=1)
    for e in second:
        e["ts"] += 60_000  # the next run's clicks: later windows
    assert not builder().build().framed_by_sources
    expected: dict[tuple[Any, int, int], int] = {}
    broker.create_topic("clicks", queues=2)
    for events in (first, second):
        broker.send_batch("clicks", [json.dumps(e) for e in events])
        for e in events:  # one count output per click, at its time: per window, the clicks in it
            start = e["ts"] - e["ts"] % 5000
            expected[("all", start, start + 5000)] = expected.get(("all", start, start + 5000), 0) + 1
        job = make_job(builder(), allowed_lateness_ms=600_000, idle_timeout_ms=600_000)
        job.run_until_idle()
        assert job.late_records().empty
        assert results(broker) == expected


def test_ticks_sent_while_a_batch_runs_its_shuffle_side_are_each_read_once(
        broker: EmbeddedBroker, make_job: Any) -> None:
    # a started job's ticker writes idle ticks to the window queues at any time, also while the driver
    # runs a batch's shuffle side: here one before each of the driver's first five looks at the shuffle
    # queues, more than one batch's second stage takes (one job per shuffle step and one more), so the
    # last ones are left to the next batch. Each is read once, the batch ends, and the counts are exact.
    per_queue = produce(broker, "clicks", clicks(120, seed=13))
    job = make_job(windowed(job_id("ticks"), TumblingWindow(Time.seconds(5)), "count"), **EXACT)
    looks = []
    pending = job._pending_shuffles

    def ticking(batch_id: int = -1) -> list[list[Any]]:
        looks.append(batch_id)
        if len(looks) <= 5:
            job.tick()
        return pending(batch_id)

    job._pending_shuffles = ticking
    job.run_until_idle()
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
    assert len(job.late_records()) == len(late)
    assert (job.lag()["lag"] == 0).all()  # every tick read
    window_queues = [q for b in job.progress for q in b.queues if q.topic in job.topology.framed_topics]
    assert sum(q.records_in for q in window_queues) == 120  # data records, once each
    assert len(looks) > 5 and len(job.progress) >= 2  # the last ticks were the next batch's


@pytest.mark.parametrize("agg,fn,reduce", [
    ("count", None, "size"),                              # WindowCount (event time, lateness 2000)
    ("sum", lambda e: e["amount"], "sum"),                # WindowSum
    ("min", lambda e: e["amount"], "min"),                # WindowMin
    ("max", lambda e: e["amount"], "max"),
    ("avg", lambda e: e["amount"], "mean"),               # WindowAvg
])
def test_tumbling_window_examples(broker: EmbeddedBroker, make_job: Any, agg: str, fn: Any, reduce: str) -> None:
    per_queue = produce(broker, "clicks", clicks(300, seed=3))
    job = make_job(windowed(job_id(agg), TumblingWindow(Time.seconds(5)), agg, fn), **EXACT)
    job.run_until_idle()
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 5000)
    expected = getattr(frame.groupby(["key", "start", "end"])["value"], reduce)().to_dict()
    assert results(broker) == pytest.approx(expected)
    assert len(late) > 0 and len(job.late_records()) == len(late)  # the generator makes some late on purpose
    assert sorted(job.late_records()["data_time"]) == sorted(e["ts"] for e, _ in late)


def test_slide_window_count(broker: EmbeddedBroker, make_job: Any) -> None:  # SlideWindowCount (5 s / 2 s)
    per_queue = produce(broker, "clicks", clicks(200, seed=5))
    make_job(windowed(job_id("slide"), SlidingWindow(Time.seconds(5), Time.seconds(2)), "count"), **EXACT).run_until_idle()
    on_time, _ = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000, 2000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()


def test_session_window_count(broker: EmbeddedBroker, make_job: Any) -> None:  # SessionWindowCount (gap 5 s)
    per_queue = produce(broker, "clicks", clicks(150, seed=9, spread=200_000, disorder=3000))
    make_job(windowed(job_id("session"), SessionWindow(Time.seconds(5)), "count"), **EXACT).run_until_idle()
    on_time, _ = split_late(per_queue, lambda e: e["ts"], LATENESS)
    assert results(broker) == sessions(on_time, lambda e: e["user"], lambda e: e["ts"], 5000)


def test_window_order_count_with_a_composite_key(broker: EmbeddedBroker, make_job: Any) -> None:  # WindowOrderCount
    events = [dict(e, item=["pen", "ink"][i % 2]) for i, e in enumerate(clicks(200, seed=11))]
    per_queue = produce(broker, "clicks", events)
    make_job(windowed(job_id("orders"), TumblingWindow(Time.seconds(10)), "count",
                      key=lambda e: (e["user"], e["item"])), **EXACT).run_until_idle()
    on_time, _ = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: (e["user"], e["item"]), lambda e: e["ts"], lambda e: 1, 10_000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()


class Spread(Accumulator):
    """max - min of the amounts; merges for sessions."""

    def initial(self) -> list[int | None]:
        return [None, None]

    def add(self, acc: list[Any], value: dict[str, Any]) -> list[Any]:
        a = value["amount"]
        return [a if acc[0] is None else min(acc[0], a), a if acc[1] is None else max(acc[1], a)]

    def merge(self, x: list[Any], y: list[Any]) -> list[Any]:
        return [min(x[0], y[0]), max(x[1], y[1])]

    def result(self, acc: list[Any]) -> int:
        return int(acc[1] - acc[0])


def test_window_aggregate_with_an_accumulator(broker: EmbeddedBroker, make_job: Any) -> None:
    per_queue = produce(broker, "clicks", clicks(200, seed=13))
    make_job(windowed(job_id("acc"), TumblingWindow(Time.seconds(5)), "aggregate", Spread()), **EXACT).run_until_idle()
    on_time, _ = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 5000)
    g = frame.groupby(["key", "start", "end"])["value"]
    assert results(broker) == (g.max() - g.min()).to_dict()


def test_window_word_count_in_processing_time(broker: EmbeddedBroker, make_job: Any) -> None:  # WindowWordCount
    sentences = ["a b c", "b c", "c", "a a"]
    broker.create_topic("text", queues=2)
    broker.send_batch("text", sentences)
    b = StreamBuilder(job_id("pt"))
    (b.source("text").flat_map(str.split).key_by(lambda w: w).window(TumblingWindow(Time.seconds(10)))
     .count().to_rstream().sink("results", JsonSerializer(with_key=True)))
    make_job(b, time_type="processing_time", idle_timeout_ms=600_000).run_until_idle()
    got = results(broker)
    totals: Counter[str] = Counter()
    for (word, start, end), n in got.items():
        assert end - start == 10_000 and start % 10_000 == 0
        totals[word] += n
    assert totals == Counter(w for s in sentences for w in s.split())


def test_window_sizes_are_checked() -> None:
    with pytest.raises(WindowError, match="size must be positive"):
        TumblingWindow(0)
    with pytest.raises(WindowError, match="slide .* must not exceed the size"):
        SlidingWindow(1000, 2000)
    with pytest.raises(WindowError, match="gap must be positive"):
        SessionWindow(-5)
    with pytest.raises(WindowError, match="duration in milliseconds"):
        TumblingWindow("5s")  # type: ignore[arg-type]


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), queues=st.integers(1, 3), size=st.sampled_from([1000, 3000, 7000]))
def test_generated_out_of_order_streams(spark: Any, tmp_path_factory: Any, seed: int, queues: int, size: int) -> None:
    root = tmp_path_factory.mktemp("gen")
    broker = EmbeddedBroker(root / "broker")
    events = clicks(120, seed=seed, spread=20_000, disorder=5000)
    per_queue = produce(broker, "clicks", events, queues=queues)
    job = RocketMQStream(windowed(job_id("gen"), TumblingWindow(size), "count").build(),
                         {"data_dir": str(root), "max_records_per_queue": 25, **EXACT}, broker=broker, spark=spark)
    job.run_until_idle()
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, size)
    got = results(broker)
    assert got == frame.groupby(["key", "start", "end"]).size().to_dict()
    assert sum(got.values()) + len(job.late_records()) == len(events)  # on time + late = all


def test_windowed_job_survives_restart_and_state_loss(broker: EmbeddedBroker, make_job: Any) -> None:
    events = clicks(300, seed=21)
    per_queue = produce(broker, "clicks", events[:150])
    name = job_id("wrestart")
    first = make_job(windowed(name, TumblingWindow(Time.seconds(5)), "count"), max_records_per_queue=30, **EXACT)
    first.run_until_idle(fire_idle=False)
    first.delete_local_state()
    broker.send_batch("clicks", [json.dumps(e) for e in events[150:]])
    per_queue = {q: [json.loads(m.body) for m in broker.read("clicks", q)] for q in per_queue}
    second = make_job(windowed(name, TumblingWindow(Time.seconds(5)), "count"), max_records_per_queue=30, **EXACT)
    second.run_until_idle()
    assert sum(p.replayed_keys for p in second.progress) > 0
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
    assert len(second.late_records()) == len(late)
