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


def test_generic_types_flow_through_mypy() -> None:
    example = Path(__file__).with_name("typed_example.py")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental", str(example)],
        capture_output=True, text=True, cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stdout + result.stderr
