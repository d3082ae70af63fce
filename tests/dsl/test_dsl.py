from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rstream import DslError, InvalidTopicNameError, StreamBuilder
from rstream.serde import SerdeError


def test_bad_topic_names_fail_at_the_call() -> None:
    b = StreamBuilder("j")
    with pytest.raises(InvalidTopicNameError, match="'my topic'"):
        b.source("my topic")
    with pytest.raises(InvalidTopicNameError, match="'out/put'"):
        b.source("ok").sink("out/put")


def test_bad_job_id_and_arguments() -> None:
    with pytest.raises(DslError, match="invalid job id"):
        StreamBuilder("has space")
    b = StreamBuilder("j")
    s = b.source("t")
    with pytest.raises(DslError, match="map needs a function"):
        s.map(42)  # type: ignore[arg-type]
    with pytest.raises(DslError, match=r"has no initial\(\)"):
        s.key_by(len).aggregate(object())  # type: ignore[arg-type]
    with pytest.raises(SerdeError, match="not a deserializer"):
        b.source("t", deserializer=42)
    with pytest.raises(DslError, match="no source"):
        StreamBuilder("empty").build()
    with pytest.raises(DslError, match=r"sum\(order=\.\.\.\) is \"arrival\" .* or \"data_time\" .*; got 'time'"):
        s.key_by(len).sum(len, order="time")


def test_a_running_aggregation_in_data_time_order_is_drawn_so_and_has_a_framed_shuffle() -> None:
    b = StreamBuilder("j")
    b.source("t").key_by(len).max(len, order="data_time").to_rstream().sink("out")
    topology = b.build()
    assert list(topology.framed_topics) == list(topology.shuffle_topics)  # the watermark travels with the records
    assert "in data-time order" in topology.real_dot()
    arrival = StreamBuilder("k")
    arrival.source("t").key_by(len).max(len).to_rstream().sink("out")
    assert not arrival.build().framed_topics


def test_generic_types_flow_through_mypy() -> None:
    example = Path(__file__).with_name("typed_example.py")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(example)],
        capture_output=True, text=True, cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stdout + result.stderr
