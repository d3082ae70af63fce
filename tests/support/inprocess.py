"""Run a job in this process (``rstream.runtime.inprocess``, no Spark) on a fresh broker and read
its sink back: the operators' tests compare that with plain Python over the same records. Also the
builders and switches several of those tests share (a keyed aggregate, window results, the
record-by-record path)."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from rstream.processors.chunk import ChunkedPipeline
from rstream.processors.window import WindowAggregateProcessor
from rstream.runtime.inprocess import InProcessJob


def produce(broker: EmbeddedBroker, topic: str, values: list[Any], queues: int = 2) -> dict[int, list[Any]]:
    """Send JSON values (keyless: round robin over the queues); returns them per queue as stored."""
    broker.create_topic(topic, queues=queues)
    broker.send_batch(topic, [json.dumps(v) for v in values])
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(queues)}


def run(builder: StreamBuilder, broker: EmbeddedBroker, tmp: Path, combine: bool = True, **props: Any) -> InProcessJob:
    job = InProcessJob(builder.build(combine=combine), broker, tmp / "jobs" / builder.job_id, props)
    job.run_until_idle()
    return job


def emitted(broker: EmbeddedBroker, topic: str) -> dict[Any, list[Any]]:
    """Per key, every value the JSON sink wrote for it, in order (a key's results stay in one queue)."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for m in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        key = doc["key"]
        out[tuple(key) if isinstance(key, list) else key].append(doc["value"])
    return dict(out)


def keyed(job: str, agg: str, *args: Any) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    grouped = b.source("in", JsonDeserializer()).key_by(lambda r: r["k"])
    getattr(grouped, agg)(*args).to_rstream().sink("out", JsonSerializer(with_key=True))
    return b


def records(words: list[str], seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"k": w, "n": rng.randint(-50, 50)} for w in words]


def results(broker: EmbeddedBroker) -> dict[tuple[Any, int, int], Any]:
    out = {}
    for m in broker.read("results"):
        doc = json.loads(m.body)
        key = tuple(doc["key"])
        assert key not in out, "a window fired twice"
        out[key] = doc["value"]
    return out


@contextmanager
def record_by_record() -> Iterator[None]:
    """No chunked plan, and windows fired one by one through ``forward``."""
    with (mock.patch.object(ChunkedPipeline, "of", staticmethod(lambda *args: None)),
          mock.patch.object(WindowAggregateProcessor, "_sink_after", lambda self: None)):
        yield
