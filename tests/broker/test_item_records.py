"""Records appended as items (``ItemRecords``, what shuffle sinks write) or frames (``FrameRecords``,
what framed shuffle sinks write): the embedded broker stores the items or the frames' parts and
encodes each body only when it is read, so every reader sees the bodies a list of ``(key,
encode(item), born, None, None)`` tuples would have given, and a task's blocks carry the items
themselves (the frames as ``Fields``: a column per field)."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker
from rstream.broker.base import read_blocks
from rstream.broker.batch import BodyRecords
from rstream.broker.embedded import format as embedded
from rstream.serde.codec import MARSHAL_VERSION, decode, encode
from rstream.shuffle.batches import Fields, FrameRecords, ItemRecords

_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                  st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=6))
_item = st.recursive(_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                                                     st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                     max_leaves=8)
#: ("item", key, item, born) or ("whole", key, body, born, headers, tags): a control record in between
_whole = st.tuples(st.just("whole"), st.sampled_from([None, b"k1"]), st.binary(max_size=4), st.integers(0, 2**50),
                   st.one_of(st.none(), st.just({"rstream-wm": "5"})), st.one_of(st.none(), st.just("WATERMARK")))
_entry = st.one_of(st.tuples(st.just("item"), st.sampled_from([b"k1", b"k2", None]), _item, st.integers(0, 2**50)),
                   _whole)


def _both(entries: list[tuple[Any, ...]]) -> tuple[ItemRecords, list[tuple[Any, ...]]]:
    """The entries as ``ItemRecords`` and as the plain record tuples they stand for."""
    records, plain = ItemRecords(encode, MARSHAL_VERSION), []
    for e in entries:
        if e[0] == "item":
            records.add(e[1], e[2], e[3])
            plain.append((e[1], encode(e[2]), e[3], None, None))
        else:
            records.append(e[1:])
            plain.append(e[1:])
    return records, plain


def _stored_both(root: Path, pairs: list[tuple[Sequence[Any], list[tuple[Any, ...]]]]) -> tuple[EmbeddedBroker, list[Any]]:
    """Each ``(records, plain tuples)`` pair appended, the records to one broker and the tuples to
    another: asserts that both read back the same messages, and returns the first broker and those
    messages as ``(offset, key, body, born, headers, tags)``."""
    given_broker, plain_broker = EmbeddedBroker(root / "given"), EmbeddedBroker(root / "plain")
    for b in (given_broker, plain_broker):
        b.create_topic("t", queues=1)
    for records, plain in pairs:
        assert list(records) == plain and records[1:3] == plain[1:3] and records[-1] == plain[-1]  # as a sequence
        given_broker.append({("t", 0): records})
        plain_broker.append({("t", 0): plain})
    want = [(m.offset, m.key, m.body, m.born_timestamp, m.headers, m.tags) for m in plain_broker.read("t", 0)]
    assert [(m.offset, m.key, m.body, m.born_timestamp, m.headers, m.tags) for m in given_broker.read("t", 0)] == want
    return given_broker, want


def _rows_of(messages: list[Any]) -> list[Any]:
    """What a task's blocks give as rows (offset, key, body, born, headers) for those messages."""
    return [(o, k, b, born, h or None) for o, k, b, born, h, _t in messages]


@settings(max_examples=60, deadline=None)
@given(appends=st.lists(st.lists(_entry, min_size=1, max_size=30), min_size=1, max_size=4),
       start=st.integers(0, 60))
def test_items_read_back_as_the_bodies_a_list_of_tuples_gives(tmp_path_factory: Any, appends: list[Any],
                                                              start: int) -> None:
    items_broker, want = _stored_both(tmp_path_factory.mktemp("items"), [_both(entries) for entries in appends])
    # a task's blocks: the same rows, and each data record's item is what its body decodes to
    rows, blocks = [], list(read_blocks(items_broker, "t", 0, start, len(want)))
    for block in blocks:
        assert block.items is not None
        rows += [(o, k, b, born, h) for o, k, b, born, _store, h in block.rows()]
        for body, headers, item in zip(block.bodies, block.headers, block.items):
            if item is not None:
                assert headers is None and item == decode(body) and encode(item) == body
    assert rows == _rows_of(want[start:])


def test_an_item_marshal_cannot_write_is_stored_as_its_encoded_body(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("t", queues=1)
    records = ItemRecords(encode, MARSHAL_VERSION)
    when = datetime.date(2026, 11, 24)  # marshal cannot write it: encode pickles it
    records.add(b"k", {"day": when}, 7)
    records.add(b"k", "plain", 8)
    broker.append({("t", 0): records})
    assert [decode(m.body) for m in broker.read("t", 0)] == [{"day": when}, "plain"]
    (block,) = read_blocks(broker, "t", 0, 0, 2)
    assert block.items is None  # stored as bodies: readers decode them as before


#: ("body", key, body, born) or ("whole", key, body, born, headers, tags), as a sink and a marker write
_body_entry = st.one_of(
    st.tuples(st.just("body"), st.sampled_from(["k1", "k2", b"k3", None]), st.binary(max_size=6), st.integers(0, 2**50)),
    _whole,
)


@settings(max_examples=60, deadline=None)
@given(appends=st.lists(st.lists(_body_entry, min_size=1, max_size=30), min_size=1, max_size=4),
       start=st.integers(0, 60))
def test_records_kept_as_columns_read_back_as_the_tuples_they_stand_for(tmp_path_factory: Any, appends: list[Any],
                                                                         start: int) -> None:
    """What a sink writes (``BodyRecords``): stored from its columns, read back as a list of tuples is."""
    pairs = []
    for entries in appends:
        records, plain = BodyRecords(), []
        for e in entries:
            record = (e[1], e[2], e[3], None, None) if e[0] == "body" else e[1:]
            records.append(record)
            plain.append(record)
        pairs.append((records, plain))
    columns_broker, want = _stored_both(tmp_path_factory.mktemp("bodies"), pairs)
    rows = [(o, k, b, born, h) for block in read_blocks(columns_broker, "t", 0, start, len(want))
            for o, k, b, born, _store, h in block.rows()]
    assert rows == _rows_of(want[start:])


#: ("part", producer, side, [(key, value, watermark, source offset, born), ...]), ("one", the same for
#: one record, through ``add``) or a marker appended whole: what a framed shuffle sink writes
_frame = st.tuples(st.sampled_from([b"k1", b"k2", None]), _item, st.integers(-2**62, 2**50), st.integers(0, 2**40),
                   st.integers(0, 2**50))
_frame_entry = st.one_of(
    st.tuples(st.just("part"), st.sampled_from(["src/0/shuffle", "src/1/shuffle"]), st.integers(0, 1),
              st.lists(_frame, min_size=1, max_size=12)),
    st.tuples(st.just("one"), st.just("src/0/shuffle"), st.just(1), st.lists(_frame, min_size=1, max_size=1)),
    st.tuples(st.just("whole"), st.just(None), st.just(b""), st.integers(0, 2**50), st.just({"rstream-wm": "5"}),
              st.one_of(st.none(), st.just("WATERMARK"))),
)


def _frames_both(entries: list[tuple[Any, ...]]) -> tuple[FrameRecords, list[tuple[Any, ...]], list[Any]]:
    """The entries as ``FrameRecords``, as the plain record tuples they stand for, and each record's
    frame (None for one appended whole)."""
    records, plain, frames = FrameRecords(encode, MARSHAL_VERSION), [], []
    for e in entries:
        if e[0] == "whole":
            records.append(e[1:])
            plain.append(e[1:])
            frames.append(None)
            continue
        _kind, producer, side, rows = e
        if e[0] == "one":
            key, value, mark, offset, born = rows[0]
            records.add(key, (value, mark, producer, offset, side), born)
        else:
            keys, values, marks, offsets, borns = (list(c) for c in zip(*rows))
            records.extend(keys, borns, values, marks, offsets, producer, side)
        for key, value, mark, offset, born in rows:
            frame = (value, mark, producer, offset, side)
            plain.append((key, encode(frame), born, None, None))
            frames.append(frame)
    return records, plain, frames


@settings(max_examples=60, deadline=None)
@given(appends=st.lists(st.lists(_frame_entry, min_size=1, max_size=10), min_size=1, max_size=3),
       start=st.integers(0, 60), batch=st.sampled_from([3, 7, 4096]))
def test_frames_read_back_as_the_bodies_a_list_of_tuples_gives_and_as_fields(
        tmp_path_factory: Any, appends: list[Any], start: int, batch: int) -> None:
    """What a framed shuffle sink writes (``FrameRecords``): stored in parts (cut where a stored
    batch ends: ``batch``), read back as a list of tuples is, and by a task as ``Fields``: one
    column per field of the frame, each value what its body decodes to."""
    triples = [_frames_both(entries) for entries in appends]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(embedded, "BATCH_RECORDS", batch)
        frames_broker, want = _stored_both(tmp_path_factory.mktemp("frames"), [(r, p) for r, p, _f in triples])
    frames = [f for _r, _p, fs in triples for f in fs]
    rows, got = [], []
    for block in read_blocks(frames_broker, "t", 0, start, len(want)):
        rows += [(o, k, b, born, h) for o, k, b, born, _store, h in block.rows()]
        assert isinstance(block.items, Fields)
        whole = [frame or (None,) * 5 for frame in frames[block.offsets[0]:block.offsets[-1] + 1]]
        assert list(block.items) == whole and block.items[-1] == whole[-1]  # every frame, at once
        for i in range(len(block)):  # as sliced at each control record, as a task splits them out
            part = block[i:i + 1].items
            assert isinstance(part, Fields) and len(part) == 1
            got.append(tuple(column[0] for column in part.fields) if block.headers[i] is None else None)
    assert rows == _rows_of(want[start:])
    assert got == frames[start:]


def test_frames_share_no_value_between_records_when_read_back(tmp_path: Path) -> None:
    """A value that two records of a part held (one dict) reads back as two dicts: changing one
    record's value downstream cannot change the other's."""
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("t", queues=1)
    shared = {"page": ["a"]}
    records = FrameRecords(encode, MARSHAL_VERSION)
    records.extend([b"k", b"k"], [1, 2], [shared, shared], [0, 0], [5, 6], "src/0/s", 0)
    broker.append({("t", 0): records})
    (block,) = read_blocks(broker, "t", 0, 0, 2)
    assert isinstance(block.items, Fields)
    first, second = block.items.fields[0]
    assert first == second == shared and first is not second and first["page"] is not second["page"]


def test_a_frame_marshal_cannot_write_is_stored_as_its_encoded_body(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("t", queues=1)
    records = FrameRecords(encode, MARSHAL_VERSION)
    when = datetime.date(2026, 11, 24)  # marshal cannot write it: encode pickles the frame
    records.extend([b"k", b"k"], [7, 8], [{"day": when}, "plain"], [1, 2], [10, 11], "src/0/s", 0)
    broker.append({("t", 0): records})
    assert [decode(m.body) for m in broker.read("t", 0)] == [({"day": when}, 1, "src/0/s", 10, 0),
                                                             ("plain", 2, "src/0/s", 11, 0)]
    (block,) = read_blocks(broker, "t", 0, 0, 2)
    assert block.items is None  # stored as bodies: readers decode them as before


def test_a_data_record_appended_whole_among_frames_has_the_batch_read_as_bodies(tmp_path: Path) -> None:
    """A frame some writer appended as a plain tuple (no headers) has no fields: the stored batch
    is then read as bodies, each what was appended."""
    broker = EmbeddedBroker(tmp_path / "b")
    broker.create_topic("t", queues=1)
    records = FrameRecords(encode, MARSHAL_VERSION)
    records.extend([b"k"], [7], ["a"], [1], [10], "src/0/s", 0)
    records.append((b"k", encode(("b", 2, "src/1/s", 11, 1)), 8, None, None))
    broker.append({("t", 0): records})
    (block,) = read_blocks(broker, "t", 0, 0, 2)
    assert block.items is None
    assert list(map(decode, block.bodies)) == [("a", 1, "src/0/s", 10, 0), ("b", 2, "src/1/s", 11, 1)]
