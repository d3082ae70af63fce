"""Combining before the shuffle, run in this process (no Spark): a job's phases run until idle, and
what must not change when partials replace records (records in and out, the latest state)."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings

from rstream import EmbeddedBroker
from rstream.runtime.inprocess import InProcessJob
from rstream.state.store import decode_state_message

_RUNS = itertools.count()
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def state_of(broker: EmbeddedBroker, job: InProcessJob) -> dict[bytes, Any]:
    """The latest value per state key in the job's state topics (deletes drop the key)."""
    out: dict[bytes, Any] = {}
    for topic in job.topology.state_topics.values():
        if not broker.has_topic(topic):
            continue
        for m in broker.read(topic):
            kb = bytes.fromhex(m.key)
            decoded = decode_state_message(m.body, m.headers)
            if decoded is None:
                out.pop(kb, None)
            else:
                out[kb] = decoded[3]
    return out


def flow(job: InProcessJob) -> tuple[Counter[str], Counter[str]]:
    """Records in per kind of queue and records out per topic, summed over the job's ranges: a
    partial counts as the records it holds, so combining changes neither."""
    ins: Counter[str] = Counter()
    outs: Counter[str] = Counter()
    for info in job.infos:
        ins["source" if info["topic"] in job.topology.source_topics else "shuffle"] += info["records_in"]
        outs.update(info["records_out"])
    return ins, outs


def run_phases(tmp_path: Path, builder: Any, phases: list[list[dict[str, Any]]], queues: int,
               source: str = "clicks", sink: str = "results", combine: bool = True, **props: Any) -> tuple[EmbeddedBroker, InProcessJob]:
    """Send each phase's events to ``source`` (round robin over ``queues``), then run the job until idle
    with an idle flush (every window fires): a later phase's old clicks then meet windows that already
    fired."""
    root = tmp_path / f"run-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic(source, queues=queues)
    broker.create_topic(sink, queues=2)
    job = InProcessJob(builder.build(combine=combine), broker, root / "job", props)
    for events in phases:
        if events:
            broker.send_batch(source, [json.dumps(e) for e in events])
        job.run_until_idle()
    return broker, job
