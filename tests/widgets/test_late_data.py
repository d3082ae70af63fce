"""``LateDataSnapshot``: the late-data table, checked against ``job.late_records()`` of jobs that ran."""

from __future__ import annotations

import json
from html import unescape
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.widgets import LateDataSnapshot
from rstream.widgets.late import BEHIND, FIRED, cause
from tests.support.jobs import job_id
from tests.support.widgets import FAST, SLOW, WINDOW_PROPS, send_clicks


def test_late_record_behind_its_source_queues_watermark(held_back_job: Any) -> None:
    job, _ = held_back_job
    snap = LateDataSnapshot.of(job)
    late = snap.to_pandas()
    assert late.equals(job.late_records())
    [count] = [n.name for n in job.topology.nodes if n.kind == "count"]
    # FAST's last click, t=4000, came after queue 0's watermark reached 21000 - 2000
    assert late[["operator", "key", "data_time", "watermark", "late_ms", "topic", "queue", "offset"]].values.tolist() \
        == [[count, "'b'", 4000, 19000, 15000, "clicks", 0, len(FAST) - 1]]
    assert late["reason"].tolist() == ["data time 4000 is behind its source queue's watermark 19000"]
    summary = snap.summary_to_pandas()
    assert summary.values.tolist() == [[count, BEHIND, 1, 15000]]
    assert snap.status == (f"job 'widgets-held-back': stopped, 1 late records ({BEHIND}: 1); latest: {count} key 'b' "
                           "at data time 4000, 15000 ms behind watermark 19000")
    html = unescape(snap._repr_html_())
    assert "latest late records (1 of 1, newest first)" in html
    assert "data time 4000 is behind its source queue's watermark 19000" in html
    assert ">15000</td>" in html


def test_both_causes_after_an_idle_flush(broker: EmbeddedBroker, make_job: Any, page_clicks_builder: Any) -> None:
    broker.create_topic("clicks", queues=2)
    send_clicks(broker, 0, FAST)
    send_clicks(broker, 1, SLOW)
    name = job_id("late-idle")
    make_job(page_clicks_builder(name), **WINDOW_PROPS).run_until_idle(timeout=120)  # every window fires
    # queue 1's watermark is 7000, so t=9500 is on time there, but its window [0, 10000) has fired
    send_clicks(broker, 1, [("a", 9500)])
    job = make_job(page_clicks_builder(name), **WINDOW_PROPS)
    job.run_until_idle(timeout=120, fire_idle=False)
    snap = LateDataSnapshot.of(job, last=1)
    assert snap.to_pandas().equals(job.late_records())
    assert snap.total == 2
    newest = snap.to_pandas().iloc[-1]
    assert (newest["data_time"], newest["topic"], newest["queue"]) == (9500, "clicks", 1)
    assert newest["reason"] == "its window [0,10000) already fired: its source queue was idle"
    assert sorted(snap.summary_to_pandas()["cause"]) == sorted([BEHIND, FIRED])
    assert f"2 late records ({BEHIND}: 1, {FIRED}: 1); latest: " in snap.status
    html = unescape(snap._repr_html_())
    assert "latest late records (1 of 2, newest first)" in html
    assert "[0,10000) already fired" in html and "data time 4000 is behind" not in html  # only the newest shown
    assert json.loads(next(iter(broker.read(job.late_topic))).body)["job"] == name


def test_no_late_records(finished_job: Any) -> None:
    snap = LateDataSnapshot.of(finished_job)
    assert snap.total == 0 and snap.to_pandas().empty and snap.summary_to_pandas().empty
    assert snap.status == "job 'widgets-finished': stopped, no late records"
    assert "no late records yet" in snap._repr_html_()
    with pytest.raises(ValueError, match="last must be at least 1 record, got 0"):
        LateDataSnapshot.of(finished_job, last=0)


def test_causes() -> None:
    assert cause("data time 3 is behind its source queue's watermark 5") == BEHIND
    assert cause("its session already fired: its source queue was idle") == FIRED
    assert cause("its window [0,10) already closed: its source queue was idle") == FIRED
    assert cause("something new") == "other"
