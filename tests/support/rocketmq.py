"""A real RocketMQ for the tests: ``local_rocketmq``, one LocalRocketMQ started once for the whole test
session (registered in tests/conftest.py, so any test may ask for it; it starts on first use, about
10 to 25 s on 2 shared cores, and stops at the session's end), and a few raw remoting requests
to look into a broker without rstream's own client.

Tests that kill the broker or stop RocketMQ start their own LocalRocketMQ: the shared one must stay up.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rstream.rocketmq.local import LocalRocketMQ, _remoting_call

# RocketMQ's RequestCode values used here
SEND_MESSAGE = 10
UPDATE_AND_CREATE_TOPIC = 17
GET_ALL_TOPIC_CONFIG = 21
GET_MAX_OFFSET = 30
GET_ROUTEINFO_BY_TOPIC = 105
GET_BROKER_CLUSTER_INFO = 106


@pytest.fixture(scope="session")
def local_rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRocketMQ]:
    """One LocalRocketMQ (name server + proxy with its broker, 127.0.0.1) shared by the whole session."""
    mq = LocalRocketMQ(tmp_path_factory.mktemp("rocketmq")).start()
    try:
        yield mq
    finally:
        mq.stop()


def listening(pid: int) -> set[tuple[str, int]]:
    """``(address, port)`` of every TCP socket process ``pid`` listens on."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN}


def leftovers(home: Path) -> list[str]:
    """Every live process whose command line mentions ``home`` (a LocalRocketMQ's JVMs do)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and str(home) in line:
            found.append(f"{proc.pid}: {line[:200]}")
    return found


def create_topic(broker_addr: str, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on the broker at ``broker_addr`` (readable and writable, ``queues`` queues)."""
    code, _fields, body = _remoting_call(broker_addr, UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false",
    })
    assert code == 0, f"creating {topic} failed ({code}): {body[:300]!r}"


def topics(broker_addr: str) -> bytes:
    """The broker's topic table as it answers it (JSON, written by fastjson)."""
    code, _fields, body = _remoting_call(broker_addr, GET_ALL_TOPIC_CONFIG)
    assert code == 0, code
    return body


def send(broker_addr: str, topic: str, queue_id: int, payload: bytes) -> int:
    """Write one message to a queue of ``topic``; its offset in that queue."""
    code, fields, body = _remoting_call(broker_addr, SEND_MESSAGE, {
        "producerGroup": "rstream-tests", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
        "queueId": str(queue_id), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
        "properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
    }, payload)
    assert code == 0, f"sending to {topic} failed ({code}): {fields} {body[:300]!r}"
    return int(fields["queueOffset"])


def max_offset(broker_addr: str, topic: str, queue_id: int) -> int:
    """The offset after the last message of a queue (how many messages it holds, from 0)."""
    code, fields, _body = _remoting_call(broker_addr, GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)})
    assert code == 0, (code, fields)
    return int(fields["offset"])


def route(namesrv: str, topic: str) -> tuple[int, bytes]:
    """The name server's route of ``topic``: ``(code, body)``; code 0 once a live broker serves it."""
    code, _fields, body = _remoting_call(namesrv, GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    return code, body
