"""The brokers the conformance suite (``test_conformance.py``) runs against: one entry per broker."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.broker.base import Broker

#: How each broker under test is made, given a folder of its own and ``compacting``: whether it
#: should compact its compact topics as eagerly as it can (a broker that cannot be told ignores
#: it). A broker that is a client of a running server (RocketMQ) ignores the folder and returns a
#: client of the same server every time: the suite names every topic and job afresh.
BROKERS: dict[str, Callable[[Path, bool], Broker]] = {
    "embedded": lambda folder, compacting: EmbeddedBroker(
        folder, **({"compact_min_dirty": 1, "compact_min_lag": 0, "compact_dirty_ratio": 0.0,
                    "compact_delete_retention_ms": 0} if compacting else {})),
}
#: RocketMQ "compacts" a compact queue by writing a snapshot of it (``RocketMQBroker.snapshot``): eagerly,
#: a snapshot after every append of a compact queue.
BROKERS["rocketmq"] = lambda folder, compacting: _rocketmq_broker(_session_rocketmq(), compacting)
#: A RocketMQ cluster of two brokers: every topic the suite makes has queues on both (the decision log
#: on broker-a), so every append of several queues writes across brokers.
BROKERS["rocketmq-2"] = lambda folder, compacting: _rocketmq_broker(_session_rocketmq("rocketmq-2"), compacting)

#: The session fixture (tests/support/rocketmq.py) that starts each server kind on first use.
_FIXTURES = {"rocketmq": "local_rocketmq", "rocketmq-2": "rocketmq_cluster"}


def _rocketmq_broker(mq: Any, compacting: bool) -> Broker:
    from rstream.rocketmq import RocketMQBroker

    return RocketMQBroker(mq.namesrv, compact_min=1) if compacting else mq.broker()


def _session_rocketmq(kind: str = "rocketmq") -> Any:
    """The test session's ``LocalRocketMQ`` of ``kind`` (tests/support/rocketmq.py), started on first use."""
    return _SESSION[kind]


_SESSION: dict[str, Any] = {}


@pytest.fixture(autouse=True)
def _rocketmq_when_asked(request: Any) -> None:
    """A conformance test of a RocketMQ kind gets the session's RocketMQ of that kind (started on first use)."""
    factory = request.node.funcargs.get("broker_factory")
    if factory is not None and factory.kind in _FIXTURES and factory.kind not in _SESSION:
        _SESSION[factory.kind] = request.getfixturevalue(_FIXTURES[factory.kind])


class BrokerFactory:
    """``broker_factory()``: a broker of the kind under test; ``broker_factory.unique("t")``: a
    topic or job name no other test (or example) used."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind, self._root = kind, root
        self._made = itertools.count()
        self._run = uuid.uuid4().hex[:8]  # a server outlives a test session: names unique across sessions too

    def __call__(self, compacting: bool = False) -> Broker:
        return BROKERS[self.kind](self._root / f"broker-{next(self._made)}", compacting)

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{next(self._made)}-{self._run}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit: pure Python, fast (seconds)")


#: A broker kind that starts a server is an end-to-end test (the rest of the suite is unit).
_E2E = set(_FIXTURES)


@pytest.fixture(scope="module", params=[pytest.param(kind, marks=pytest.mark.e2e) if kind in _E2E else kind
                                        for kind in sorted(BROKERS)])
def broker_factory(request: Any, tmp_path_factory: pytest.TempPathFactory) -> BrokerFactory:
    """Makes brokers of each kind in ``BROKERS`` in turn (module scope: hypothesis examples share it)."""
    return BrokerFactory(request.param, tmp_path_factory.mktemp(request.param))
