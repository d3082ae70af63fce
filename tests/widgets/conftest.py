"""Fixtures for the notebook toolkit: a word count that has really run (with one bad record), and a
comm that records which thread sent each widget message. ``spark`` comes from ``tests/conftest.py``."""

from __future__ import annotations

import threading
from typing import Any

import comm
import pytest

from rstream import EmbeddedBroker, RocketMQStream, StreamBuilder, TextDeserializer, TextSerializer

SENTENCES = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps", "boom"]


def wordcount(job_id: str) -> StreamBuilder:
    """Word count whose flat_map raises on ``boom``. Its functions are local, so Spark's workers get
    them by value and need not import this file."""

    def split_words(sentence: str) -> list[str]:
        if sentence == "boom":
            raise ValueError("a sentence that cannot be split")
        return sentence.split()

    builder = StreamBuilder(job_id)
    words = builder.source("sentences", TextDeserializer()).flat_map(split_words)
    words.key_by(lambda w: w).count().to_rstream().sink("word-counts", TextSerializer(with_key=True))
    return builder


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
