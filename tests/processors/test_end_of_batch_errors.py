"""User code that raises on a result emitted at the end of a batch (here: the sink's serializer on a
per-batch count) dead-letters that result and lets the others through, as a record that raises
during the batch does; with ``skip_data_error`` off it stops the run and nothing of the batch is
committed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, RecordError, StreamBuilder, TextDeserializer
from rstream.processors.base import END_OF_BATCH, dead_letter_row
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topics import dlq_topic_name
from rstream.state.store import decode_state_message

WORDS = ["a", "bad", "b", "a", "bad", "c", "a"]


def _serialize(key: Any, value: Any) -> bytes:
    if key == "bad":
        raise ValueError(f"cannot write {key}")
    return f"{key}={value}".encode()


def _job(broker: EmbeddedBroker, tmp: Path, name: str, **props: Any) -> InProcessJob:
    b = StreamBuilder(name)
    (b.source("in", TextDeserializer()).key_by(lambda w: w).count().to_rstream()
     .sink(f"{name}-out", _serialize))
    return InProcessJob(b.build(), broker, tmp / name, {"aggregate_emit": "batch", **props})


def _sink(broker: EmbeddedBroker, topic: str) -> dict[str, str]:
    return dict(m.body.decode().split("=") for m in broker.read(topic))


def test_a_result_the_serializer_rejects_at_the_end_of_a_batch_is_a_dead_letter(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", WORDS)
    job = _job(broker, tmp_path, "eob")
    job.run_until_idle()
    expected = {w: WORDS.count(w) for w in WORDS}
    assert _sink(broker, "eob-out") == {w: str(n) for w, n in expected.items() if w != "bad"}
    rows = [dead_letter_row(m) for m in broker.read(dlq_topic_name("eob"))]
    assert len(rows) == 1
    row = rows[0]
    assert row["operator"].startswith("SINK") and row["offset"] == END_OF_BATCH and row["body"] == b""
    assert "ValueError: cannot write bad" in row["error"] and "'bad'" in row["value"]
    assert sum(i["error_count"] for i in job.infos) == 1
    # the count of the key whose result was rejected is still kept: a later batch goes on from it
    broker.send_batch("in", ["bad", "a"])
    _job(broker, tmp_path, "eob").run_until_idle()
    assert _sink(broker, "eob-out")["a"] == str(expected["a"] + 1)
    assert [r["operator"] for r in (dead_letter_row(m) for m in broker.read(dlq_topic_name("eob")))] == [row["operator"]] * 2
    state_topic = next(iter(job.topology.state_topics.values()))
    counts = {}
    for q in range(len(broker.end_offsets(state_topic))):
        for body in broker.latest_by_key(state_topic, q).values():
            found = decode_state_message(body)
            if found is not None:
                counts[found[2]] = found[3]
    assert counts == {**expected, "bad": expected["bad"] + 1, "a": expected["a"] + 1}


def test_with_skipping_off_it_stops_the_run_and_commits_nothing_of_the_batch(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", WORDS)
    job = _job(broker, tmp_path, "strict", skip_data_error=False)
    with pytest.raises(RecordError, match=r"SINK-\d+ failed on a result emitted at the end of a batch of topic "
                                          r"'strict-.*' queue \d+: ValueError: cannot write bad"):
        job.run_until_idle()
    assert broker.end_offsets("strict-out") == [0] * len(broker.end_offsets("strict-out"))


def test_the_error_table_says_a_dead_letter_came_from_the_end_of_a_batch(tmp_path: Path) -> None:
    import pandas as pd

    from widgets.errors import ErrorSnapshot

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", WORDS)
    _job(broker, tmp_path, "shown").run_until_idle()
    rows = pd.DataFrame([dead_letter_row(m) for m in broker.read(dlq_topic_name("shown"))])
    snap = ErrorSnapshot("shown", False, rows, 5, 0.0)
    assert "a result at the end of batch 1: ValueError: cannot write bad" in snap.status, snap.status
