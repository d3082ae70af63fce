"""Fixtures for the notebook toolkit: a word count that has really run (with one bad record), an
event-time window job held back by a slow source queue (with one late record), and a comm that
records which thread sent each widget message. ``spark`` comes from ``tests/conftest.py``. Every test's
exercise ledgers live in a folder of its own (``exercise_ledgers``)."""

from __future__ import annotations

import threading
from typing import Any

import comm
import pytest

from rstream import EmbeddedBroker, RocketMQStream
from rstream.widgets import WatermarkSnapshot
from tests.support.widgets import (
    CATCH_UP,
    FAST,
    SENTENCES,
    SLOW,
    WINDOW_PROPS,
    page_clicks,
    send_clicks,
    wordcount,
)


@pytest.fixture(autouse=True)
def exercise_ledgers(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The graded exercises' ledgers (on disk) of each test in a data folder of its own, never in the
    working folder's ``rstream-data``: every test starts with no prediction, attempt or hint recorded."""
    from rstream.widgets import ledger

    folder = tmp_path_factory.mktemp("rstream-data")
    monkeypatch.setattr(ledger, "DATA_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def sentences() -> list[str]:
    return list(SENTENCES)


@pytest.fixture(scope="session")
def wordcount_builder() -> Any:
    """``wordcount_builder(job_id)`` -> a fresh word count ``StreamBuilder``."""
    return wordcount


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> EmbeddedBroker:
    broker = EmbeddedBroker(tmp_path_factory.mktemp("widgets") / "broker")
    broker.create_topic("sentences", queues=2)
    return broker


@pytest.fixture(scope="module")
def finished_job(spark: Any, module_broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A word count run to idle over ``SENTENCES``: one skipped record (``boom``), never replayed."""
    module_broker.send_batch("sentences", SENTENCES)
    data = tmp_path_factory.mktemp("finished-job")
    job = RocketMQStream(wordcount("widgets-finished").build(), properties={"data_dir": str(data)},
                         broker=module_broker, spark=spark)
    job.run_until_idle(timeout=120)
    yield job
    job.stop()


@pytest.fixture(scope="session")
def page_clicks_builder() -> Any:
    """``page_clicks_builder(job_id)`` -> a fresh tumbling-window ``StreamBuilder`` over ``clicks``."""
    return page_clicks


@pytest.fixture(scope="session")
def held_back_job(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(job, first)``: the page-clicks job after ``FAST`` and ``SLOW`` (``first``, a
    ``WatermarkSnapshot`` taken then: nothing fired, everything held back by queue 1), then after
    ``CATCH_UP`` (the job: windows ending at 10000 fired). Never idle, stopped."""
    root = tmp_path_factory.mktemp("held-back")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("clicks", queues=2)
    send_clicks(broker, 0, FAST)
    send_clicks(broker, 1, SLOW)
    job = RocketMQStream(page_clicks("widgets-held-back").build(), properties={"data_dir": str(root), **WINDOW_PROPS},
                         broker=broker, spark=spark)
    job.run_until_idle(timeout=120, fire_idle=False)
    first = WatermarkSnapshot.of(job)
    send_clicks(broker, 1, CATCH_UP)
    job.run_until_idle(timeout=120, fire_idle=False)
    yield job, first
    job.stop()


class RecordingComm(comm.DummyComm):
    """A comm with no kernel behind it that keeps every message with the thread that sent it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sent: list[tuple[str, str, Any]] = []
        super().__init__(*args, **kwargs)

    def publish_msg(self, msg_type: str, data: Any = None, metadata: Any = None, buffers: Any = None,
                    **keys: Any) -> None:
        self.sent.append((threading.current_thread().name, msg_type, data))


@pytest.fixture
def recording_comm(monkeypatch: pytest.MonkeyPatch) -> type[RecordingComm]:
    """Widgets made while this fixture is active talk through a ``RecordingComm``."""
    monkeypatch.setattr(comm, "create_comm", RecordingComm)
    return RecordingComm
