"""Run a job in this process (``rstream.runtime.inprocess``, no Spark) on a fresh broker and read
its sink back: the operators' tests compare that with plain Python over the same records."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from rstream import EmbeddedBroker, StreamBuilder
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
