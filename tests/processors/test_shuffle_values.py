"""A shuffle record holds its value as it was when the shuffle sink took it. Shuffle sinks that no
other branch feeds from keep values as they are until the batch is appended (``ItemRecords``), so
these check the two places where a value may change after that: a sibling branch of a fan-out, and
an accumulator that a user's ``add`` changes in place and a per-record aggregation hands on. Their
counts shuffle every record (``build(combine=False)``): combined, a count shuffles no values at all."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rstream import Accumulator, EmbeddedBroker, JsonDeserializer, StreamBuilder
from rstream.serde.codec import decode
from tests.support.inprocess import produce, run


def _shuffled(broker: EmbeddedBroker, topic: str) -> list[Any]:
    """Every data record's value in a shuffle topic, queue by queue, in order."""
    return [decode(m.body) for m in broker.read(topic) if not m.headers]


def test_a_branch_that_changes_a_value_after_the_shuffle_took_it_does_not_change_the_shuffle_record(
        tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    values = [{"k": i % 3, "n": i} for i in range(40)]
    produce(broker, "in", values)
    b = StreamBuilder("fanout", shuffle_queues=2)
    s = b.source("in", JsonDeserializer())
    s.key_by(lambda d: d["k"]).count().to_rstream().sink("counts")
    s.foreach(lambda d: d.update(changed=True))  # the second branch: after the shuffle sink took d
    job = run(b, broker, tmp_path, combine=False)
    (shuffle,) = job.topology.shuffle_topics
    got = _shuffled(broker, shuffle)
    assert sorted(got, key=lambda d: d["n"]) == values


class _Seen(Accumulator[int, list[int], list[int]]):
    """Keeps every value in one list that ``add`` changes in place (and hands out as the result)."""

    def initial(self) -> list[int]:
        return []

    def add(self, acc: list[int], value: int) -> list[int]:
        acc.append(value)
        return acc


def test_an_accumulator_changed_in_place_is_shuffled_as_it_was_at_each_record(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    produce(broker, "in", list(range(12)), queues=1)
    b = StreamBuilder("inplace", shuffle_queues=1)
    (b.source("in", JsonDeserializer()).key_by(lambda n: n % 2).aggregate(_Seen()).to_rstream()
     .key_by(lambda acc: len(acc)).count().to_rstream().sink("out"))
    job = run(b, broker, tmp_path, combine=False)
    assert len(job.topology.shuffle_topics) == 2
    # the second shuffle's values: each key's list as it was after each of its records
    snapshots = [tuple(v) for t in job.topology.shuffle_topics for v in _shuffled(broker, t) if isinstance(v, list)]
    assert sorted(snapshots) == sorted(tuple(range(parity, n + 1, 2)) for parity in (0, 1) for n in range(parity, 12, 2))


def test_a_shuffle_no_other_branch_feeds_from_is_stored_as_items(tmp_path: Path) -> None:
    from rstream.broker.base import read_blocks

    broker = EmbeddedBroker(tmp_path / "broker")
    produce(broker, "in", ["a b a", "c a"])
    b = StreamBuilder("items", shuffle_queues=2)
    b.source("in", JsonDeserializer()).flat_map(str.split).key_by(lambda w: w).count().to_rstream().sink("counts")
    job = run(b, broker, tmp_path, combine=False)
    (shuffle,) = job.topology.shuffle_topics
    words = []
    for q in range(2):
        for block in read_blocks(broker, shuffle, q, 0, broker.end_offsets(shuffle)[q]):
            assert block.items is not None and list(block.items) == [decode(body) for body in block.bodies]
            words += block.items
    assert sorted(words) == ["a", "a", "a", "b", "c"]
