"""Word count on Spark against ``collections.Counter`` over the same text."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import EmbeddedBroker
from tests.support.jobs import assert_exact_counts, job_id, sink_values, wordcount

WORDS = st.sampled_from(["a", "b", "c", "apple", "kiwi", "zebra", "Ünïcode", "x_y", "42"])
SENTENCES = st.lists(st.lists(WORDS, min_size=0, max_size=8).map(" ".join), min_size=1, max_size=40)


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(sentences=SENTENCES, queues=st.integers(min_value=1, max_value=4))
def test_wordcount_equals_counter(spark: Any, tmp_path_factory: Any, sentences: list[str], queues: int) -> None:
    from rstream import RocketMQStream

    root = tmp_path_factory.mktemp("wc")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=queues)
    broker.send_batch("sentences", sentences)
    job = RocketMQStream(wordcount(job_id("wc")).build(), {"data_dir": str(root)}, broker=broker, spark=spark)
    job.run_until_idle()
    assert_exact_counts(broker, "counts", sentences)
    expected = Counter(w for s in sentences for w in s.split())
    state = job.state()
    assert dict(zip(state["key"], state["value"])) == dict(expected)
    assert sum(p.records_in for p in job.progress) == len(sentences) + sum(expected.values())


def test_second_run_continues_where_the_first_ended(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    first = ["to be or not to be", "that is the question"]
    broker.send_batch("sentences", first)
    name = job_id("wc")
    make_job(wordcount(name)).run_until_idle()
    second = ["to be is to do", "", "be"]
    broker.send_batch("sentences", second)
    job = make_job(wordcount(name))
    job.run_until_idle()
    assert_exact_counts(broker, "counts", first + second)
    # only the new sentences were read (the batch also counted their words, from the shuffle queues)
    assert sum(q.records_in for q in job.progress[0].queues if q.topic == "sentences") == len(second)


def test_continuous_mode_processes_new_records_while_running(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    job = make_job(wordcount(job_id("live")), trigger_interval_ms=100)
    job.start()
    try:
        sent: list[str] = []
        for batch in (["a b", "b c"], ["c c d"]):
            broker.send_batch("sentences", batch)
            sent += batch
            job.run_until_idle(timeout=120)
            assert job.is_running
            assert_exact_counts(broker, "counts", sent)
    finally:
        job.stop()
    assert not job.is_running


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(sentences=SENTENCES)
def test_wordcount_with_per_batch_emission(spark: Any, tmp_path_factory: Any, sentences: list[str]) -> None:
    """aggregate_emit="batch": counts combined before the shuffle, one update per key and batch."""
    from rstream import RocketMQStream

    root = tmp_path_factory.mktemp("wcb")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", sentences)
    job = RocketMQStream(wordcount(job_id("wcb")).build(), {"data_dir": str(root), "aggregate_emit": "batch",
                         "max_records_per_queue": 7}, broker=broker, spark=spark)
    job.run_until_idle()
    expected = Counter(w for s in sentences for w in s.split())
    got = {w: [int(v) for v in vs] for w, vs in sink_values(broker, "counts").items()}
    assert {w: vs[-1] for w, vs in got.items()} == dict(expected)
    for counts in got.values():
        assert counts == sorted(set(counts))  # each batch's update is higher than the last
    shuffled = sum(len(broker.read(t)) for t in job.topology.shuffle_topics)
    assert shuffled <= sum(expected.values())  # the combine never shuffles more than the words


def test_a_finished_job_and_its_broker_leave_no_file_open(spark: Any, tmp_path: Any) -> None:
    """py4j keeps what ``foreachBatch`` was handed for as long as the JVM keeps its proxy; a job must not
    be kept with it: once the user drops a job that ran (a continuous run and a run until idle) and its
    broker, nothing under their folders is open any more (a notebook runs hundreds of jobs in a kernel)."""
    import gc
    import os

    from rstream import RocketMQStream

    def open_under(folder: Any) -> list[str]:
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(folder)):
                out.append(target)
        return out

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", ["to be or not to be"])
    job = RocketMQStream(wordcount(job_id("ended")).build(), {"data_dir": str(tmp_path), "trigger_interval_ms": 100},
                         broker=broker, spark=spark)
    job.run_until_idle(progress=False)
    job.start()
    broker.send_batch("sentences", ["be quick"])
    job.run_until_idle(timeout=120, progress=False)
    job.stop()
    state = job.state()
    assert dict(zip(state["key"], state["value"]))["be"] == 3
    assert open_under(tmp_path), "the job and the broker should hold their files while in use"
    del job, broker
    gc.collect()
    assert open_under(tmp_path) == []
