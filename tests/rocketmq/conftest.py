"""Fixtures of the tests on a real RocketMQ (the session's ``local_rocketmq`` is in tests/support/rocketmq.py):
a ``RocketMQBroker`` per test whose topics are deleted after it, and a job maker on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstream import StreamBuilder
from rstream.rocketmq.broker import TXN_TOPIC


@pytest.fixture
def rocket_broker(local_rocketmq: Any) -> Any:
    """A client of the session's RocketMQ; every topic the test made is deleted after it."""
    broker = local_rocketmq.broker()
    before = {t.name for t in broker.topics()}
    yield broker
    for topic in broker.topics():
        if topic.name not in before and topic.name != TXN_TOPIC:
            broker.delete_topic(topic.name)
    broker.close()


@pytest.fixture
def make_rocket_job(spark: Any, rocket_broker: Any, tmp_path: Path) -> Any:
    """``make_rocket_job(builder_or_topology, **properties)`` -> a RocketMQStream on RocketMQ."""
    from rstream import RocketMQStream

    made: list[Any] = []

    def make(builder: Any, **props: Any) -> Any:
        topology = builder.build() if isinstance(builder, StreamBuilder) else builder
        props.setdefault("data_dir", str(tmp_path / "data"))
        job = RocketMQStream(topology, properties=props, broker=rocket_broker, spark=spark)
        made.append(job)
        return job

    yield make
    for job in made:
        job.stop()
