"""``WatermarkMonitor`` and ``LateDataTable``: they show a finished job without a kernel, and their
renderer threads (one each) follow a running one."""

from __future__ import annotations

from html import unescape
from typing import Any

import ipywidgets
import pytest

from rstream import EmbeddedBroker
from rstream.widgets import LateDataTable, WatermarkMonitor
from rstream.widgets.html import table
from tests.support.jobs import job_id
from tests.support.widgets import FAST, SLOW, WINDOW_PROPS, send_clicks, wait_for


def test_watermark_monitor_shows_why_windows_wait(held_back_job: Any) -> None:
    job, _ = held_back_job
    monitor = WatermarkMonitor(job)
    assert isinstance(monitor, ipywidgets.VBox)
    sink = next(n.name for n in job.topology.nodes if n.kind == "shuffle_sink")
    assert "job &#x27;widgets-held-back&#x27;: stopped" in monitor.status_line.value
    reason = f"watermark 14000 < window end 20000; held back by clicks/1/{sink} (watermark 14000)"
    assert reason in unescape(monitor.pending_table.value)
    assert f"clicks/0/{sink}" in monitor.producer_table.value.replace("<wbr>", "")  # breakable after "/", "_"
    assert ">19000</td>" in monitor.source_table.value and ">14000</td>" in monitor.source_table.value
    assert "allowed lateness 2000 ms" in monitor.legend.value
    assert not monitor.refresh()  # nothing new: no redraw
    bundle = monitor._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == monitor.model_id
    assert "open windows: why they have not fired yet" in bundle["text/html"]
    assert repr(monitor) == "WatermarkMonitor(job='widgets-held-back', idle)"


def test_late_data_table_shows_the_late_record(held_back_job: Any) -> None:
    job, _ = held_back_job
    table = LateDataTable(job, last=5)
    assert "1 late records" in table.status_line.value
    assert "data time 4000 is behind its source queue&#x27;s watermark 19000" in table.record_table.value
    assert "late records per operator and cause" in table.summary_table.value
    assert table.snapshot().to_pandas().equals(job.late_records())
    assert not table.refresh()


def test_renderer_threads_follow_a_running_job(broker: EmbeddedBroker, make_job: Any, page_clicks_builder: Any,
                                               recording_comm: Any) -> None:
    broker.create_topic("clicks", queues=2)
    job = make_job(page_clicks_builder(job_id("live-wm")), trigger_interval_ms=100, **WINDOW_PROPS)
    watermarks = WatermarkMonitor(job, interval=0.05)
    late = LateDataTable(job, interval=0.05)
    assert "no window or join queue has run yet" in watermarks.status_line.value
    assert "no late records" in late.status_line.value
    children = [watermarks.status_line, watermarks.pending_table, late.status_line, late.record_table]
    before = [len(w.comm.sent) for w in children]
    assert watermarks.start() is watermarks and late.start() is late
    assert watermarks.start() is watermarks  # a second start does not start a second thread
    threads = {watermarks._thread.name, late._thread.name}
    assert threads == {f"rstream-watermarks-{job.job_id}", f"rstream-late-{job.job_id}"}
    job.start()
    try:
        send_clicks(broker, 1, SLOW)
        job.run_until_idle(timeout=120, fire_idle=False)
        assert wait_for(lambda: "no watermark yet: clicks/0/" in unescape(watermarks.pending_table.value)), \
            watermarks.pending_table.value  # queue 0 has sent nothing yet
        send_clicks(broker, 0, FAST)
        job.run_until_idle(timeout=120, fire_idle=False)
        assert wait_for(lambda: "held back by clicks/1/" in unescape(watermarks.pending_table.value)), \
            watermarks.pending_table.value
        assert wait_for(lambda: "data time 4000 is behind" in unescape(late.record_table.value)), \
            late.record_table.value
    finally:
        job.stop()
        watermarks.stop()
        late.stop()
    assert not watermarks.is_monitoring and not late.is_monitoring
    assert "stopped" in watermarks.status_line.value and "stopped" in late.status_line.value

    # Every redraw after start() was sent by a renderer thread, none by the test (the kernel).
    updates = [thread for w, n in zip(children, before) for thread, kind, data in w.comm.sent[n:]
               if kind == "comm_msg" and data.get("method") == "update"]
    assert len(updates) >= 6
    assert set(updates) == threads


def test_rejects_what_is_not_a_job(held_back_job: Any) -> None:
    with pytest.raises(TypeError, match="WatermarkMonitor needs a RocketMQStream, got str"):
        WatermarkMonitor("clicks")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="LateDataTable needs a RocketMQStream, got str"):
        LateDataTable("clicks")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="interval must be positive seconds, got -1"):
        WatermarkMonitor(held_back_job[0], interval=-1)
    with pytest.raises(ValueError, match="last must be at least 1 record, got 0"):
        LateDataTable(held_back_job[0], last=0)


def test_monitor_tables_may_wrap_where_a_notebook_is_narrow(held_back_job: Any) -> None:
    # Where the shuffle queue table is wider than the notebook, its headers may break after "_" and its
    # names after "/", "_" and "."; numbers never (the browser test measures that it then fits).
    monitor = WatermarkMonitor(held_back_job[0])
    assert "rstream-view-watermarks" in monitor._dom_classes
    queues = monitor.queue_table.value
    assert ">held_<wbr>back_<wbr>watermark</th>" in queues and "clicks/<wbr>1/<wbr>SHUFFLE_<wbr>SINK" in queues
    assert "white-space:nowrap;text-align:right\">14000</td>" in queues
    # the other views' tables (wrap=False) are as they were: nothing breaks but prose
    assert "<wbr>" not in table("t", ["a_b", "c"], [["x/y_z.w", 1]])
