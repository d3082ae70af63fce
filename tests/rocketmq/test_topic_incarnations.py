"""A topic deleted and made again shows only what its new life holds, also after a broker crash.

RocketMQ deletes a topic's queue index, never its messages in the commit log, and a broker restarted
after a crash rebuilds the indexes from the commit log: 5.3.3 puts the deleted topic's messages back
into every queue of that name that is empty then, or made later. ``RocketMQBroker`` notes each
deletion in its decision log and skips what a topic stored before it."""

from __future__ import annotations

import uuid

import pytest

from rstream.rocketmq.local import LocalRocketMQ
from tests.support.rocketmq import max_offset

pytestmark = pytest.mark.e2e


def test_a_deleted_topics_messages_that_a_crash_brings_back_are_never_read(local_rocketmq: LocalRocketMQ) -> None:
    """On the session's RocketMQ, its broker killed and started again (topics of this test's own names)."""
    mq, own = local_rocketmq, uuid.uuid4().hex[:8]
    reborn, gone = f"reborn-{own}", f"gone-{own}"
    broker = mq.broker()
    try:
        broker.create_topic(reborn, queues=2)
        broker.send_batch(reborn, [f"old{i}" for i in range(6)])  # three per queue
        broker.delete_topic(reborn)
        broker.create_topic(reborn, queues=2)
        broker.send_batch(reborn, ["new"], queue=0)  # queue 1 of the new life stays empty
        broker.create_topic(gone, queues=1)
        broker.send_batch(gone, ["a", "b"])
        broker.delete_topic(gone)
        assert [m.body for m in broker.read(reborn)] == [b"new"]

        mq.kill_broker()
        mq.start_broker()
        # RocketMQ's recovery put the old life's messages back into the empty queue...
        assert max_offset(mq.broker_addr, reborn, 1) == 3
        # ...which no rstream reader sees
        assert [(m.queue_id, m.body) for m in broker.read(reborn)] == [(0, b"new")]
        assert broker.read_latest(reborn, 1) == {}
        broker.send_batch(reborn, ["after"], queue=1)
        assert [(m.queue_id, m.body) for m in broker.read(reborn)] == [(0, b"new"), (1, b"after")]

        broker.create_topic(gone, queues=1)  # made anew after the crash: it starts with the old messages
        assert max_offset(mq.broker_addr, gone, 0) == 2
        assert broker.read(gone) == []
        broker.send_batch(gone, ["c"])
        assert [m.body for m in broker.read(gone)] == [b"c"]
        assert [m.body for m in mq.broker().read(gone)] == [b"c"]  # a new client reads the log alike
    finally:
        if not mq.broker_running:
            mq.start_broker()
        for topic in (reborn, gone):
            if broker.has_topic(topic):
                broker.delete_topic(topic)
        broker.close()
