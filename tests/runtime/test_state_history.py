"""State over time: ``job.state(batch=N)`` and ``job.state_diff(a, b)`` against a Python replay of
the records each batch processed, also from a new job object and after the local state is gone."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JobError,
    JsonDeserializer,
    RocketMQStream,
    StateError,
    StreamBuilder,
    Time,
    TumblingWindow,
)
from rstream.serde.codec import decode
from rstream.shuffle.wire import PARTIAL_HEADER, RECORDS, run_times
from tests.support.jobs import job_id, wordcount

WORDS = st.sampled_from(["a", "b", "c", "kiwi", "zebra"])
ROUNDS = st.lists(st.lists(st.lists(WORDS, min_size=1, max_size=5).map(" ".join), min_size=1, max_size=6),
                  min_size=1, max_size=4)


def python_state_after(job: RocketMQStream, broker: EmbeddedBroker) -> dict[int, dict[tuple[int, str], int]]:
    """Per committed batch: the counts per (shuffle queue, word) a plain Python replay of the shuffle
    records processed up to and including that batch gives (each range read back from the broker; a
    partial of records counts as the records it holds)."""
    shuffle = next(iter(job.topology.shuffle_topics))
    counts: Counter[tuple[int, str]] = Counter()
    out = {}
    for batch in job.history():
        for q in batch.queues:
            if q.topic == shuffle:
                for m in broker.read(shuffle, q.queue, q.start, q.end):  # a partial: the records it holds
                    held = len(run_times(decode(m.body))) if m.headers.get(PARTIAL_HEADER) == RECORDS else 1
                    counts[(q.queue, decode(m.key))] += held  # type: ignore[arg-type]
        out[batch.batch_id] = dict(counts)
    return out


def as_dict(frame: Any) -> dict[tuple[int, str], Any]:
    return {(int(q), k): v for q, k, v in zip(frame["queue"], frame["key"], frame["value"])}


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])  # each example runs Spark: no minutes-long shrinking
@given(rounds=ROUNDS)
def test_state_at_every_batch_and_its_diffs_equal_a_python_replay(spark: Any, tmp_path_factory: Any,
                                                                   rounds: list[list[str]]) -> None:
    root = tmp_path_factory.mktemp("history")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=2)
    name = job_id("history")
    job = RocketMQStream(wordcount(name).build(), {"data_dir": str(root), "max_records_per_queue": 3},
                         broker=broker, spark=spark)
    for sentences in rounds:
        broker.send_batch("sentences", sentences)
        job.run_until_idle()
    expected = python_state_after(job, broker)
    batches = sorted(expected)
    assert as_dict(job.state(batch=batches[-1])) == as_dict(job.state())  # the latest batch = local RocksDB
    assert sum(as_dict(job.state()).values()) == sum(len(s.split()) for r in rounds for s in r)

    job.delete_local_state()  # the state topic alone must answer, and a new job object too
    again = RocketMQStream(wordcount(name).build(), {"data_dir": str(root)}, broker=broker, spark=spark)
    for batch in batches:
        assert as_dict(again.state(batch=batch)) == expected[batch], f"state after batch {batch}"
    for a, b in zip(batches, batches[1:]):
        diff = again.state_diff(a, b)
        want = {k for k in expected[a].keys() | expected[b].keys() if expected[a].get(k) != expected[b].get(k)}
        assert {(int(q), k) for q, k in zip(diff["queue"], diff["key"])} == want
        for row in diff.itertuples():
            key = (int(row.queue), row.key)
            assert row.change == ("added" if key not in expected[a] else "changed")  # counts never go away
            assert (row.before, row.after) == (expected[a].get(key), expected[b][key])
            assert row.operator == "COUNT-4"
    assert again.state(batch=-1).empty  # before the first batch
    assert again.state_diff(batches[0], batches[-1]).shape[0] == len(
        {k for k in expected[batches[-1]] if expected[batches[0]].get(k) != expected[batches[-1]][k]})


def test_window_state_shows_open_windows_and_their_deletion_when_they_fire(broker: EmbeddedBroker,
                                                                           make_job: Any) -> None:
    broker.create_topic("clicks", queues=1)
    b = StreamBuilder(job_id("window-history"), shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])
     .window(TumblingWindow(Time.seconds(10))).count().to_rstream().sink("page-counts"))
    job = make_job(b, allowed_lateness_ms=0, idle_timeout_ms=600_000)
    broker.send_batch("clicks", [json.dumps({"page": p, "ts": t}) for p, t in [("a", 1000), ("b", 2000), ("a", 3000)]])
    job.run_until_idle(fire_idle=False)
    opened = job.history()[-1].batch_id
    assert sorted(zip(job.state(batch=opened)["key"], job.state(batch=opened)["value"])) == [
        (("a", 0, 10000), 2), (("b", 0, 10000), 1)]
    broker.send_batch("clicks", [json.dumps({"page": "a", "ts": 15000})])  # the watermark passes 10000
    job.run_until_idle(fire_idle=False)
    diff = job.state_diff(opened)
    assert sorted((k, c, bf, af) for k, c, bf, af in zip(diff["key"], diff["change"], diff["before"], diff["after"])) == [
        (("a", 0, 10000), "deleted", 2, None), (("a", 10000, 20000), "added", None, 1), (("b", 0, 10000), "deleted", 1, None)]


def test_unknown_batches_and_compacted_history_are_named(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=1)
    name = job_id("compacted")
    job = make_job(wordcount(name))
    for text in ["a b", "a c", "a d"]:
        broker.send_batch("sentences", [text])
        job.run_until_idle()
    batches = [p.batch_id for p in job.history()]
    with pytest.raises(JobError, match=rf"no committed batch {batches[-1] + 5}; it has batches 0..{batches[-1]}"):
        job.state(batch=batches[-1] + 5)
    assert len(batches) == 3  # one batch per run: it read the sentence and counted its words
    before = as_dict(job.state(batch=batches[0]))
    state_topic = next(iter(job.topology.state_topics.values()))
    assert broker.compact(state_topic) > 0  # 'a' was written three times: two are superseded
    with pytest.raises(StateError, match=rf"state after batch {batches[0]} is gone: {state_topic} queue 0 was compacted"):
        job.state(batch=batches[0])
    assert as_dict(job.state(batch=batches[-1])) == as_dict(job.state())  # the latest is still whole
    assert {word: n for (_q, word), n in before.items()} == {"a": 1, "b": 1}
