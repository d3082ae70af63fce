"""A real RocketMQ for the tests: ``local_rocketmq``, one LocalRocketMQ started once for the whole test
session (registered in tests/conftest.py, so any test may ask for it; it starts on first use, about
10 to 25 s on 2 shared cores, and stops at the session's end), and a few remoting requests to look into a
broker below RocketMQBroker (``rstream.rocketmq.remoting``).

Tests that stop RocketMQ start their own LocalRocketMQ: the shared one must stay up. One test kills the
shared broker's JVM and starts it again at once (tests/rocketmq/test_jobs_on_rocketmq.py): a broker with
the history of the tests before it, whose deleted topics a crash recovery brings back
(tests/rocketmq/test_topic_incarnations.py).

``rocketmq_cluster``: a second one, of two brokers (``broker-a``, ``broker-b``, each its own JVM, and the
proxy in cluster mode), also started once on first use, for the tests of topics across brokers
(tests/rocketmq/test_cluster.py, the ``rocketmq-2`` kind of tests/broker/test_conformance.py). Its timer
wheel is off (a fifth of a core per broker; only the official client's consumer needs it, and these
tests only produce with it). A test that kills one of its brokers asks for ``healthy_cluster`` too,
which starts every broker that is down after it.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rstream.rocketmq.local import LocalRocketMQ
from rstream.rocketmq.remoting import Client
from tests.support.processes import processes_mentioning


@pytest.fixture(scope="session")
def local_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """One LocalRocketMQ (name server + proxy with its broker, 127.0.0.1) shared by the whole session."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq")).start()
    try:
        yield mq
    finally:
        mq.stop()


@pytest.fixture(scope="session")
def rocketmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """One two-broker LocalRocketMQ (name server, broker-a, broker-b, proxy; 127.0.0.1) shared by the session."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-cluster"), brokers=2,
                       broker_conf={"timerWheelEnable": "false"}).start()
    try:
        yield mq
    finally:
        mq.stop(grace=3.0)  # its store is thrown away: no need to wait the proxy's 12 s of clean shutdown


#: The retention the ``retention_rocketmq`` broker emulates (s): RocketMQ's ``fileReservedTime`` is whole hours.
RETENTION_S = 6.0
#: Its broker: 2 MB commit-log files (1 GB by default) whose time is up every hour of the day (``deleteWhen``,
#: so the clean service deletes expired files on every round, every half second, not once a day at 4 am), a
#: file expired an hour after it was last written (``fileReservedTime``, the least it takes), and a file that
#: a reader still maps destroyed a second after it was deleted (two minutes by default).
RETENTION_CONF = {
    "mappedFileSizeCommitLog": str(2 << 20), "fileReservedTime": "1", "deleteWhen": ";".join(f"{h:02d}" for h in range(24)),
    "cleanResourceInterval": "500", "destroyMapedFileIntervalForcibly": "1000", "diskMaxUsedSpaceRatio": "95",
    "timerWheelEnable": "false",
}


class ShortRetention:
    """A retention of ``seconds`` on a LocalRocketMQ started with ``RETENTION_CONF``: a thread that turns a
    commit-log file's modification time back two hours once it was last written ``seconds`` ago, so the
    broker's clean service (which expires a file an hour after its modification time, read from the file
    system: ``DefaultMappedFile.getLastModifiedTimestamp``) deletes it within half a second, oldest first,
    never the file being written (nor the one made ready after it). What RocketMQ then does is its own: consume queues' first offsets move up,
    a pull below them answers from the first offset on."""

    def __init__(self, mq: LocalRocketMQ, seconds: float) -> None:
        self.folder = mq.store_dir / "commitlog"
        self.seconds = seconds
        self.expired: list[str] = []  # the files it aged, in order
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            # never the file being written, nor the next one RocketMQ made ready beside it (AllocateMappedFileService)
            files = sorted(self.folder.glob("[0-9]" * 20))[:-2]
            now = time.time()
            for path in files:
                try:
                    written = path.stat().st_mtime
                    if written < now - 3600 or now - written < self.seconds:
                        continue
                    os.utime(path, (now - 7200, now - 7200))
                    self.expired.append(path.name)
                except FileNotFoundError:
                    continue

    def deleted(self) -> int:
        """How many of the files it aged the broker deleted."""
        return sum(not (self.folder / name).exists() for name in self.expired)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@pytest.fixture(scope="module")
def retention_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalRocketMQ, ShortRetention]]:
    """A LocalRocketMQ of its own (one broker) whose commit-log files are deleted ``RETENTION_S`` seconds after
    they were last written (``ShortRetention``), for a module's tests of what outlives retention."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq-retention"), broker_conf=RETENTION_CONF).start()
    retention = ShortRetention(mq, RETENTION_S)
    try:
        yield mq, retention
    finally:
        retention.stop()
        mq.stop(grace=3.0)


@pytest.fixture
def healthy_cluster(rocketmq_cluster: LocalRocketMQ) -> Iterator[LocalRocketMQ]:
    """The two-broker cluster, every broker of it started again after the test (one it killed)."""
    yield rocketmq_cluster
    for i in range(len(rocketmq_cluster.broker_names)):
        if not rocketmq_cluster.broker_alive(i):
            rocketmq_cluster.start_broker(i)


def listening(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def leftovers(home: Path) -> list[str]:
    """Every live process whose command line mentions ``home`` (a LocalRocketMQ's JVMs do)."""
    return processes_mentioning([str(home)])


def create_topic(broker_addr: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on the broker at ``broker_addr`` (readable and writable, ``queues`` queues)."""
    Client("unused:0").create_topic(broker_addr, topic, queues)


def topics(broker_addr: str) -> dict[str, Any]:
    """The broker's topic table, by name."""
    return Client("unused:0").topic_configs(broker_addr)


def send(broker_addr: str, topic: str, queue_id: int, payload: bytes) -> int:
    """Write one message to a queue of ``topic``; its offset in that queue."""
    return Client("unused:0").send(broker_addr, topic, queue_id, payload, {}, int(time.time() * 1000))


def max_offset(broker_addr: str, topic: str, queue_id: int) -> int:
    """The offset after the last message of a queue (how many messages it holds, from 0)."""
    return Client("unused:0").max_offset(broker_addr, topic, queue_id)


def min_offset(broker_addr: str, topic: str, queue_id: int) -> int:
    """The first offset a queue still has: 0 until RocketMQ deleted its oldest messages (retention)."""
    return Client("unused:0").min_offset(broker_addr, topic, queue_id)


def route(namesrv: str, topic: str) -> dict[str, Any] | None:
    """The name server's route of ``topic``, None while no live broker serves it."""
    return Client(namesrv).route(topic)
