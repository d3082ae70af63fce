"""``JobMonitor``: the widget shows a finished job, and its one renderer thread follows a running one."""

from __future__ import annotations

import time
from typing import Any

import ipywidgets
import pytest

from rstream import EmbeddedBroker, RocketMQStream
from rstream.widgets import JobMonitor
from tests.support.widgets import wait_for


def test_shows_a_finished_job_without_a_kernel(finished_job: Any) -> None:
    monitor = JobMonitor(finished_job)
    assert isinstance(monitor, ipywidgets.VBox)
    last = finished_job.last_progress
    assert "job &#x27;widgets-finished&#x27;: stopped" in monitor.status_line.value
    assert f"last batch {last.batch_id}" in monitor.status_line.value
    for p in finished_job.progress:
        assert f">{p.batch_id}</td>" in monitor.batch_table.value
    assert f"operators, batch {last.batch_id}" in monitor.operator_table.value
    assert "COUNT-4" in monitor.operator_table.value
    assert not monitor.refresh()  # nothing new: no redraw
    bundle = monitor._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == monitor.model_id
    assert "latest batches" in bundle["text/html"]  # for static views of the notebook
    assert monitor.snapshot().to_pandas()["errors"].sum() == 1


def test_one_renderer_thread_follows_the_job_and_replay(
    spark: Any, wordcount_builder: Any, recording_comm: Any, tmp_path: Any, sentences: list[str]
) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("sentences", queues=2)
    job = RocketMQStream(wordcount_builder("widgets-live").build(),
                         properties={"data_dir": str(tmp_path / "data")}, broker=broker, spark=spark)
    monitor = JobMonitor(job, interval=0.05)
    assert "no batches yet" in monitor.status_line.value
    children = (monitor.status_line, monitor.batch_table, monitor.operator_table)
    drawn_before = [len(w.comm.sent) for w in children]
    began = time.perf_counter()
    assert monitor.start() is monitor
    assert monitor.start() is monitor  # a second start does not start a second thread
    assert time.perf_counter() - began < 0.5
    assert monitor.is_monitoring
    thread_name = monitor._thread.name
    try:
        broker.send_batch("sentences", sentences)
        job.run_until_idle(timeout=120)
        first = len(job.progress)
        assert wait_for(lambda: f"{first} batches" in monitor.status_line.value), monitor.status_line.value

        # Losing the local state: the next batches replay it from the state topic.
        job.delete_local_state()
        broker.send_batch("sentences", ["the dog barks"])
        job.run_until_idle(timeout=120)
        replayed = sum(p.replayed_keys for p in job.progress)
        assert replayed > 0
        assert wait_for(lambda: f"{replayed} keys replayed" in monitor.status_line.value), \
            monitor.status_line.value
        assert "#e7f5ff" in monitor.batch_table.value  # a non-zero replayed_keys cell is highlighted
    finally:
        monitor.stop()
    assert not monitor.is_monitoring

    # Every redraw after start() was sent by the renderer thread, none by the test (the kernel).
    updates = [(thread, data) for w, before in zip(children, drawn_before)
               for thread, kind, data in w.comm.sent[before:]
               if kind == "comm_msg" and data.get("method") == "update"]
    assert len(updates) >= 6
    assert {thread for thread, _ in updates} == {thread_name}


def test_rejects_what_is_not_a_job(finished_job: Any) -> None:
    with pytest.raises(TypeError, match="needs a RocketMQStream, got str"):
        JobMonitor("wordcount")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval must be positive seconds, got 0"):
        JobMonitor(finished_job, interval=0)
