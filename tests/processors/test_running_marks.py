"""A framed shuffle sink's per-record watermarks (``running_marks``) and a late record's row: the
fast paths (numpy, orjson) give exactly what the plain Python computation gives, and anything they
cannot take (floats, bools, ints beyond 64 bits) goes the plain way."""

from __future__ import annotations

import json
from itertools import accumulate

from hypothesis import given, settings
from hypothesis import strategies as st

from rstream.processors import base
from rstream.shuffle.sink import _NUMPY_MARKS, running_marks


def reference(times: list[int], lateness: int, watermark: int) -> list[int]:
    """Record i's watermark: the highest of ``watermark`` and every ``time - lateness`` up to it."""
    return list(accumulate((t - lateness for t in times), max, initial=watermark))[1:]


@settings(max_examples=80, deadline=None)
@given(times=st.lists(st.integers(-2**63, 2**63 - 1), min_size=1, max_size=3 * _NUMPY_MARKS),
       lateness=st.integers(0, 2**40), watermark=st.integers(-2**64, 2**64))
def test_marks_are_the_running_max_of_time_minus_lateness(times: list[int], lateness: int, watermark: int) -> None:
    marks = running_marks(times, lateness, watermark)
    assert marks == reference(times, lateness, watermark)
    assert {type(m) for m in marks} == {int}  # Python ints, whatever computed them


@settings(max_examples=30, deadline=None)
@given(n=st.integers(_NUMPY_MARKS, 2 * _NUMPY_MARKS), odd=st.sampled_from([1.5, True, 2**64, -2**63]),
       at=st.integers(0, _NUMPY_MARKS - 1))
def test_a_chunk_numpy_cannot_take_as_is_gets_the_plain_running_max(n: int, odd: object, at: int) -> None:
    """One float, bool, or int that leaves no room for the lateness in 64 bits, anywhere in a long
    chunk: the same marks as the plain computation (no rounding, no wrapping)."""
    times: list = [1_700_000_000_000 + 7 * i - (i % 5) * 1000 for i in range(n)]
    times[at] = odd
    assert running_marks(times, 2000, -(2**62)) == reference(times, 2000, -(2**62))


def test_a_late_row_is_json_with_what_orjson_cannot_write_written_by_the_standard_library() -> None:
    row = {"key": "'é'", "data_time": 5, "watermark": 2**70, "late_ms": 2**70 - 5, "value": "{'a': 1}"}
    assert json.loads(base._late_row(row)) == row
    row["watermark"], row["late_ms"], row["when"] = 9, 4, object()  # default=str for anything else
    assert json.loads(base._late_row(row)) == {**row, "when": str(row["when"])}
