"""Progress is committed with each queue's writes: its batch ids are Spark's, it survives a new job
object, and it is never behind what a sink shows."""

from __future__ import annotations

import threading
import time
from typing import Any

from rstream import BatchProgress, EmbeddedBroker
from tests.support.jobs import assert_exact_counts, job_id, wordcount


def test_batch_ids_are_sparks_and_every_queue_knows_its_batch(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", [f"w{i % 5} w{i % 3}" for i in range(40)])
    job = make_job(wordcount(job_id("ids")), max_records_per_queue=7)
    seen: list[BatchProgress] = []
    job.on_progress(seen.append)  # called with Spark's batch id, after the batch's tasks committed
    job.run_until_idle()
    history = job.history()
    assert [p.batch_id for p in history] == [p.batch_id for p in seen] == list(range(len(history)))
    assert len(history) > 2  # several batches: 20 sentences per queue, 7 per batch
    assert all(p.queues and all(q.batch_id == p.batch_id for q in p.queues) for p in seen)
    assert [p.batch_id for p in job.progress] == [p.batch_id for p in history]
    # each range's progress came from its commit tag, committed with its outputs
    for p in history:
        for q in p.queues:
            tag = broker.find_commit(job.job_id, q.topic, q.queue, q.start)
            assert tag is not None and tag.batch_id == p.batch_id and tag.end_offset == q.end
            assert q.committed_ms == tag.committed_ms


def test_a_job_started_before_any_input_keeps_sparks_batch_ids(broker: EmbeddedBroker, make_job: Any) -> None:
    # Spark runs batch 0 at once, with no input; the job's own batch ids must not fall one behind
    # (a window job's idle ticker reads the open windows from the progress of Spark's batch id)
    broker.create_topic("sentences", queues=2)
    job = make_job(wordcount(job_id("empty-start")))
    seen: list[BatchProgress] = []
    job.on_progress(seen.append)
    job.start()
    try:
        job.wait_for(lambda j: j._query.lastProgress is not None, timeout=120, what="the first batch")
        for _ in range(2):
            broker.send_batch("sentences", ["a b", "b"])
            job.run_until_idle(timeout=120)
        job.wait_for(lambda j: _records_in(seen) == (4, 6), timeout=60, what="every batch's progress")
    finally:
        job.stop()
    assert_exact_counts(broker, "counts", ["a b", "b"] * 2)
    with_input = [p for p in seen if p.queues]
    # two rounds; a batch that read sentences also counted their words (its source tasks read the
    # shuffle queues they wrote, once all of them had committed), and no batch had shuffle records left
    # over to read
    assert len(with_input) >= 2
    assert all({q.topic == "sentences" for q in p.queues} == {True, False} for p in with_input)
    assert all(q.batch_id == p.batch_id for p in with_input for q in p.queues)
    assert [p.batch_id for p in job.progress] == sorted({p.batch_id for p in with_input})


def _records_in(seen: list[BatchProgress]) -> tuple[int, int]:
    """(sentences, words) the progress the listener got reports read: from the source, from the shuffle."""
    source = sum(q.records_in for p in seen for q in p.queues if q.topic == "sentences")
    return source, sum(q.records_in for p in seen for q in p.queues if q.topic != "sentences")


def test_history_survives_a_new_job_object_and_batch_ids_go_on(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", ["a b", "b c"])
    name = job_id("history")
    first = make_job(wordcount(name))
    first.run_until_idle()
    before = [p.batch_id for p in first.history()]
    assert before and first.progress[-1].records_in > 0

    broker.send_batch("sentences", ["c d"])
    second = make_job(wordcount(name))  # a restarted kernel: a new object on the same job folder
    assert [p.batch_id for p in second.history()] == before
    assert second.progress == []  # nothing ran through this object yet
    second.run_until_idle()
    after = [p.batch_id for p in second.progress]
    assert after and after[0] == before[-1] + 1  # Spark's batch ids go on from the checkpoint
    assert [p.batch_id for p in second.history()] == before + after
    assert sum(q.records_in for q in second.progress[0].queues if q.topic == "sentences") == 1  # only the new one


def test_progress_is_never_behind_the_sink(broker: EmbeddedBroker, make_job: Any) -> None:
    """Read the sink first, then the progress: a queue's progress commits with its outputs, so the
    progress always accounts for at least what the sink holds (it raced before: progress was
    recorded on the driver after the batch had written its outputs)."""
    broker.create_topic("sentences", queues=2)
    job = make_job(wordcount(job_id("race")), trigger_interval_ms=50)
    job.start()
    stop = threading.Event()

    def produce() -> None:
        for i in range(30):
            broker.send_batch("sentences", [f"x{i} y{i % 4} z"] * 3)
            time.sleep(0.02)
        stop.set()

    producer = threading.Thread(target=produce)
    producer.start()
    checks = 0
    try:
        while not stop.is_set() or checks < 5:
            in_sink = sum(broker.end_offsets("counts")) if broker.has_topic("counts") else 0
            reported = sum(q.records_out.get("counts", 0) for p in job.progress for q in p.queues)
            assert reported >= in_sink, f"progress reports {reported} sink records, the sink holds {in_sink}"
            checks += 1
            time.sleep(0.01)
        job.run_until_idle()
        reported = sum(q.records_out.get("counts", 0) for p in job.progress for q in p.queues)
        assert reported == sum(broker.end_offsets("counts")) == 30 * 9
    finally:
        producer.join()
        job.stop()
