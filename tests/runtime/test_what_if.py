"""``job.what_if(...)``: a job's committed input run again with other settings or another topology, in
scratch storage: what it says the job gives is what the job gave, what it says another lateness or
another window gives is what a fresh job with them gives on a copy of the input, and it writes nothing
to the job's broker."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, JsonDeserializer, RocketMQStream, StreamBuilder, TumblingWindow
from rstream.runtime.what_if import LATE, WhatIfError
from tests.support.jobs import job_id

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
    assert not diff.empty and set(diff["change"]) <= {"differs", "only before", "only after"}
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
