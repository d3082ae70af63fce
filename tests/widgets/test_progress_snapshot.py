"""``ProgressSnapshot``: the plain object under the monitor, checked against a job that really ran."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from rstream import RocketMQStream
from rstream.widgets import ProgressSnapshot


def test_batches_table_matches_the_jobs_progress(finished_job: Any, sentences: list[str]) -> None:
    snap = ProgressSnapshot.of(finished_job)
    df = snap.to_pandas()
    progress = finished_job.progress
    # a batch reads the source and (its source tasks, once they all committed) the shuffle topic
    assert progress and all({q.topic == "sentences" for q in p.queues} == {True, False} for p in progress)
    assert list(df["batch_id"]) == [p.batch_id for p in progress][-10:]
    assert list(df.columns) == ["batch_id", "time", "records_in", "records_out", "replayed_keys", "errors",
                                "duration_ms"]
    words = sum(len(s.split()) for s in sentences if s != "boom")
    # source records, then every word once more through the shuffle topic
    assert snap.total_records_in == len(sentences) + words == df["records_in"].sum()
    assert snap.total_errors == 1 == df["errors"].sum()
    assert snap.total_replayed_keys == 0
    assert (df["duration_ms"] > 0).all()
    assert not snap.running


def test_operators_in_topology_order_with_last_batch_and_totals(finished_job: Any, sentences: list[str]) -> None:
    snap = ProgressSnapshot.of(finished_job)
    ops = snap.operators_to_pandas().set_index("operator")
    assert list(ops.index) == [n.name for n in finished_job.topology.nodes]
    words = Counter(w for s in sentences if s != "boom" for w in s.split())
    assert ops.loc["SOURCE-1", "total_records_in"] == len(sentences)
    assert ops.loc["COUNT-4", "total_records_in"] == sum(words.values())
    last = finished_job.last_progress.operators()
    for name, row in ops.iterrows():
        assert row["records_in"] == last.get(name, {}).get("records_in", 0)
    assert ops["records_in"].sum() > 0


def test_html_shows_status_batches_and_operators(finished_job: Any) -> None:
    snap = ProgressSnapshot.of(finished_job, last=1)
    html = snap._repr_html_()
    last = finished_job.last_progress
    assert f"job &#x27;widgets-finished&#x27;: stopped, {len(finished_job.progress)} batches" in html
    assert f"last batch {last.batch_id}" in html
    assert f"operators, batch {last.batch_id}" in html
    assert "COUNT-4" in html and "SHUFFLE_SINK-4" in html
    assert "(errors)" in html
    assert len(snap.to_pandas()) == 1


def test_a_job_that_never_ran(spark: Any, module_broker: Any, wordcount_builder: Any, tmp_path: Any) -> None:
    job = RocketMQStream(wordcount_builder("widgets-idle").build(), properties={"data_dir": str(tmp_path)},
                         broker=module_broker, spark=spark)
    snap = ProgressSnapshot.of(job)
    assert snap.status == "job 'widgets-idle': stopped, no batches yet"
    assert snap.to_pandas().empty
    assert list(snap.operators_to_pandas()["records_in"]) == [0] * len(job.topology.nodes)
    assert "no batches yet" in snap._repr_html_()


def test_last_must_be_positive(finished_job: Any) -> None:
    with pytest.raises(ValueError, match="last must be at least 1 batch, got 0"):
        ProgressSnapshot.of(finished_job, last=0)
