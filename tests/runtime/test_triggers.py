"""How a started job triggers its batches: the next batch at once after one with input (the
shuffle's data is already there); while idle, the source waits up to ``trigger_interval_ms`` for
input and returns as soon as it comes; and the checkpoint logs of the session rstream makes."""

from __future__ import annotations

import threading
import time
from typing import Any

from rstream import EmbeddedBroker
from rstream.runtime.job_query import IDLE_PAUSE_MS, POLLING_DELAY, _session_conf
from rstream.runtime.session import FAST_LOCAL_FILES
from tests.support.jobs import assert_exact_counts, job_id, wordcount


class _Conf:
    def __init__(self, **values: str) -> None:
        self.values = dict(values)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Session:
    def __init__(self, **values: str) -> None:
        self.conf = _Conf(**values)


def test_session_conf_is_set_inside_the_block_and_restored_after() -> None:
    unset, earlier = _Session(), _Session(**{POLLING_DELAY: "10ms"})
    for session in (unset, earlier):
        before = dict(session.conf.values)
        try:
            with _session_conf(session, POLLING_DELAY, "250ms"):
                assert session.conf.get(POLLING_DELAY) == "250ms"
                raise RuntimeError("the query did not start")
        except RuntimeError:
            pass
        assert session.conf.values == before


def test_a_started_job_triggers_at_once_and_waits_for_input_in_its_source(spark: Any, broker: EmbeddedBroker,
                                                                         make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    before = spark.conf.get(POLLING_DELAY, None)
    job = make_job(wordcount(job_id("trigger")), trigger_interval_ms=150)
    job.start()
    try:
        streaming = job._query._jsq.streamingQuery()
        assert streaming.trigger().intervalMs() == 0  # no wait for an interval after a batch
        assert _private_long(streaming, "pollingDelayMs") == IDLE_PAUSE_MS  # the source waited already
        assert spark.conf.get(POLLING_DELAY, None) == before  # the session is left as it was
        broker.send_batch("sentences", ["a b", "b"])
        job.run_until_idle(timeout=120)
        assert_exact_counts(broker, "counts", ["a b", "b"])
        time.sleep(0.5)  # idle: Spark's thread is in the source's wait for input most of the time
    finally:
        job.stop()
    assert not job.is_running and job._query.exception() is None  # stopped in its wait: a clean stop


def _reader(broker: EmbeddedBroker, wait_ms: int) -> Any:
    from rstream.runtime.config import dump_blob
    from rstream.runtime.source import RStreamStreamReader

    return RStreamStreamReader({"configsecret": "", "brokersecret": dump_blob(broker), "sourcetopics": '["in"]',
                                "shuffletopics": "[]", "initialoffsets": '{"in/0": 0}', "waitms": str(wait_ms)})


def test_an_idle_sources_latest_offset_returns_when_input_comes(broker: EmbeddedBroker) -> None:
    broker.create_topic("in", queues=1)
    reader = _reader(broker, wait_ms=60_000)
    assert reader.latestOffset(reader.initialOffset()) == {"in/0": 0, "batch": 0}  # Spark's batch 0: no wait
    threading.Timer(0.3, lambda: broker.send_batch("in", ["x", "y"])).start()
    began = time.monotonic()
    latest = reader.latestOffset({"in/0": 0, "batch": 0})
    assert latest == {"in/0": 2, "batch": 1}  # the new records, as the next batch
    assert time.monotonic() - began < 30  # woken by the input, not by the end of its minute


def test_an_idle_sources_latest_offset_says_nothing_new_after_its_wait(broker: EmbeddedBroker) -> None:
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["x"])
    reader = _reader(broker, wait_ms=200)
    start = {"in/0": 1, "batch": 4}
    broker.create_topic("other", queues=1)
    # the broker changes while the source waits, its input does not
    threading.Timer(0.05, lambda: broker.send_batch("other", ["not this job's input"])).start()
    assert reader.latestOffset(start) == start  # no new batch
    assert _reader(broker, wait_ms=0).latestOffset({"in/0": 0, "batch": 3}) == {"in/0": 1, "batch": 4}


def test_the_session_rstream_makes_writes_checkpoints_without_checksum_files(spark: Any, broker: EmbeddedBroker,
                                                                             make_job: Any) -> None:
    for key, value in FAST_LOCAL_FILES.items():
        assert spark.sparkContext.getConf().get(key) == value
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", ["x y", "y"])
    job = make_job(wordcount(job_id("ckpt")))
    job.run_until_idle(timeout=120)
    assert_exact_counts(broker, "counts", ["x y", "y"])
    logs = {p.parent.name for p in job.checkpoint_dir.rglob("*") if p.is_file() and p.name.isdigit()}
    assert {"offsets", "commits"} <= logs
    assert not list(job.checkpoint_dir.rglob("*.crc"))


def _private_long(obj: Any, name: str) -> int:
    """A private field of a JVM object (Scala keeps a ``private val`` as a field of that name)."""
    cls = obj.getClass()
    while cls is not None:
        for field in cls.getDeclaredFields():
            if field.getName() == name or field.getName().endswith("$$" + name):
                field.setAccessible(True)
                return int(field.get(obj))
        cls = cls.getSuperclass()
    raise AssertionError(f"{obj.getClass().getName()} has no field {name}")
