"""The same answer however the input is cut, on Spark: one job holding every generated job of
``tests.support.batch_cuts`` (windows of the three kinds with their late records, joins of every kind,
keyed process functions with both timer kinds, the stream–table join and a table's changelog, running
aggregations, stateless stages, and stages chained after a process function and a join) run as a Spark
streaming query at two batch caps gives, sink by sink and key by key, what the same job gives in this
process without Spark in one batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rstream import EmbeddedBroker, RocketMQStream
from tests.support.batch_cuts import EXACT, JOBS, build, differences, inputs, read_sinks, run_cut, write
from tests.support.jobs import job_id

#: Every generated job, the newcomer's operator too: its spec is declared in the tests, as a notebook
#: declares one, and Spark's workers learn it from the task (``OperatorSpec.__reduce__``).
NAMES = sorted(JOBS)


def test_a_job_on_spark_gives_the_same_records_at_every_batch_cap(spark: Any, tmp_path: Path) -> None:
    from pyspark import cloudpickle

    import tests.support.bucket_max

    # as a notebook's own code: sent to the workers by value (they cannot import the tests)
    cloudpickle.register_pickle_by_value(tests.support.bucket_max)
    data = inputs(seed=7, n=70)
    want = run_cut(NAMES, data, tmp_path / "in-process", 10**6)
    assert all(want[sink] for sink in want if not sink.endswith("-late")), "every job has results to compare"
    assert any(want[sink] for sink in want if sink.endswith("-late")), "and some late records"
    for cap in (10**6, 9):
        broker = EmbeddedBroker(tmp_path / f"broker-{cap}")
        write(broker, data)
        job = RocketMQStream(build(NAMES, job_id("cuts")).build(), spark=spark, broker=broker,
                             properties={**EXACT, "max_records_per_queue": cap, "data_dir": str(tmp_path / f"data-{cap}")})
        try:
            job.run_until_idle()
        finally:
            job.stop()
        got = read_sinks(broker, NAMES)
        assert not differences(want, got), f"cap {cap}:\n" + "\n".join(differences(want, got)[:8])
