"""How ``RocketMQBroker`` numbers a topic's queues across brokers, and finds a broker that went away,
without a JVM: fake routes and a fake name server.

rstream's queue ``q`` of a topic is the ``q``-th (broker name, queue id) pair in the order of broker
name, then queue id; the numbering is written to the decision log and never changes while the topic
lives: a broker that is down keeps its numbers, and queues added later are refused until adopted
(after the old ones)."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rstream.broker.base import BrokerError
from rstream.rocketmq.broker import (
    RocketMQBroker,
    _Log,
    label,
    numbered,
    route_queues,
    spread,
    unnumbered,
)
from rstream.rocketmq.remoting import (
    GET_ROUTEINFO_BY_TOPIC,
    Client,
    PulledMessage,
    RemotingError,
    _read_frame,
    name_servers,
)


def route(**brokers: tuple[int, int]) -> dict[str, Any]:
    """A name server's route: per broker name, its (read, write) queue counts; addresses 10.0.0.x:10911."""
    return {"queueDatas": [{"brokerName": b, "readQueueNums": r, "writeQueueNums": w, "perm": 6}
                           for b, (r, w) in brokers.items()],
            "brokerDatas": [{"brokerName": b, "brokerAddrs": {"0": f"10.0.0.{i}:10911"}}
                            for i, b in enumerate(brokers)]}


# -- the numbering ------------------------------------------------------------------------------------
def test_a_routes_queues_are_numbered_by_broker_name_then_queue_id() -> None:
    got = route_queues(route(**{"broker-b": (2, 2), "broker-a": (3, 3)}))
    assert got == (("broker-a", 0), ("broker-a", 1), ("broker-a", 2), ("broker-b", 0), ("broker-b", 1))
    assert [label(q) for q in got] == ["broker-a:0", "broker-a:1", "broker-a:2", "broker-b:0", "broker-b:1"]
    # a broker whose write queues an operator shrank keeps its other queues readable, and numbered
    assert route_queues(route(**{"broker-a": (4, 2)})) == tuple(("broker-a", i) for i in range(4))
    assert route_queues(None) == () and route_queues({"queueDatas": []}) == ()


@pytest.mark.parametrize(("queues", "brokers", "counts"), [
    (8, ["broker-b", "broker-a"], {"broker-a": 4, "broker-b": 4}),
    (3, ["broker-a", "broker-b"], {"broker-a": 2, "broker-b": 1}),
    (1, ["broker-c", "broker-a", "broker-b"], {"broker-a": 1}),
    (5, ["broker-a"], {"broker-a": 5}),
])
def test_a_new_topics_queues_are_spread_as_evenly_as_they_go(queues: int, brokers: list[str],
                                                              counts: dict[str, int]) -> None:
    assert spread(queues, brokers) == counts
    assert len(numbered(counts)) == queues  # TopicInfo.queues is the total asked for


def test_queues_a_numbering_lacks_are_found() -> None:
    numbering = numbered({"broker-a": 2, "broker-b": 2})
    assert unnumbered(numbering, route_queues(route(**{"broker-a": (2, 2)}))) == []  # broker-b away: nothing new
    assert unnumbered(numbering, route_queues(route(**{"broker-a": (3, 3), "broker-c": (1, 1)}))) == [
        ("broker-a", 2), ("broker-c", 0)]


# -- a RocketMQBroker over a fake cluster ----------------------------------------------------------------
class FakeCluster:
    """What ``RocketMQBroker`` asks the name server and brokers for its topics, and a decision log in memory."""

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, Any]] = {}
        self.masters: dict[str, str] = {"broker-a": "10.0.0.0:10911", "broker-b": "10.0.0.1:10911"}
        self.configs: dict[tuple[str, str], dict[str, Any]] = {}  # (address, topic) -> config
        self.log = _Log()
        self.appended: list[dict[str, Any]] = []

    def install(self, broker: RocketMQBroker) -> RocketMQBroker:
        client: Any = broker._client
        client.route = lambda topic: self.routes.get(topic)
        client.cluster_info = lambda: {"brokerAddrTable": {b: {"brokerAddrs": {"0": a}} for b, a in self.masters.items()}}
        client.topic_config = lambda addr, topic: self.configs.get((addr, topic))
        broker._refresh = lambda until=0: self.log  # type: ignore[method-assign]
        broker._log_append = self.append  # type: ignore[method-assign]
        return broker

    def append(self, entry: dict[str, Any], wait: bool = True) -> int:
        self.appended.append(entry)
        RocketMQBroker._apply(self.log, PulledMessage(0, len(self.appended) - 1, 0, 0, json.dumps(entry).encode(), ""))
        return len(self.appended) - 1


@pytest.fixture
def fake() -> Iterator[tuple[FakeCluster, RocketMQBroker]]:
    cluster = FakeCluster()
    broker = cluster.install(RocketMQBroker("127.0.0.1:9", broker_wait_s=0.5))
    yield cluster, broker
    broker.close()


def test_a_topic_keeps_its_numbers_while_one_of_its_brokers_is_away(fake: tuple[FakeCluster, RocketMQBroker]) -> None:
    cluster, broker = fake
    cluster.append({"t": "topic", "topic": "t", "compact": False, "queues": [list(q) for q in numbered(
        {"broker-a": 2, "broker-b": 2})]})
    cluster.routes["t"] = route(**{"broker-b": (2, 2)})  # broker-a is down: the name server forgot its queues
    assert broker.queue_ids("t") == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0), ("broker-b", 1)]
    assert broker.topic("t").queues == 4 and broker.queue_label("t", 2) == "broker-b:0"
    # every one of its brokers away: it still exists (its brokers will be waited for)
    cluster.masters = {}
    assert broker._lookup("t", fresh=True) is not None
    # deleted by another tool: registered brokers of it no longer have it
    cluster.masters = {"broker-a": "10.0.0.0:10911"}
    cluster.routes.pop("t")
    assert broker._lookup("t", fresh=True) is None


def test_a_topic_made_by_another_tool_is_numbered_when_first_seen_and_the_first_numbering_counts(
        fake: tuple[FakeCluster, RocketMQBroker]) -> None:
    cluster, broker = fake
    cluster.routes["foreign"] = route(**{"broker-b": (1, 1), "broker-a": (2, 2)})
    assert broker.queue_ids("foreign") == [("broker-a", 0), ("broker-a", 1), ("broker-b", 0)]
    assert cluster.appended[-1] == {"t": "numbering", "topic": "foreign",
                                    "queues": [["broker-a", 0], ["broker-a", 1], ["broker-b", 0]]}
    # another process that saw it with broker-a away wrote a numbering too, later: the first one counts
    cluster.append({"t": "numbering", "topic": "foreign", "queues": [["broker-b", 0]]})
    assert cluster.log.numbering["foreign"] == (("broker-a", 0), ("broker-a", 1), ("broker-b", 0))
    # the name server lost its route (its brokers restarting): the brokers' own configs say it exists
    cluster.routes.clear()
    cluster.configs[("10.0.0.1:10911", "other")] = {"readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
    assert broker.queue_ids("other") == [("broker-b", 0), ("broker-b", 1)]


def test_queues_added_later_are_refused_until_adopted_after_the_old_ones(fake: tuple[FakeCluster, RocketMQBroker]) -> None:
    cluster, broker = fake
    cluster.append({"t": "topic", "topic": "t", "compact": False, "queues": [["broker-a", 0], ["broker-b", 0]]})
    cluster.routes["t"] = route(**{"broker-a": (2, 2), "broker-b": (1, 1)})  # an operator added broker-a:1
    with pytest.raises(BrokerError, match=r"topic 't' now has queues broker-a:1 beyond the 2 that rstream numbered"
                                          r".*broker\.adopt_queues\('t'\)"):
        broker.topic("t")
    assert broker.adopt_queues("t").queues == 3
    assert broker.queue_ids("t") == [("broker-a", 0), ("broker-b", 0), ("broker-a", 1)]  # old numbers kept


# -- brokers that go away -------------------------------------------------------------------------------
def test_a_broker_that_moved_is_found_where_it_registered_again(fake: tuple[FakeCluster, RocketMQBroker],
                                                                caplog: pytest.LogCaptureFixture) -> None:
    cluster, broker = fake
    broker.broker_wait_s = 30
    asked: list[str] = []
    state = {"registered": False}

    def call(addr: str, what: str) -> str:
        asked.append(addr)
        if addr != "10.0.0.9:10911":
            raise RemotingError(f"cannot reach RocketMQ at {addr}", None)
        return what

    cluster.masters = {"broker-a": "10.0.0.0:10911", "broker-b": "10.0.0.1:10911"}
    broker.masters()
    real = cluster.masters

    def moving() -> dict[str, Any]:  # after two tries broker-b is unregistered, then registered elsewhere
        if len(asked) >= 2:
            real["broker-b"] = "10.0.0.9:10911" if state["registered"] else ""
            state["registered"] = True
        return {"brokerAddrTable": {b: {"brokerAddrs": {"0": a} if a else {}} for b, a in real.items()}}

    broker._client.cluster_info = moving  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="rstream.rocketmq"):
        assert broker._at("broker-b", call, "pulled", what="read t/3") == "pulled"
    assert asked[0] == "10.0.0.1:10911" and asked[-1] == "10.0.0.9:10911"
    notes = [r.getMessage() for r in caplog.records]
    assert any("waiting for RocketMQ broker broker-b" in n and "read t/3" in n for n in notes), notes
    assert any("broker-b is back" in n for n in notes), notes


def test_a_broker_away_past_the_deadline_raises_an_error_that_names_it(fake: tuple[FakeCluster, RocketMQBroker]) -> None:
    cluster, broker = fake
    cluster.masters = {"broker-a": "10.0.0.0:10911"}
    with pytest.raises(BrokerError, match=r"RocketMQ broker broker-b has not been reachable for .* \(not registered "
                                          r"with the name server at 127\.0\.0\.1:9\), so read t/1 could not be done: "
                                          r"start it again .*broker_wait_s"):
        broker._at("broker-b", lambda addr: addr, what="read t/1")


def test_name_servers_that_are_away_leave_known_routes_in_use_and_are_waited_for(
        fake: tuple[FakeCluster, RocketMQBroker], caplog: pytest.LogCaptureFixture) -> None:
    cluster, broker = fake
    broker.broker_wait_s = 30
    cluster.append({"t": "topic", "topic": "t", "compact": False, "queues": [["broker-a", 0], ["broker-b", 0]]})
    cluster.routes["t"] = route(**{"broker-a": (1, 1), "broker-b": (1, 1)})
    assert broker.topic("t").queues == 2

    def away(*_args: Any) -> Any:
        raise RemotingError("none of the RocketMQ name servers 127.0.0.1:9 could be reached", None)

    client: Any = broker._client
    client.route = away
    known = broker._lookup("t", fresh=True)  # the schedule's read of the route fails: the one it had holds
    assert known is not None and known.queue_ids == (("broker-a", 0), ("broker-b", 0))
    broker._addrs.clear()
    answers = [away, away, lambda: {"brokerAddrTable": {"broker-a": {"brokerAddrs": {"0": "10.0.0.5:10911"}}}}]
    client.cluster_info = lambda: answers.pop(0)() if len(answers) > 1 else answers[0]()
    with caplog.at_level(logging.WARNING, logger="rstream.rocketmq"):
        assert broker._at("broker-a", lambda addr: addr, what="read t/0") == "10.0.0.5:10911"
    assert any("none of the RocketMQ name servers" in r.getMessage() for r in caplog.records)


# -- name server lists ---------------------------------------------------------------------------------
def test_a_name_server_list_is_accepted_and_each_tried_in_turn() -> None:
    assert name_servers("ns1:9876; ns2:9876") == ["ns1:9876", "ns2:9876"]
    for bad in ["ns1", "ns1:9876;nope", "", ";", 9876]:
        with pytest.raises(BrokerError, match="several separated by ';'"):
            RocketMQBroker(bad)  # type: ignore[arg-type]

    server = socket.create_server(("127.0.0.1", 0))
    closed = socket.create_server(("127.0.0.1", 0))
    refused = f"127.0.0.1:{closed.getsockname()[1]}"
    closed.close()  # nothing listens there: connections are refused
    answered = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while True:
                    try:
                        request = _read_frame(conn, time.monotonic() + 60)
                    except (ConnectionError, OSError):
                        break
                    answered.append(request.code)
                    body = json.dumps(route(**{"broker-a": (1, 1)})).encode()
                    header = json.dumps({"code": 0, "flag": 1, "opaque": request.opaque, "language": "JAVA",
                                         "version": 0, "serializeTypeCurrentRPC": "JSON"}).encode()
                    conn.sendall(struct.pack(">II", 4 + len(header) + len(body), len(header)) + header + body)

    threading.Thread(target=serve, daemon=True).start()
    client = Client(f"{refused};127.0.0.1:{server.getsockname()[1]}", timeout=5)
    try:
        assert route_queues(client.route("t")) == (("broker-a", 0),)
        assert client.route("t") is not None and answered == [GET_ROUTEINFO_BY_TOPIC] * 2
        assert client._answered == 1  # the one that answered is asked first next time
    finally:
        client.close()
        server.close()
    with pytest.raises(RemotingError, match="none of the RocketMQ name servers .* could be reached"):
        Client.namesrv_reconnect_s = 0.3
        try:
            Client(f"{refused};{refused}").route("t")
        finally:
            Client.namesrv_reconnect_s = 60.0
