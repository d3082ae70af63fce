"""Stored batches as columns: reading them in blocks, as records or messages gives the same records,
also after compaction, and batches stored in the format before columns still read the same."""

from __future__ import annotations

import marshal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker, StateStore
from rstream.broker import RecordBlock
from rstream.broker.base import read_blocks
from rstream.broker.embedded import format as embedded
from rstream.state.store import DELETE_HEADER

_record = st.tuples(
    st.one_of(st.none(), st.sampled_from(["a", "b", "c"]), st.sampled_from([b"k1", b"k2"])),
    st.one_of(st.just(b""), st.binary(min_size=1, max_size=6)),
    st.integers(min_value=0, max_value=2**62),
    st.one_of(st.none(), st.just({"h": "1"})),
    st.one_of(st.none(), st.just("tag")),
)


def _rows_of_blocks(broker: Any, topic: str, queue: int, start: int, end: int) -> list[tuple[Any, ...]]:
    out = []
    for block in read_blocks(broker, topic, queue, start, end):
        assert isinstance(block, RecordBlock) and len(block) > 0
        out += list(block.rows())
    return out


@settings(max_examples=60, deadline=None)
@given(
    appends=st.lists(st.lists(_record, min_size=1, max_size=40), min_size=1, max_size=5),
    compact_below=st.one_of(st.none(), st.integers(min_value=0, max_value=200)),
    start=st.integers(min_value=0, max_value=200),
    length=st.integers(min_value=0, max_value=200),
)
def test_blocks_records_and_messages_agree(tmp_path_factory: pytest.TempPathFactory, appends: list[list[Any]],
                                           compact_below: int | None, start: int, length: int) -> None:
    broker = EmbeddedBroker(tmp_path_factory.mktemp("b"), compact_min_dirty=None)
    broker.create_topic("t", queues=1, compact=True)
    written = []
    for recs in appends:
        before = broker.end_offsets("t")[0]
        broker.append({("t", 0): recs})
        written += [(before + i, *r) for i, r in enumerate(recs)]
    if compact_below is not None:
        broker.compact("t", 0, below=compact_below)
    end = start + length
    records = list(broker.read_records("t", 0, start, end))
    # every record read is one that was written, at its offset, with its broker time
    by_offset = {w[0]: w for w in written}
    for off, key, body, born, store_ms, headers in records:
        assert (key, body, born, headers) == by_offset[off][1:5] and store_ms > 0
    if compact_below is None:
        assert [r[0] for r in records] == [w[0] for w in written if start <= w[0] < end]
    assert _rows_of_blocks(broker, "t", 0, start, end) == records
    messages = [m for m in broker.read("t", 0) if start <= m.offset < end]
    assert [(m.offset, m.key, m.body, m.born_timestamp, m.store_timestamp, m.headers or None, m.tags)
            for m in messages] == [(*r, by_offset[r[0]][5]) for r in records]


def test_a_compacted_batch_is_read_by_its_kept_offsets(broker: EmbeddedBroker) -> None:
    broker.create_topic("t", queues=1, compact=True)
    broker.append({("t", 0): [(k, b"v", 1, None, None) for k in ["a", "b", "a", None, "c", "b"]]})
    assert broker.compact("t", 0, below=6) == 3  # a@0, b@1 and the keyless record @3
    kept = [2, 4, 5]
    for start in range(7):
        for end in range(start, 8):
            want = [o for o in kept if start <= o < end]
            assert [r[0] for r in broker.read_records("t", 0, start, end)] == want, (start, end)
            assert [o for b in broker.read_blocks("t", 0, start, end) for o in b.offsets] == want


class _RecordsOnly:
    """A broker that can only read records one by one (as a plug-in broker might)."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.broker = broker

    def read_records(self, topic: str, queue: int, start: int, end: int) -> Any:
        return self.broker.read_records(topic, queue, start, end)


def test_a_broker_without_blocks_is_read_in_blocks_of_its_records(broker: EmbeddedBroker) -> None:
    broker.create_topic("t", queues=1)
    broker.send_batch("t", [f"m{i}" for i in range(10)], queue=0)
    blocks = list(read_blocks(_RecordsOnly(broker), "t", 0, 2, 9, size=3))  # type: ignore[arg-type]
    assert [len(b) for b in blocks] == [3, 3, 1]
    assert [r for b in blocks for r in b.rows()] == list(broker.read_records("t", 0, 2, 9))
    assert [b.decode() for b in blocks[1].bodies] == ["m5", "m6", "m7"]
    assert list(blocks[0][1:].offsets) == [3, 4]


def _encode_before_columns(records: Any, offsets: list[int] | None = None) -> bytes:
    """How rstream stored a batch before columns: one tuple per record."""
    return marshal.dumps((offsets, [tuple(r) for r in records]), 2)


def test_batches_stored_before_columns_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "broker"
    writes = [("a", b"\x00\x00\x00\x01a1"), ("b", b"\x00\x00\x00\x01b1"), ("a", b"\x00\x00\x00\x01a2"),
              ("b", b"")]
    with monkeypatch.context() as patch:
        patch.setattr(embedded, "_encode_payload", _encode_before_columns)
        old = EmbeddedBroker(path, compact_min_dirty=None)
        old.create_topic("plain", queues=1)
        old.send_batch("plain", ["x", "y", "z"], queue=0, headers={"h": "1"})
        old.create_topic("state", queues=1, compact=True)
        old.append({("state", 0): [(k, body, 5, {DELETE_HEADER: "1"} if not body else None, None)
                                   for k, body in writes]})
        stored = old._conn().execute("SELECT payload FROM batches").fetchall()
        assert all(len(marshal.loads(p)) == 2 for (p,) in stored)  # really the format before columns
        before = {t: list(old.read_records(t, 0, 0, 10)) for t in ("plain", "state")}
    broker = EmbeddedBroker(path, compact_min_dirty=None)  # this rstream, the same file
    assert [m.body for m in broker.read("plain")] == [b"x", b"y", b"z"]
    assert all(m.headers == {"h": "1"} for m in broker.read("plain"))
    for topic in ("plain", "state"):
        assert list(broker.read_records(topic, 0, 0, 10)) == before[topic]
        assert _rows_of_blocks(broker, topic, 0, 1, 10) == before[topic][1:]
    assert broker.search_offset("plain", 0, 0) == 0
    assert {k: rec[1] for k, rec in broker.read_latest("state", 0).items()} == {"a": b"\x00\x00\x00\x01a2", "b": b""}
    store = StateStore(tmp_path / "store", "state", 0).open()
    assert store.replay(broker, None) == 1  # a's latest value; b was deleted
    assert store.committed_raw(b"a") == b"2"
    store.close()
    # compaction rewrites an old batch in the columnar format, with its kept offsets
    assert broker.compact("state", 0) == 3
    assert [(r[0], r[1]) for r in broker.read_records("state", 0, 0, 10)] == [(2, "a")]
    broker.append({("state", 0): [("c", b"\x00\x00\x00\x01c1", 6, None, None)]})
    assert [r[0] for r in broker.read_records("state", 0, 0, 10)] == [2, 4]
