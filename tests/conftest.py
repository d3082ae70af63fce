"""Shared fixtures: one local[2] SparkSession for the whole test session, a fresh broker per test,
and helpers to run a job and read its sink back."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from rstream import EmbeddedBroker, StreamBuilder

if TYPE_CHECKING:  # loaded by the fixtures that need Spark: the pure-Python tests never load pyspark
    from rstream import RocketMQStream

_JOBS = itertools.count()

#: Folders of tests that run jobs on Spark, here or in a process they start (kernel, browser, cluster).
_SPARK_FOLDERS = ("notebooks", "browser", "cluster", "binder", "runtime", "widgets")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs Spark (a SparkSession here, or one it starts); "
                                       "pytest -m 'not spark' runs the pure-Python part")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test that needs Spark: it uses the ``spark`` fixture (``make_job`` does), or lives
    in a folder whose tests start Spark themselves."""
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if "spark" in getattr(item, "fixturenames", ()) or folder in _SPARK_FOLDERS:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from rstream import get_spark

    session = get_spark("local[2]", tmp_dir=tmp_path_factory.mktemp("spark-tmp"))
    yield session
    for query in session.streams.active:
        query.stop()


@pytest.fixture
def broker(tmp_path: Path) -> EmbeddedBroker:
    return EmbeddedBroker(tmp_path / "broker")


@pytest.fixture
def make_job(spark: Any, broker: EmbeddedBroker, tmp_path: Path) -> Any:
    """``make_job(builder_or_topology, **properties)`` -> a RocketMQStream on the test's broker."""
    from rstream import RocketMQStream

    made: list[RocketMQStream] = []

    def make(builder: Any, **props: Any) -> RocketMQStream:
        topology = builder.build() if isinstance(builder, StreamBuilder) else builder
        props.setdefault("data_dir", str(tmp_path / "data"))
        job = RocketMQStream(topology, properties=props, broker=broker, spark=spark)
        made.append(job)
        return job

    yield make
    for job in made:
        job.stop()


def job_id(prefix: str = "job") -> str:
    """A job id unique in this test session."""
    return f"{prefix}-{next(_JOBS)}"


def sink_values(broker: EmbeddedBroker, topic: str, parse: Any = None) -> dict[Any, list[Any]]:
    """Per key, the values a sink wrote, in offset order (a key always lands in one queue).
    Bodies are ``key:value`` text unless ``parse(body) -> (key, value)`` says otherwise."""
    out: dict[Any, list[Any]] = defaultdict(list)
    for m in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        if parse is None:
            key, _, value = m.body.decode().rpartition(":")
        else:
            key, value = parse(m.body)
        out[key].append(value)
    return dict(out)
