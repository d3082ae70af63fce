"""``.late()`` and ``window(w, emit="early")`` on Spark: the late stream equals ``job.late_records()``
and the reference, a late record's trace reaches the late stream's sink, early and final results
are the reference's, and all of it holds through a restart with the local state deleted."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import pytest

from rstream import EmbeddedBroker, TumblingWindow
from tests.support.jobs import job_id
from tests.support.late import (
    EXACT,
    as_rows,
    fixed_aggregates,
    late_job,
    late_rows,
    late_stream,
    on_time,
    per_queue,
    reference_late,
    stepped_clicks,
)


def finals_and_early(broker: EmbeddedBroker) -> tuple[dict[tuple[Any, ...], int], dict[tuple[Any, ...], list[int]]]:
    """The final count per window (each once), and each window's early counts in order."""
    finals: dict[tuple[Any, ...], int] = {}
    early: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for m in sorted(broker.read("results"), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        wk, (value, final) = tuple(doc["key"]), doc["value"]
        if final:
            assert wk not in finals, f"{wk} fired twice"
            finals[wk] = value
        else:
            assert wk not in finals, f"{wk} emitted early after its final result"
            early[wk].append(value)
    return finals, dict(early)


def test_late_stream_and_early_results_on_spark_through_a_restart_with_local_state_deleted(
        broker: EmbeddedBroker, make_job: Any) -> None:
    parts = stepped_clicks(240, 17, 4)
    broker.create_topic("clicks", queues=2)
    name = job_id("late-early")
    props = {**EXACT, "max_records_per_queue": 30}
    first = make_job(late_job(name, TumblingWindow(3000)), **props)
    for step in parts[:2]:
        broker.send_batch("clicks", [json.dumps(e) for e in step])
        first.run_until_idle(fire_idle=False)
    late_before = late_stream(broker)
    assert late_before and as_rows(late_before) == late_rows(first.late_records().to_dict("records"))

    # a late record's trace: the late-data topic, and the late stream's sink message it became
    source = next(m for m in broker.read("clicks") if any(json.loads(m.body)["ts"] == r[2] and json.loads(m.body)
                                                           == json.loads(r[1]) for r in late_before))
    hops = first.trace("clicks", source.queue_id, source.offset).to_pandas()
    assert "late" in set(hops["kind"])
    [sunk] = hops[(hops["kind"] == "sink") & (hops["topic"] == "late")].itertuples()
    message = broker.read("late", sunk.queue, sunk.offset, sunk.offset + 1)[0]
    assert json.loads(message.body)["value"][1] == json.loads(source.body)

    first.stop()
    first.delete_local_state()
    second = make_job(late_job(name, TumblingWindow(3000)), **props)
    for step in parts[2:]:
        broker.send_batch("clicks", [json.dumps(e) for e in step])
        second.run_until_idle(fire_idle=False)
    second.run_until_idle()
    assert sum(p.replayed_keys for p in second.progress) > 0

    queues = per_queue(broker)
    stream = late_stream(broker)
    assert [s[:5] for s in stream] == reference_late(queues)
    assert as_rows(stream) == late_rows(second.late_records().to_dict("records"))  # each once, both runs
    finals, early = finals_and_early(broker)
    good = on_time(queues)
    assert finals == fixed_aggregates(good, 3000, None, lambda e: 1)
    assert early, "some windows stayed open across batches"
    for wk, counts in early.items():  # each early count is a count of the window so far: growing, below its final
        assert counts == sorted(set(counts)) and counts[-1] <= finals[wk], (wk, counts, finals[wk])

    # an on-time record's trace: the early result of its window at the end of its batch, then the final one
    for m in broker.read("clicks", 0)[:12]:
        trace = second.trace("clicks", m.queue_id, m.offset)
        hops = trace.to_pandas()
        early_hops = hops[hops["note"].str.contains("early result")]
        if len(early_hops):
            assert trace.exact
            assert all(v["value"][1] is False for v in early_hops["value"]), list(early_hops["value"])
            [fired] = hops[hops["kind"] == "fired"].itertuples()
            assert fired.value["value"][1] is True and fired.batch_id > early_hops.iloc[0]["batch_id"]
            break
    else:
        pytest.fail("no traced record's window emitted early")
