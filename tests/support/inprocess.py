"""Run a job in this process (``rstream.runtime.inprocess``, no Spark) on a fresh broker and read
its sink back: the operators' tests compare that with plain Python over the same records. Also the
builders and switches several of those tests share (a keyed aggregate, window results, the
record-by-record path)."""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from rstream.processors.chunk import ChunkedPipeline
from rstream.processors.window import WindowAggregateProcessor
from rstream.runtime.commit import run_queue
from rstream.runtime.inprocess import InProcessJob
from rstream.state.store import StateStore


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


def run_through_a_crash_a_retry_and_lost_state(job: InProcessJob, steps: list[Any], send: Any, root: Path,
                                               props: dict[str, Any]) -> InProcessJob:
    """Run ``job`` (its data in ``root / "job"``) over ``steps``, ``send(step)`` putting each on the broker,
    through three faults: at step 1 a shuffle task dies after its broker commit and before its state
    store's (a new driver goes on from the commits), at step 3 the last shuffle range runs again (and
    must be skipped as done) and the local state is deleted (replayed from the state topics). Then the
    idle flush; returns the job that finished."""
    commit = StateStore.commit
    crashed: list[str] = []

    def crash_once(store: StateStore, *args: Any) -> Any:
        if not crashed and "shuffleTopic" in store.state_topic:
            crashed.append(store.state_topic)
            raise RuntimeError("the task died after its commit")
        return commit(store, *args)

    for i, step in enumerate(steps):
        send(step)
        if i == 1:
            with mock.patch.object(StateStore, "commit", crash_once), pytest.raises(RuntimeError, match="died"):
                job.run_until_idle(fire_idle=False)
            job = InProcessJob(job.topology, job.broker, root / "job", props)  # a new driver, from the commits
        if i == 3:
            again = [info for info in job.infos if "shuffleTopic" in info["topic"] and not info.get("skipped")][-1]
            info = run_queue(job.cfg, again["topic"], again["queue"], again["start"], again["end"], again["batch"])
            assert info["skipped"]
            shutil.rmtree(root / "job" / "state")
            job = InProcessJob(job.topology, job.broker, root / "job", props)
        job.run_until_idle(fire_idle=False)
    job.run_until_idle()
    assert crashed
    assert sum(info.get("replayed_keys", 0) for info in job.infos) > 0
    return job
