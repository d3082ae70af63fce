"""How many remoting requests ``RocketMQBroker`` makes, on a real RocketMQ: a topic's end offsets in one
request (``GET_TOPIC_STATS_INFO``) give what one ``GET_MAX_OFFSET`` (and ``GET_MIN_OFFSET``) per queue
gives, and a started job's idle source looks at the broker with one request per input topic and one
for the decision log (``data_version``), whatever the topics' queues. Counted in this process
(``remoting.REQUESTS``); no timing."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from rstream.rocketmq import remoting
from rstream.rocketmq.broker import RocketMQBroker
from rstream.rocketmq.remoting import GET_MAX_OFFSET, GET_TOPIC_STATS_INFO, PULL_MESSAGE, Client
from rstream.runtime.config import dump_blob
from rstream.runtime.source import BATCH_KEY, RStreamStreamReader

pytestmark = pytest.mark.e2e


def requests_of(fn: Callable[[], Any]) -> tuple[Any, dict[int, int]]:
    """``fn()`` and the requests it sent, by code."""
    before = collections.Counter(remoting.REQUESTS)
    out = fn()
    used = collections.Counter(remoting.REQUESTS)
    used.subtract(before)
    return out, dict(+used)


def test_a_topics_offsets_in_one_request_equal_each_queues_own(rocket_broker: RocketMQBroker,
                                                               local_rocketmq: Any) -> None:
    rocket_broker.create_topic("stats", queues=5)
    addr = local_rocketmq.broker_addr
    client = Client(local_rocketmq.namesrv)

    def per_queue() -> list[tuple[int, int]]:
        return [(client.min_offset(addr, "stats", q), client.max_offset(addr, "stats", q)) for q in range(5)]

    assert client.topic_offsets(addr, "stats") == per_queue() == [(0, 0)] * 5
    rocket_broker.send_batch("stats", [f"w{i}" for i in range(40)], keys=[f"k{i % 7}" for i in range(40)])
    rocket_broker.send_batch("stats", ["x", "y", "z"], queue=4)
    rocket_broker.append({("stats", 1): [("k", b"v", 1, None, None)] * 3, ("stats", 3): [(None, b"v", 1, None, None)]})
    got, used = requests_of(lambda: client.topic_offsets(addr, "stats"))
    assert got == per_queue()
    assert used == {GET_TOPIC_STATS_INFO: 1}
    assert sum(end for _first, end in got) == 47 and got[4][1] >= 3
    assert client.topic_offsets(addr, "no-such-topic") is None

    # the broker's end offsets: one request for the queues, one that reads the decision log on
    ends, used = requests_of(lambda: rocket_broker.end_offsets("stats"))
    assert ends == [end for _first, end in per_queue()]
    assert used == {GET_TOPIC_STATS_INFO: 1, PULL_MESSAGE: 1}
    # one queue's end, as a reader clips a range: one GET_MAX_OFFSET, not the topic's stats
    _, used = requests_of(lambda: rocket_broker.read("stats", 2))
    assert used.get(GET_MAX_OFFSET) == 1 and GET_TOPIC_STATS_INFO not in used


def test_a_tagged_append_reads_the_decision_log_back_without_polling_its_end(rocket_broker: RocketMQBroker) -> None:
    """An append of several queues: one request per topic for the queues' lower bounds, and the wait
    for its commit to be readable reads the log itself (no GET_MAX_OFFSET on the log)."""
    from rstream.broker.base import CommitTag

    rocket_broker.create_topic("tagged-in", queues=1)
    rocket_broker.create_topic("tagged-out", queues=4)
    records = {("tagged-out", q): [(f"k{q}", b"v", 1, None, None)] for q in range(4)}
    tag = CommitTag("req-job", "tagged-in", 0, 0, 1, batch_id=0)
    before, used = requests_of(rocket_broker.commits_version)
    assert used == {PULL_MESSAGE: 1}  # what a task waiting for its batch's other commits asks, per look
    won, used = requests_of(lambda: rocket_broker.append(records, tag))
    assert won
    assert rocket_broker.commits_version() > before
    assert used.get(GET_MAX_OFFSET, 0) == 0 and used[GET_TOPIC_STATS_INFO] == 1
    assert rocket_broker.find_commit("req-job", "tagged-in", 0, 0) is not None
    assert rocket_broker.end_offsets("tagged-out") == [1, 1, 1, 1]
    assert not rocket_broker.append(records, tag)  # the range is committed: a second attempt loses
    assert rocket_broker.end_offsets("tagged-out") == [1, 1, 1, 1]
    assert [m.body for m in rocket_broker.read("tagged-out")] == [b"v"] * 4


def watching_reader(broker: RocketMQBroker, wait_ms: int) -> RStreamStreamReader:
    """A started job's source over ``watch-src`` (2 queues) and ``watch-sh`` (8 queues), at their ends."""
    broker.create_topic("watch-src", queues=2)
    broker.create_topic("watch-sh", queues=8)
    initial = {f"watch-src/{q}": 0 for q in range(2)} | {f"watch-sh/{q}": 0 for q in range(8)}
    return RStreamStreamReader({
        "configsecret": "", "brokersecret": dump_blob(broker), "job": "watcher", "waitms": str(wait_ms),
        "sourcetopics": json.dumps(["watch-src"]), "shuffletopics": json.dumps(["watch-sh"]),
        "initialoffsets": json.dumps(initial)})


def test_the_idle_watch_makes_one_request_per_input_topic_and_one_for_the_log(
        rocket_broker: RocketMQBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = watching_reader(rocket_broker, wait_ms=150)
    start = {**reader.initial, BATCH_KEY: 0}
    looks: list[dict[int, int]] = []
    version = reader.broker.data_version

    def counted() -> Any:
        got, used = requests_of(version)
        looks.append(used)
        return got

    monkeypatch.setattr(reader.broker, "data_version", counted)
    reads = []
    latest = reader._latest
    monkeypatch.setattr(reader, "_latest", lambda s: reads.append(1) or latest(s))
    end = reader.latestOffset(start)
    assert end == start  # nothing came: the same offsets, the same batch
    assert len(reads) == 1  # read once before the watch; then nothing changed, so never again
    assert len(looks) >= 2
    # 10 queues in 2 topics: a look is 2 topic stats and 1 pull of the decision log (per queue it was 12)
    assert all(used == {GET_TOPIC_STATS_INFO: 2, PULL_MESSAGE: 1} for used in looks), looks


def test_the_idle_watch_returns_the_input_that_comes_while_it_looks(rocket_broker: RocketMQBroker) -> None:
    reader = watching_reader(rocket_broker, wait_ms=60_000)
    start = {**reader.initial, BATCH_KEY: 0}
    assert reader.latestOffset({**start, BATCH_KEY: -1}) == {**start, BATCH_KEY: 0}  # batch 0 runs anyway
    sender = threading.Thread(target=lambda: (time.sleep(0.3), rocket_broker.send("watch-src", "x", queue=1)))
    sender.start()
    try:
        end = reader.latestOffset(start)
    finally:
        sender.join()
    assert end == {**start, "watch-src/1": 1, BATCH_KEY: 1}
