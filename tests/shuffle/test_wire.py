"""The shuffle's wire: each kind of shuffle record as the sink and the combiners write it, read back by
``wire.decode`` as a typed record that says how many input records it stands for; and no module
outside ``rstream/shuffle`` knows a header."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rstream.serde.codec import encode
from rstream.shuffle import wire
from tests.support.files import repository_files

ROOT = Path(__file__).resolve().parents[2]

times = st.lists(st.integers(-10**12, 10**12), min_size=1, max_size=30)
keys = st.one_of(st.text(max_size=8), st.integers(), st.tuples(st.text(max_size=3), st.integers()))


def _runs(ts: list[int]) -> list[int]:
    """Runs ``[time, n, ...]`` as a count combiner makes them (equal neighbours in one run)."""
    runs: list[int] = []
    for t in ts:
        if runs and runs[-2] == t:
            runs[-1] += 1
        else:
            runs += [t, 1]
    return runs


@given(key=keys, ts=times)
def test_a_records_partial_is_its_records_times_in_order(key: object, ts: list[int]) -> None:
    record = wire.decode(encode(key), encode(_runs(ts)), wire.RECORDS_HEADERS)
    assert isinstance(record, wire.RecordsPartial)
    assert (record.key, record.times, record.records) == (key, ts, len(ts))
    n = len(ts)
    assert record.describe() == f"{n} record{'' if n == 1 else 's'} of {key!r} combined into one"


@given(key=keys, ts=times, side=st.sampled_from([0, 1]))
def test_a_window_partial_keeps_where_its_records_came_from(key: object, ts: list[int], side: int) -> None:
    starts = sorted({t - t % 10 for t in ts})
    counts = [sum(1 for t in ts if t - t % 10 == s) for s in starts]
    body = encode(tuple(wire.WindowPartial(starts, counts, ts, "clicks/1/SHUFFLE_SINK-3", 40, 90, 7, side)))
    record = wire.decode(encode(key), body, wire.WINDOWS_HEADERS, framed=True)
    assert isinstance(record, wire.WindowCounts) and record.partial is not None
    assert record.records == len(ts) == sum(record.partial.counts)
    assert (record.partial.producer, record.partial.source_start, record.partial.source_end) == (
        "clicks/1/SHUFFLE_SINK-3", 40, 90)
    assert "offsets 40..90" in record.describe()


def test_a_fold_partial_says_how_many_records_it_folds() -> None:
    record = wire.decode(encode("a"), encode((42.5, 3)), wire.FOLD_HEADERS)
    assert isinstance(record, wire.FoldPartial)
    assert (record.accumulator, record.records) == (42.5, 3)


@given(key=keys, value=st.one_of(st.none(), st.integers(), st.text(), st.dictionaries(st.text(max_size=3), st.integers())))
def test_a_record_and_a_framed_record_stand_for_one(key: object, value: object) -> None:
    plain = wire.decode(encode(key), encode(value), None)
    assert isinstance(plain, wire.Record) and (plain.key, plain.value, plain.records) == (key, value, 1)
    framed = wire.decode(encode(key), encode((value, 5, "t/0/S-2", 9, 1)), None, framed=True)
    assert isinstance(framed, wire.FramedRecord)
    assert (framed.value, framed.watermark, framed.producer, framed.source_offset, framed.side) == (value, 5, "t/0/S-2", 9, 1)


def test_control_records_stand_for_none() -> None:
    _key, _body, born, headers, tag = wire.marker(1234, "t/0/SHUFFLE_SINK-2", 99, behind=True)
    marker = wire.decode(None, b"", headers)
    assert isinstance(marker, wire.Marker) and marker.records == 0 and marker.control
    assert (marker.watermark, marker.producer, marker.active_ms, marker.behind, born, tag) == (
        1234, "t/0/SHUFFLE_SINK-2", 99, True, 1234, wire.MARKER_TAG)
    [[tick]] = wire.tick_records({"w": 1}, 77, flush=True).values()
    decoded = wire.decode(None, b"", tick[3])
    assert isinstance(decoded, wire.Tick) and (decoded.tick_ms, decoded.flush, decoded.records) == (77, True, 0)


#: The wire's record kinds: no module outside the shuffle package names one (it asks the decoded record).
KINDS = {"WindowPartial", "FoldPartial", "RecordsPartial", "WindowCounts", "Marker", "Tick", "FramedRecord", "Record"}


def test_no_module_outside_the_shuffle_package_names_a_shuffle_header() -> None:
    """Headers, partial kinds and their values live in ``rstream/shuffle/wire.py``; everyone else asks it."""
    names = {n for n in dir(wire) if n.endswith(("_HEADER", "_HEADERS"))} | {"FOLD", "RECORDS", "WINDOWS"} | KINDS
    values = {getattr(wire, n) for n in dir(wire) if n.endswith("_HEADER")}
    offenders = []
    for path in [*repository_files(ROOT / "rstream", "*.py", recursive=True),
                 *repository_files(ROOT / "widgets", "*.py", recursive=True)]:
        if path.parent.name == "shuffle":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in values:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Attribute) and node.attr in KINDS and getattr(node.value, "id", "") == "wire":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} wire.{node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module == "rstream.shuffle.wire":
                offenders += [f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}" for a in node.names
                              if a.name in names]
    assert not offenders, offenders
