"""A query that died because Spark's Python process did not connect back in time (a busy machine)
is restarted from its checkpoint, and the job's results are the same; any other failure is raised."""

from __future__ import annotations

from typing import Any

import pytest

from rstream import EmbeddedBroker, JobError, StreamBuilder
from rstream.runtime.job_query import MAX_RESTARTS
from tests.support.jobs import job_id, sink_values


class DeadQuery:
    """What a Spark query that failed at start-up looks like to the job: inactive, with its exception."""

    isActive = False

    def __init__(self, message: str) -> None:
        self.message = message

    def exception(self) -> Exception:
        return RuntimeError(self.message)

    def stop(self) -> None:
        pass


WORKER_TIMEOUT = ("[PYTHON_DATA_SOURCE_ERROR] ... org.apache.spark.SparkException: "
                  "Python worker failed to connect back.")


def counting(broker: EmbeddedBroker) -> StreamBuilder:
    broker.create_topic("words", queues=2)
    broker.send_batch("words", ["a", "b", "a", "c", "a"])
    b = StreamBuilder(job_id("restart"), shuffle_queues=2)
    b.source("words").key_by(lambda w: w).count().to_rstream().sink("counts")
    return b


def test_a_worker_start_timeout_restarts_the_query_and_loses_nothing(
        broker: EmbeddedBroker, make_job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    job = make_job(counting(broker))
    job.run_until_idle()
    broker.send_batch("words", ["b", "a"])
    job._query, job._query_mode = DeadQuery(WORKER_TIMEOUT), (False, False)  # a started job whose query died
    job._check_failure()
    assert job.is_running and "restarting the query from its checkpoint (1 of" in capsys.readouterr().out
    job.run_until_idle()
    job.stop()
    assert {k: v[-1] for k, v in sink_values(broker, "counts").items()} == {"a": "4", "b": "2", "c": "1"}


def test_other_failures_and_too_many_restarts_are_raised(broker: EmbeddedBroker, make_job: Any) -> None:
    job = make_job(counting(broker))
    job._query_mode = (True, False)
    job._query = DeadQuery("ZeroDivisionError: division by zero")
    with pytest.raises(JobError, match="division by zero"):
        job._check_failure()
    job._restarts = MAX_RESTARTS
    job._query = DeadQuery(WORKER_TIMEOUT)
    with pytest.raises(JobError, match="failed to connect back"):
        job._check_failure()


def test_a_collect_that_cannot_open_its_socket_restarts_the_query_and_loses_nothing(
        broker: EmbeddedBroker, make_job: Any, capsys: pytest.CaptureFixture[str]) -> None:
    # CI saw a batch's df.collect() in foreachBatch fail once: the driver's Python could not connect to
    # the local socket its JVM opened for the rows. Here the first batch raises that very error.
    from pyspark.errors import PySparkRuntimeError

    job = make_job(counting(broker))
    driver = job._driver
    on_batch, calls = driver._on_batch, []

    def first_fails(df: Any, batch_id: int) -> None:
        calls.append(batch_id)
        if len(calls) == 1:
            raise PySparkRuntimeError(errorClass="CANNOT_OPEN_SOCKET", messageParameters={
                "errors": "tried to connect to ('127.0.0.1', 40000), but an error occurred: Connection refused"})
        on_batch(df, batch_id)

    driver._on_batch = first_fails
    job.run_until_idle()
    assert "restarting the query from its checkpoint (1 of" in capsys.readouterr().out
    assert calls[0] == calls[1]  # the failed batch ran again
    assert {k: v[-1] for k, v in sink_values(broker, "counts").items()} == {"a": "3", "b": "1", "c": "1"}
