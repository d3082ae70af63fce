"""``job.what_if(...)``: a job's committed input run again with other settings or another topology, in
scratch storage: what it says the job gives is what the job gave, what it says another lateness or
another window gives is what a fresh job with them gives on a copy of the input, and it writes nothing
to the job's broker. Its diff, per key and window (values only in one run or different, records that
became late or on time), against a plain Python reference over generated input, in this process."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, JsonDeserializer, RocketMQStream, StreamBuilder, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.what_if import (
    BECAME_LATE,
    BECAME_ON_TIME,
    CHANGES,
    DIFFERS,
    LATE,
    ONLY_AFTER,
    ONLY_BEFORE,
    WhatIfError,
    what_if,
)
from tests.support.jobs import job_id
from tests.support.reference import fixed_windows, split_late

T0 = 1_700_000_000_000


def clicks_job(name: str, window: int = 5000) -> StreamBuilder:
    b = StreamBuilder(name, shuffle_queues=2)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])
     .window(TumblingWindow(window)).count().to_rstream().sink("counts"))
    return b


def clicks(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"page": f"p{rng.randrange(3)}", "ts": T0 + i * 300 - rng.randrange(3000)} for i in range(n)]


def sink_per_key(broker: EmbeddedBroker, topic: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for m in broker.read(topic):
        out[m.key].append(m.body.decode())
    return {k: sorted(v) for k, v in out.items()}


def fresh_run(tmp: Path, spark: Any, events: list[dict[str, Any]], builder: StreamBuilder, **props: Any) -> dict[str, list[str]]:
    """The job ``builder`` makes, run on Spark over a copy of the input (one batch per 7 records a queue)."""
    broker = EmbeddedBroker(tmp / "broker")
    broker.create_topic("clicks", queues=2)
    for q in range(2):
        broker.send_batch("clicks", [json.dumps(e) for e in events[q::2]], queue=q)
    job = RocketMQStream(builder.build(), spark=spark, broker=broker,
                         properties={"data_dir": str(tmp), "max_records_per_queue": 7, "idle_timeout_ms": 600_000, **props})
    try:
        job.run_until_idle()
    finally:
        job.stop()
    return sink_per_key(broker, "counts")


def test_what_if_gives_what_the_job_gave_and_what_a_fresh_job_with_the_changes_gives(
        spark: Any, broker: EmbeddedBroker, make_job: Any, tmp_path: Path) -> None:
    events = clicks(120, seed=3)
    broker.create_topic("clicks", queues=2)
    for q in range(2):
        broker.send_batch("clicks", [json.dumps(e) for e in events[q::2]], queue=q)
    name = job_id("whatif")
    job = make_job(clicks_job(name), idle_timeout_ms=600_000)
    job.run_until_idle()
    ends = {t.name: broker.end_offsets(t.name) for t in broker.topics()}

    stricter = job.what_if(allowed_lateness_ms=200)
    # the job as it is, run again: exactly what it wrote
    assert {k: sorted(v) for k, v in stricter.before["counts"].items()} == sink_per_key(broker, "counts")
    # with the change: what a fresh job with it gives on a copy of the input, on Spark, in other batches
    assert {k: sorted(v) for k, v in stricter.after["counts"].items()} == fresh_run(
        tmp_path / "fresh", spark, events, clicks_job(job_id("fresh")), allowed_lateness_ms=200)
    diff = stricter.diff()
    assert not diff.empty and set(diff["change"]) <= set(CHANGES) - {BECAME_ON_TIME}
    assert BECAME_LATE in set(diff["change"]) and DIFFERS in set(diff["change"])
    # a stricter lateness: more records late, none fewer
    late_before = sum(map(len, stricter.before[LATE].values()))
    late_after = sum(map(len, stricter.after[LATE].values()))
    assert late_after > late_before
    assert (diff["sink"] == LATE).any()

    # another topology from the same source: 10 s windows
    wider = job.what_if(clicks_job(job_id("wider"), window=10_000))
    assert {k: sorted(v) for k, v in wider.after["counts"].items()} == fresh_run(
        tmp_path / "wide", spark, events, clicks_job(job_id("wide"), window=10_000))
    assert wider.changes == {"topology": wider.changes["topology"]} and not wider.same
    assert job.what_if(max_records_per_queue=3).same  # the batch cut changes nothing
    # nothing was written to the job's broker
    assert {t.name: broker.end_offsets(t.name) for t in broker.topics()} == ends


def test_what_if_refuses_what_a_run_again_cannot_give(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("clicks", queues=1)
    broker.create_topic("other", queues=1)
    job = make_job(clicks_job(job_id("refuse")))
    with pytest.raises(WhatIfError, match=r"cannot change \['idle_timeout_ms'\]"):
        job.what_if(idle_timeout_ms=10)
    other = StreamBuilder(job_id("other"))
    other.source("other").sink("copy")
    with pytest.raises(WhatIfError, match=r"reads \['other'\], which job .* does not read"):
        job.what_if(other)


# -- the diff, in this process, against plain Python -------------------------------------------------
def per_window(on_time: list[dict[str, Any]], size: int) -> dict[tuple[str, tuple[int, int]], int]:
    """The count per page and window of ``on_time`` clicks."""
    out: dict[tuple[str, tuple[int, int]], int] = defaultdict(int)
    for e in on_time:
        for w in fixed_windows(e["ts"], size):
            out[(e["page"], w)] += 1
    return dict(out)


@pytest.mark.unit
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10_000), batch=st.integers(4, 30), lateness=st.sampled_from([0, 300, 1500, 4000]),
       other=st.sampled_from([0, 200, 1000, 2500, 6000]))
def test_the_diff_names_each_window_that_changed_and_each_record_that_became_late_or_on_time(
        tmp_path_factory: Any, seed: int, batch: int, lateness: int, other: int) -> None:
    tmp = tmp_path_factory.mktemp("what-if-diff")
    events = clicks(90, seed)
    broker = EmbeddedBroker(tmp / "broker")
    broker.create_topic("clicks", queues=2)
    for q in range(2):
        broker.send_batch("clicks", [json.dumps(e) for e in events[q::2]], queue=q)
    places = {(q, i): ("clicks", q, m.offset) for q in range(2) for i, m in enumerate(broker.read("clicks", q))}
    topology = clicks_job(job_id("diff")).build()
    job = InProcessJob(topology, broker, tmp / "job", {"max_records_per_queue": batch, "idle_timeout_ms": 600_000,
                                                       "allowed_lateness_ms": lateness})
    job.run_until_idle()
    result = what_if(topology, broker, job.settings, {"allowed_lateness_ms": other}, work=tmp / "work")

    queues = {q: [{**e, "place": places[(q, i)]} for i, e in enumerate(events[q::2])] for q in range(2)}
    on_time_x, late_x = split_late(queues, lambda e: e["ts"], lateness)
    on_time_y, late_y = split_late(queues, lambda e: e["ts"], other)
    x, y = per_window(on_time_x, 5000), per_window(on_time_y, 5000)
    expected = set()
    for key in set(x) | set(y):
        if x.get(key) != y.get(key):
            expected.add((*key, ONLY_AFTER if key not in x else ONLY_BEFORE if key not in y else DIFFERS, None))
    late_before = {e["place"]: e for e, _wm in late_x}
    late_after = {e["place"]: e for e, _wm in late_y}
    for found, other_run, change in ((late_after, late_before, BECAME_LATE), (late_before, late_after, BECAME_ON_TIME)):
        for place in set(found) - set(other_run):
            e = found[place]
            expected.add((e["page"], fixed_windows(e["ts"], 5000)[0], change, "/".join(map(str, place))))

    diff = result.diff()
    got = {(r.key, r.window, r.change, r.record) for r in diff.itertuples()}
    assert got == expected
    assert result.same == (not expected)
    for r in diff.itertuples():  # the values are what each run wrote: the reference's counts
        if r.sink != LATE:
            assert r.before == ([f"{r.key}@[{r.window[0]},{r.window[1]}):{x[(r.key, r.window)]}"]
                                if (r.key, r.window) in x else [])
            assert r.after == ([f"{r.key}@[{r.window[0]},{r.window[1]}):{y[(r.key, r.window)]}"]
                               if (r.key, r.window) in y else [])
    assert result.counts() == {c: sum(1 for row in expected if row[2] == c) for c in CHANGES
                               if any(row[2] == c for row in expected)}
    assert result.to_pandas().equals(diff)


@pytest.mark.unit
def test_the_result_shows_both_pictures_on_the_same_axes_and_the_diff_in_the_notebooks_width(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("clicks", queues=2)
    events = clicks(60, seed=5)
    for q in range(2):
        broker.send_batch("clicks", [json.dumps(e) for e in events[q::2]], queue=q)
    topology = clicks_job(job_id("shown")).build()
    job = InProcessJob(topology, broker, tmp_path / "job", {"max_records_per_queue": 6, "idle_timeout_ms": 600_000})
    job.run_until_idle()
    ends = {t.name: broker.end_offsets(t.name) for t in broker.topics()}
    wider = what_if(topology, broker, job.settings, {}, clicks_job(job_id("wider"), window=10_000))
    assert {t.name: broker.end_offsets(t.name) for t in broker.topics()} == ends  # nothing written
    assert set(wider.counts()) == {ONLY_BEFORE, ONLY_AFTER} and wider.changes["topology"].startswith("wider")
    # each run's picture, over its batches: every window it fired, every record it shuffled
    for run in (wider.before_run, wider.after_run):
        pic = run.picture
        assert pic.axis.startswith("batch") and pic.now_ms == run.batches * 1000
        assert all(0 <= t <= pic.now_ms for t, _ in pic.events) and len(pic.events) > 0
        fired = {(s.start, s.end) for s in pic.spans if s.fired_ms is not None}
        assert fired == {w for k in run.sinks["counts"] for w in [tuple(map(int, k.split("@[")[1][:-1].split(",")))]}
    html = wider._repr_html_()
    assert html.count("<img") == 2 and "<table" in html and "only before" in html and "only after" in html
    assert "before: the job as it is" in html and "after: topology wider" in html
    assert "max-width:100%" in html and "width:9" not in html
    assert "p0" in wider.table_html(key="p0") and "p1" not in wider.table_html(key="p0")
    assert "only after" not in wider.table_html(changes=[ONLY_BEFORE])
    again = what_if(topology, broker, job.settings, {})
    assert "no differences" in again.table_html()
    # over batches, a run's picture is the same however long its batches took: both runs draw the same
    x, y = again.before_run.picture, again.after_run.picture
    assert (x.watermarks, x.operator_watermarks, x.spans, x.late, x.events, x.now_ms) == (
        y.watermarks, y.operator_watermarks, y.spans, y.late, y.events, y.now_ms)
