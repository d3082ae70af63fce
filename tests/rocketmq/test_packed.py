"""Packed topics on a real RocketMQ (``create_topic(packed=True)``, a job's shuffle topics with
``pack_shuffle``): many records in one RocketMQ message, each record still addressed by an offset of
its own (message offset << 12 | index), read back whole and in ranges that cut a message, in tagged
appends that count once; a job's results equal with and without packing, its shuffle holding far
fewer messages."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstream import progressbar
from rstream.broker.base import BrokerError, CommitTag, range_end, records_between
from rstream.runtime.inprocess import InProcessJob
from tests.support.jobs import assert_exact_counts, job_id, sink_values, wordcount

pytestmark = pytest.mark.e2e


def _records(n: int, key: str = "k") -> list[tuple[Any, ...]]:
    return [(f"{key}{i % 7}".encode(), f"v{i}".encode(), 1_000 + i, {"h": str(i % 2)} if i % 3 else None,
             "T" if i % 5 == 0 else None) for i in range(n)]


def test_a_packed_queue_reads_back_every_record_with_an_offset_of_its_own(rocket_broker: Any) -> None:
    rocket_broker.create_topic("packed-a", queues=2, packed=True)
    first = _records(5000)  # more than one message holds (4096 records)
    assert rocket_broker.append({("packed-a", 0): first, ("packed-a", 1): _records(3, "x")},
                                CommitTag("pk", "src", 0, 0, 10))
    assert rocket_broker.append({("packed-a", 0): _records(2, "y")}, CommitTag("pk", "src", 0, 10, 20))
    ends = rocket_broker.end_offsets("packed-a")
    assert ends == [3 << 12, 1 << 12]  # three messages in queue 0, one in queue 1
    got = list(rocket_broker.read_records("packed-a", 0, 0, ends[0]))
    assert [r[0] for r in got] == [*range(4096), *range(4096, 4096 + 904), 2 << 12, (2 << 12) + 1]
    assert [(k, b, born, h) for _o, k, b, born, _s, h in got] == [
        (k, b, born, h) for k, b, born, h, _t in _records(5000) + _records(2, "y")]
    messages = rocket_broker.read("packed-a", 0)
    assert [m.tags for m in messages[:6]] == ["T", None, None, None, None, "T"]
    # a range that cuts a message reads the records of its offsets only
    assert [r[0] for r in rocket_broker.read_records("packed-a", 0, 4094, 4098)] == [4094, 4095, 4096, 4097]
    assert [r[2] for r in rocket_broker.read_records("packed-a", 1, 1, 3)] == [b"v1", b"v2"]
    # ranges end where a message does: never the offsets a message leaves unused
    assert range_end(rocket_broker, "packed-a", 0, 0, ends[0], 5) == 1 << 12
    assert range_end(rocket_broker, "packed-a", 0, 1 << 12, ends[0], 10_000) == 3 << 12
    assert range_end(rocket_broker, "packed-a", 0, 0, ends[0], 1_000_000) == ends[0]
    # the same tag again counts once
    assert not rocket_broker.append({("packed-a", 0): _records(9)}, CommitTag("pk", "src", 0, 0, 10))
    assert rocket_broker.end_offsets("packed-a")[0] == ends[0]
    # records are counted where offsets skip: by another client too, whose counts start empty
    other = type(rocket_broker)(rocket_broker.namesrv)
    for client in (rocket_broker, other):
        assert records_between(client, "packed-a", 0, 0, ends[0]) == 5002
        assert records_between(client, "packed-a", 0, 4094, 4098) == 4
        assert records_between(client, "packed-a", 0, 1 << 12, ends[0]) == 906
        assert records_between(client, "packed-a", 0, 4095, (2 << 12) + 1) == 1 + 904 + 1
        assert records_between(client, "packed-a", 1, 0, ends[1]) == 3
        assert records_between(client, "packed-a", 1, ends[1], ends[1]) == 0
    other.close()


def test_a_packed_topic_is_never_compact_and_keeps_how_it_was_made(rocket_broker: Any) -> None:
    with pytest.raises(BrokerError, match="cannot be packed"):
        rocket_broker.create_topic("packed-b", queues=1, compact=True, packed=True)
    rocket_broker.create_topic("packed-c", queues=1)
    rocket_broker.create_topic("packed-c", queues=1, packed=True)  # exists: stays unpacked
    rocket_broker.send_batch("packed-c", ["a", "b"], queue=0)
    assert rocket_broker.end_offsets("packed-c") == [2]


@pytest.mark.parametrize("emit", ["record", "batch"])
def test_a_word_count_is_the_same_with_and_without_packing(rocket_broker: Any, tmp_path: Path, emit: str) -> None:
    text = [f"w{(i * 7) % 11} w{i % 5} w{i % 3}" for i in range(400)]
    rocket_broker.create_topic("sentences", queues=3)
    rocket_broker.send_batch("sentences", text)
    shuffled = {}
    for pack in (False, True):
        name = job_id(f"pk{emit[0]}{int(pack)}")
        topo = wordcount(name, sink=f"{name}-counts").build()
        job = InProcessJob(topo, rocket_broker, tmp_path / name, {"pack_shuffle": pack, "aggregate_emit": emit,
                                                                    "max_records_per_queue": 50})
        job.run_until_idle()
        if emit == "record":
            assert_exact_counts(rocket_broker, f"{name}-counts", text)
        final = {w: int(vs[-1]) for w, vs in sink_values(rocket_broker, f"{name}-counts").items()}
        assert final == Counter(w for s in text for w in s.split())
        shuffle = next(iter(topo.shuffle_topics))
        records = sum(len(list(rocket_broker.read_records(shuffle, q, 0, end)))
                      for q, end in enumerate(rocket_broker.end_offsets(shuffle)))
        messages = sum(len(rocket_broker._client.pull_log(  # RocketMQ's own messages of the shuffle topic
            rocket_broker.masters()[b], shuffle, i, 0, 1000, "rstream-reader")[0])
            for b, i in rocket_broker._get(shuffle).queue_ids)
        shuffled[pack] = (records, messages, sink_values(rocket_broker, f"{name}-counts"))
    assert shuffled[True][0] == shuffled[False][0]  # as many shuffle records
    assert shuffled[True][1] < shuffled[False][1] / 3  # in far fewer messages (one per range and queue)
    if emit == "record":  # every update, in the same order per key (once per batch: as the batches fell)
        assert shuffled[True][2] == shuffled[False][2]


def test_a_run_on_a_packed_shuffle_counts_records_in_its_bar_and_its_lag(make_rocket_job: Any, rocket_broker: Any,
                                                                         monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: Any) -> None:
    """A packed shuffle topic's offsets skip 4096 a message: the bar and ``job.lag()`` still count records."""
    monkeypatch.setattr(progressbar, "DELAY_S", 0)
    text = [f"w{i % 11} w{i % 5} w{i % 3}" for i in range(300)]
    rocket_broker.create_topic("sentences", queues=2)
    rocket_broker.send_batch("sentences", text, progress=False)
    name = job_id("pkbar")
    job = make_rocket_job(wordcount(name, sink=f"{name}-counts"), pack_shuffle=True, max_records_per_queue=100)
    assert job.lag()["lag"].sum() == 300  # before its first batch: every sentence, and no shuffle record yet
    capsys.readouterr()
    job.run_until_idle()
    shuffle = next(iter(job.topology.shuffle_topics))
    ends = rocket_broker.end_offsets(shuffle)
    shuffled = sum(len(list(rocket_broker.read_records(shuffle, q, 0, end))) for q, end in enumerate(ends))
    assert shuffled and max(ends) >= 1 << 12  # packed: its offsets are messages' offsets << 12
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert f"{300 + shuffled}/{300 + shuffled}" in last and "left: none" in last, last
    lag = job.lag()
    assert lag["lag"].sum() == 0 and (lag["committed_offset"] == lag["end_offset"]).all()
    assert list(lag["broker_queue"]) == [rocket_broker.queue_label(t, q) for t, q in zip(lag["topic"], lag["queue"])]
    assert lag["broker_queue"].str.fullmatch(r"[\w-]+:\d+").all()  # RocketMQ's own name: broker, queue id
    assert {w: int(vs[-1]) for w, vs in sink_values(rocket_broker, f"{name}-counts").items()} == Counter(
        w for s in text for w in s.split())
