"""Replay after local state loss, restart from the checkpoint, and a crash of the whole process."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, JobError
from tests.support.jobs import (
    WORDCOUNT_TO_KILL,
    assert_exact_counts,
    broker_arg,
    job_id,
    sink_values,
    wordcount,
)
from tests.support.processes import kill_when

BATCH_1 = ["a b c a", "b d", "e f a"]
BATCH_2 = ["a a z", "d e", "c c c"]


def test_replay_after_local_state_is_deleted(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", BATCH_1)
    name = job_id("replay")
    first = make_job(wordcount(name))
    first.run_until_idle()
    state_before = first.state().sort_values("key").reset_index(drop=True)
    first.delete_local_state()
    assert first.state().empty
    broker.send_batch("sentences", BATCH_2)
    second = make_job(wordcount(name))
    second.run_until_idle()
    assert sum(p.replayed_keys for p in second.progress) > 0
    # each shuffle queue that got data again replayed exactly the keys it held before
    keys_before = state_before.groupby("queue").size().to_dict()
    shuffle_runs = [q for p in second.progress for q in p.queues if q.topic != "sentences"]
    assert {q.queue: q.replayed_keys for q in shuffle_runs} == {q.queue: keys_before.get(q.queue, 0) for q in shuffle_runs}
    assert_exact_counts(broker, "counts", BATCH_1 + BATCH_2)
    state = second.state()
    assert dict(zip(state["key"], state["value"])) == dict(Counter(w for s in BATCH_1 + BATCH_2 for w in s.split()))


def test_stale_local_state_is_replayed_not_trusted(broker: EmbeddedBroker, make_job: Any, tmp_path: Path) -> None:
    """A task that died between the broker commit and the RocksDB write leaves a local copy one
    batch behind: the next batch must notice (applied offset != committed) and replay."""
    broker.create_topic("sentences", queues=1)
    name = job_id("stale")
    broker.send_batch("sentences", BATCH_1)
    job = make_job(wordcount(name))
    job.run_until_idle()
    snapshot = tmp_path / "snapshot"
    shutil.copytree(job.state_dir, snapshot)
    broker.send_batch("sentences", BATCH_2)
    job.run_until_idle()
    shutil.rmtree(job.state_dir)
    shutil.copytree(snapshot, job.state_dir)  # local state now lags the committed changelog
    broker.send_batch("sentences", ["a z"])
    again = make_job(wordcount(name))
    again.run_until_idle()
    assert sum(p.replayed_keys for p in again.progress) > 0
    assert_exact_counts(broker, "counts", BATCH_1 + BATCH_2 + ["a z"])


def test_stop_mid_stream_and_restart_from_checkpoint(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    sentences = [f"w{i % 7} w{i % 3} w{i % 11}" for i in range(300)]
    broker.send_batch("sentences", sentences)
    name = job_id("restart")
    job = make_job(wordcount(name), max_records_per_queue=20, trigger_interval_ms=50)
    job.start()
    deadline = time.monotonic() + 120
    while len(job.progress) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    job.stop()
    assert sum(p.records_in for p in job.progress) > 0
    assert broker.last_commit(name, "sentences", 0).end_offset < 150  # really stopped mid-stream
    resumed = make_job(wordcount(name), max_records_per_queue=1000)
    resumed.run_until_idle()
    assert_exact_counts(broker, "counts", sentences)


def test_a_batch_that_failed_between_its_two_stages_is_rerun_exactly(broker: EmbeddedBroker, make_job: Any) -> None:
    """The driver dies after the batch's source tasks committed and its second Spark job (the
    shuffle side) committed one shuffle queue: Spark reruns the batch from its offset log, the
    source ranges are no-ops, and the shuffle side goes on from the commits, counting nothing twice."""
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", BATCH_1 + BATCH_2)
    name = job_id("stages")
    first = make_job(wordcount(name), shuffle_in_source_job=False)  # the driver's second job
    real, calls = first._pending_shuffles, []

    def one_queue_then_die(batch_id: int = -1) -> list[list[Any]]:
        calls.append(batch_id)
        if len(calls) == 1:
            return real(batch_id)[:1]
        raise RuntimeError("the driver died between two Spark jobs of its batch")

    first._pending_shuffles = one_queue_then_die
    with pytest.raises(JobError, match="died between two Spark jobs"):
        first.run_until_idle(timeout=120)
    shuffle = next(iter(first.topology.shuffle_topics))
    done = {q: broker.last_commit(name, shuffle, q) for q in range(len(broker.end_offsets(shuffle)))}
    assert [tag.batch_id for tag in done.values() if tag is not None] == [0]  # one queue, in batch 0
    assert all(broker.last_commit(name, "sentences", q).end_offset == broker.end_offsets("sentences")[q]
               for q in range(2))
    first_counts = sink_values(broker, "counts")
    assert 0 < sum(map(len, first_counts.values())) < sum(len(s.split()) for s in BATCH_1 + BATCH_2)

    again = make_job(wordcount(name))  # the rerun's source tasks run the rest of the shuffle side
    again.run_until_idle(timeout=120)
    assert_exact_counts(broker, "counts", BATCH_1 + BATCH_2)
    assert [p.batch_id for p in again.progress] == [0]  # the rerun of batch 0, not a batch of its own
    rerun = again.progress[0]
    assert {q.topic for q in rerun.queues} == {"sentences", shuffle}
    assert sum(q.records_in for q in rerun.queues if q.topic == "sentences") == len(BATCH_1 + BATCH_2)




def test_kill_9_of_the_whole_process_then_restart(broker: EmbeddedBroker, make_job: Any, tmp_path: Path) -> None:
    broker.create_topic("sentences", queues=2)
    sentences = [f"k{i % 13} k{i % 5} k{i % 2} k{i % 17}" for i in range(400)]
    broker.send_batch("sentences", sentences)
    name = job_id("crash")
    data_dir = tmp_path / "data"
    def mid_run() -> bool:
        tag = broker.last_commit(name, "sentences", 0)
        return tag is not None and tag.end_offset >= 45

    # the driver, the JVM and the Python workers, mid-batch
    kill_when(["-c", WORDCOUNT_TO_KILL, broker_arg(broker), str(data_dir), str(tmp_path / "tmp"), name], mid_run)
    assert broker.last_commit(name, "sentences", 0).end_offset < 200
    resumed = make_job(wordcount(name), max_records_per_queue=1000)
    resumed.run_until_idle()
    assert_exact_counts(broker, "counts", sentences)


def test_replay_state_brings_every_queue_back_at_once(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", BATCH_1 + BATCH_2)
    job = make_job(wordcount(job_id("eager")))
    job.run_until_idle()
    before = job.state().sort_values(["queue", "key"]).reset_index(drop=True)
    job.delete_local_state()
    report = job.replay_state()
    assert report["replayed_keys"].sum() == len(before) and report["replayed"].any()
    assert job.state().sort_values(["queue", "key"]).reset_index(drop=True).equals(before)
    again = job.replay_state()
    assert not again["replayed"].any()  # up to date now: nothing to replay
    assert dict(zip(again["queue"], again["state_keys"])) == {q: int((before["queue"] == q).sum()) for q in again["queue"]}
