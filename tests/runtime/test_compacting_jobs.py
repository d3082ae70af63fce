"""Compaction of the state topics while jobs run: nothing is lost, replays from a compacted state
topic rebuild the exact state, and the results equal a plain-Python reference."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, RocketMQStream, StateError, Time, TumblingWindow
from tests.support.jobs import assert_exact_counts, job_id, wordcount
from tests.support.reference import split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results, windowed

#: The broker compacts a state queue as soon as 10 changelog records are dirty: many times per run.
EAGER: dict[str, Any] = {"compact_min_dirty": 10, "compact_dirty_ratio": 0.3, "compact_min_lag": 0,
                         "compact_min_lag_ms": 0, "compact_delete_retention_ms": 0}


def _run(spark: Any, broker: EmbeddedBroker, builder: Any, root: Path, **props: Any) -> RocketMQStream:
    job = RocketMQStream(builder.build(), {"data_dir": str(root), "max_records_per_queue": 40, **props},
                         broker=broker, spark=spark)
    job.run_until_idle()
    return job


def _compacted(broker: EmbeddedBroker, job: RocketMQStream) -> int:
    (state_topic,) = job.topology.state_topics.values()
    return sum(broker.compacted_below(state_topic, q) for q in range(broker.topic(state_topic).queues))


def test_keyed_count_loses_nothing_while_its_state_topic_is_compacted(spark: Any, tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker", **EAGER)
    broker.create_topic("sentences", queues=2)
    sentences = [f"w{i % 13} w{i % 7} w{(i * i) % 17} w{i % 5}" for i in range(400)]
    broker.send_batch("sentences", sentences[:250])
    name = job_id("compact")
    first = _run(spark, broker, wordcount(name), tmp_path)
    assert len(first.progress) > 3  # many batches, so many changelog appends
    assert _compacted(broker, first) > 0  # compaction really ran inside the job's tasks
    history = first.history()
    (shuffle, state_topic), = first.topology.state_topics.items()
    gone = [b.batch_id for b in history for q in range(3)
            if 0 < first.state_end(shuffle, q, b.batch_id) < broker.compacted_below(state_topic, q)]
    assert gone
    with pytest.raises(StateError, match="compacted"):
        first.state(batch=gone[0])  # that past is gone, and it says so
    latest = first.state(batch=history[-1].batch_id)
    assert dict(zip(latest["key"], latest["value"])) == dict(Counter(w for s in sentences[:250] for w in s.split()))
    first.delete_local_state()  # the next run replays every queue from the compacted state topic

    broker.send_batch("sentences", sentences[250:])
    second = _run(spark, broker, wordcount(name), tmp_path)
    assert sum(p.replayed_keys for p in second.progress) > 0
    expected = Counter(w for s in sentences for w in s.split())
    assert_exact_counts(broker, "counts", sentences)  # every running count once, in order
    state = second.state()
    assert dict(zip(state["key"], state["value"])) == dict(expected)
    second.delete_local_state()
    second.replay_state(progress=False)
    again = second.state()
    assert dict(zip(again["key"], again["value"])) == dict(expected)


def test_window_count_with_deletes_loses_nothing_while_compacted(spark: Any, tmp_path: Path) -> None:
    """Fired windows delete their state (tombstones), which compaction drops at once here."""
    broker = EmbeddedBroker(tmp_path / "broker", **EAGER)
    events = clicks(600, seed=5, users=6)
    per_queue = produce(broker, "clicks", events)
    name = job_id("wcompact")
    builder = windowed(name, TumblingWindow(Time.seconds(2)), "count")
    job = _run(spark, broker, builder, tmp_path, **EXACT)
    assert _compacted(broker, job) > 0
    (state_topic,) = job.topology.state_topics.values()
    for q in range(broker.topic(state_topic).queues):
        below = broker.compacted_below(state_topic, q)
        stored = broker.read(state_topic, q)
        assert len(stored) < broker.end_offsets(state_topic)[q]  # superseded values and deletes are gone
        assert all(m.body for m in stored if m.offset < below)  # deletes dropped (no retention here)
    on_time, _late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 2000)
    expected = frame.groupby(["key", "start", "end"])["value"].size().to_dict()
    assert results(broker) == expected
