"""reduce on Spark: keyed running results and one result per window, against functools.reduce over
the same records (the in-process tests in tests/processors check the same without Spark)."""

from __future__ import annotations

import functools
import itertools
import json
from collections import defaultdict
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, TumblingWindow
from tests.support.jobs import job_id
from tests.support.reference import split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results


def test_keyed_reduce_on_spark_is_functools_reduce(broker: EmbeddedBroker, make_job: Any) -> None:
    words = "ant bee ant cat bee ant dog ant".split() * 5
    broker.create_topic("words", queues=1)
    broker.send_batch("words", words)
    b = StreamBuilder(job_id("reduce"), shuffle_queues=2)
    (b.source("words").key_by(lambda w: w).map(len)
     .reduce(lambda acc, n: acc * 2 + n).to_rstream().sink("out", JsonSerializer(with_key=True)))
    make_job(b, max_records_per_queue=9).run_until_idle()
    got: dict[str, list[int]] = defaultdict(list)
    for m in sorted(broker.read("out"), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        got[doc["key"]].append(doc["value"])
    by_key: dict[str, list[int]] = defaultdict(list)
    for w in words:
        by_key[w].append(len(w))
    assert dict(got) == {k: list(itertools.accumulate(v, lambda a, n: a * 2 + n)) for k, v in by_key.items()}
    assert {k: v[-1] for k, v in got.items()} == {
        k: functools.reduce(lambda a, n: a * 2 + n, v) for k, v in by_key.items()}


def test_windowed_reduce_on_spark_is_functools_reduce(broker: EmbeddedBroker, make_job: Any) -> None:
    per_queue = produce(broker, "clicks", clicks(150, seed=11), queues=2)
    b = StreamBuilder(job_id("wreduce"), shuffle_queues=3)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(TumblingWindow(5000)).reduce(lambda a, c: a if a["amount"] >= c["amount"] else c)
     .to_rstream().sink("results", JsonSerializer(with_key=True)))
    make_job(b, **EXACT).run_until_idle()
    on_time, _late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 5000)
    expected = {k: functools.reduce(max, g) for k, g in frame.groupby(["key", "start", "end"])["value"]}
    assert {k: v["amount"] for k, v in results(broker).items()} == expected
