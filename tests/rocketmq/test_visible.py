"""Records visible on commit without a JVM: how a check-back is answered from the decision log (``verdict``,
over log entries read as a reader reads them, and across a checkpoint), and the remoting requests of half
messages as fake brokers see them: the send (``TRAN_MSG``, ``PGROUP``, the prepared flag), their end (commit,
rollback, oneway), commits kept in each key's order while the broker answers out of order, and a producer
channel that heartbeats, is asked back and answers as RocketMQ's producer does."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from rstream import StreamBuilder
from rstream.broker.batch import OnCommitRecords, visible_on_commit
from rstream.errors import RStreamError
from rstream.rocketmq.broker import RocketMQBroker, _dump, _Log, _restore
from rstream.rocketmq.remoting import (
    CHECK_TRANSACTION_STATE,
    END_TRANSACTION,
    HEART_BEAT,
    SEND_MESSAGE,
    Client,
    Connection,
    HalfMessage,
    ProducerChannel,
    PulledMessage,
    commit_log_offset,
    parse_properties,
)
from rstream.rocketmq.visible import TXN_GROUP, verdict
from tests.support.rocketmq import ScriptedServer, frame, stored_message

pytestmark = pytest.mark.unit


# -- what the log says of an attempt's half messages ----------------------------------------------------
def read(log: _Log, *entries: dict[str, Any], step_ms: int = 1_000) -> _Log:
    """``log`` after reading ``entries`` as the decision log's next messages (store times ``step_ms`` apart)."""
    for entry in entries:
        m = PulledMessage(0, log.next_offset, 0, step_ms * (log.next_offset + 1), json.dumps(entry).encode(), "")
        RocketMQBroker._apply(log, m)
        log.next_offset += 1
    return log


def tag(job: str, start: int) -> dict[str, Any]:
    return {"job": job, "topic": "in", "queue": 0, "start_offset": start, "end_offset": start + 1, "meta": "",
            "batch_id": 0, "info": "", "outputs": {}}


def test_a_check_back_is_answered_from_the_log_and_a_checkpoint_keeps_the_answers() -> None:
    """Commit what won, roll back what lost (to another attempt of its range, or to an abort), leave what is
    undecided; a message that is not rstream's is left alone. After a checkpoint the log names no committed
    attempt (one it does not know committed), but keeps lost attempts that sent half messages, whatever the
    age of their other records."""
    r1, r2, r3 = ["j", "in", 0, 0], ["j", "in", 0, 1], ["j", "in", 0, 2]
    log = read(_Log(),
               {"t": "topic", "topic": "sink", "compact": False, "queues": [["broker-a", 0]]},
               {"t": "open", "a": "lost-race", "range": r1, "at": {}, "half": ["sink/0"]},
               {"t": "open", "a": "won", "range": r1, "at": {"state/0": 4}, "half": ["sink/0"]},
               {"t": "commit", "a": "won", "range": r1, "out": {"state/0": [4, 5]}, "tag": tag("j", 0)},
               {"t": "open", "a": "aborted", "range": r2, "at": {}, "half": ["sink/0"]},
               {"t": "abort", "a": "aborted", "after": 0},
               {"t": "open", "a": "open", "range": r3, "at": {}, "half": ["sink/0"]})
    answers = {a: verdict(log, a) for a in ("won", "lost-race", "aborted", "open", None)}
    assert answers == {"won": True, "lost-race": False, "aborted": False, "open": None, None: None}
    assert "sink/0" not in log.pending  # no reader waits on half messages: their queue holds none until committed
    assert log.lost["lost-race"] == {"sink/0": None}  # no end: their records have no offsets

    RocketMQBroker._forget_lost(None, log)  # type: ignore[arg-type]  # (a checkpoint's: nothing it may forget)
    restored = _Log()
    _restore(restored, json.loads(json.dumps(_dump(log))))
    assert "won" not in restored.decided and "won" not in restored.lost  # a checkpoint names no committed attempt
    assert {a: verdict(restored, a) for a in answers} == answers


def test_an_attempt_that_wrote_no_half_message_is_still_forgotten_by_a_checkpoint() -> None:
    """Only the queues of half messages keep a lost attempt: one whose records' ends are known is forgotten
    as before once its topic is gone."""
    log = read(_Log(), {"t": "open", "a": "x", "range": ["j", "in", 0, 0], "at": {"gone/0": 0}},
               {"t": "abort", "a": "x", "out": {"gone/0": [0, 3]}})
    assert log.lost == {"x": {"gone/0": 3}}
    RocketMQBroker._forget_lost(None, log)  # type: ignore[arg-type]
    assert log.lost == {}


# -- the records a sink hands the broker -------------------------------------------------------------------
def test_an_on_commit_sink_hands_its_records_marked_and_reads_the_same(tmp_path: Any) -> None:
    built = StreamBuilder("vis")
    built.source("in").sink("out", visible="on_commit")
    topology = built.build()
    assert topology.on_commit_topics == ["out"] and topology.sink_topics == ["out"]
    assert "out (on commit)" in topology.logical_dot() and "out (on commit)" in topology.real_dot()
    plain = StreamBuilder("plain")
    plain.source("in").sink("out")
    assert built.run_in_process({"in": ["a", "b"]}) == plain.run_in_process({"in": ["a", "b"]}) == {"out": ["None:a", "None:b"]}
    records = OnCommitRecords()
    records.append(("k", b"v", 1, None, None))
    assert visible_on_commit(records) and not visible_on_commit([("k", b"v", 1, None, None)])
    assert list(records) == [("k", b"v", 1, None, None)]


def test_the_sink_option_says_what_it_takes() -> None:
    with pytest.raises(RStreamError, match="visible='later': give 'always'"):
        StreamBuilder("bad").source("in").sink("out", visible="later")
    both = StreamBuilder("both")
    stream = both.source("in")
    stream.sink("out", visible="on_commit")
    stream.sink("out")
    with pytest.raises(RStreamError, match="two sinks of job 'both' write topic 'out'"):
        both.build()


# -- the requests ------------------------------------------------------------------------------------------
def answer_to(header: dict[str, Any], code: int = 0, **ext: str) -> bytes:
    return frame({"code": code, "opaque": header["opaque"], "flag": 1, "extFields": ext})


def test_a_half_message_is_sent_prepared_in_its_producer_group_and_named_by_its_answer() -> None:
    server = ScriptedServer(lambda h: answer_to(h, msgId="7F0000010000C3910000000000000145", queueOffset="3",
                                                transactionId="U1", queueId="2"))
    try:
        sent = Client("unused:0").send_half(server.addr, "out", 2, [(b"v", "KEYS\x01k\x02", 1234)], TXN_GROUP, 60)
    finally:
        server.close()
    assert sent == [HalfMessage(0x145, 3, "U1")]
    (request,) = server.requests
    ext = request["extFields"]
    assert request["code"] == SEND_MESSAGE and ext["topic"] == "out" and ext["queueId"] == "2"
    assert ext["sysFlag"] == "4" and ext["bornTimestamp"] == "1234" and ext["producerGroup"] == TXN_GROUP
    assert parse_properties(ext["properties"]) == {"KEYS": "k", "TRAN_MSG": "true", "PGROUP": TXN_GROUP,
                                                   "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}
    assert commit_log_offset("0" * 16 + "00000000000000FF") == 255
    with pytest.raises(RStreamError, match="not a broker's message id"):
        commit_log_offset("U1")


def test_half_messages_are_committed_answered_and_rolled_back_oneway() -> None:
    late = 604  # ILLEGAL_OPERATION: past the message's check immunity, only a check-back ends it
    server = ScriptedServer(lambda h: b"" if h["flag"] & 2 else answer_to(h, late if h["extFields"]["msgId"] == "U1" else 0))
    halves = [HalfMessage(100 + i, i, f"U{i}") for i in range(3)]
    client = Client("unused:0")
    try:
        assert client.end_transactions(server.addr, "out", halves, True, TXN_GROUP) == [True, False, True]
        assert client.end_transactions(server.addr, "out", halves[:2], False, TXN_GROUP, oneway=True) == []
        deadline = time.monotonic() + 5
        while len(server.requests) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        server.close()
    assert [r["code"] for r in server.requests] == [END_TRANSACTION] * 5
    assert [r["flag"] for r in server.requests] == [0, 0, 0, 2, 2]  # the rollbacks oneway: no answer awaited
    first = server.requests[0]["extFields"]
    assert first == {"topic": "out", "producerGroup": TXN_GROUP, "tranStateTableOffset": "0", "commitLogOffset": "100",
                     "commitOrRollback": "8", "fromTransactionCheck": "false", "msgId": "U0", "transactionId": "U0"}
    assert [r["extFields"]["commitOrRollback"] for r in server.requests[3:]] == ["12", "12"]


class ReversingServer:
    """Answers the requests it has read so far in reverse order, a moment after they came (as a broker that
    ends transactions on several threads may): notes ``("in", n)`` per request and ``("out", n)`` per answer."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self._listener.accept()
        conn.settimeout(0.05)
        held: list[dict[str, Any]] = []
        data = b""
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                except TimeoutError:
                    pass
                while len(data) >= 8:
                    length, header_length = struct.unpack(">II", data[:8])
                    if len(data) < 4 + length:
                        break
                    header = json.loads(data[8:8 + header_length])
                    data = data[4 + length:]
                    held.append(header)
                    self.events.append(("in", int(header["extFields"]["n"])))
                for header in reversed(held):
                    self.events.append(("out", int(header["extFields"]["n"])))
                    conn.sendall(answer_to(header))
                held = []

    def close(self) -> None:
        self._listener.close()


def test_pipelined_requests_keep_the_order_asked_and_get_their_own_answers() -> None:
    """Eight requests, each of keys a, b, a, b, ...: a request is sent only once the one before it of its key
    was answered, however the server orders its answers, and each answer is its own request's."""
    server = ReversingServer()
    keys = ["a", "b"] * 4
    after = [None, None, 0, 1, 2, 3, 4, 5]
    try:
        replies = Connection(server.addr, timeout=5).pipeline([(END_TRANSACTION, {"n": n}, b"") for n in range(8)], after)
    finally:
        server.close()
    assert len(replies) == 8 and len({r.opaque for r in replies}) == 8
    assert [r.opaque for r in replies] == sorted(r.opaque for r in replies)  # in the order asked
    for n, before in enumerate(after):
        if before is not None:  # sent after its key's previous one was answered
            assert server.events.index(("out", before)) < server.events.index(("in", n)), (keys[n], server.events)
    assert server.events.index(("in", 1)) < server.events.index(("out", 0))  # other keys' did not wait


@pytest.fixture
def checking_broker() -> Iterator[tuple[ScriptedServer, list[dict[str, Any]]]]:
    """A fake broker that answers a producer's heartbeat, then asks it back about one half message of
    attempt ``a1`` (checked twice before), and notes every request it gets."""
    seen: list[dict[str, Any]] = []
    body = stored_message(0, 7, b"v", "UNIQ_KEY\x01U7\x02PGROUP\x01rstream-txn\x02RSTREAM_TXN\x01a1\x02"
                          "TRANSACTION_CHECK_TIMES\x012\x02REAL_TOPIC\x01out\x02")

    def answer(header: dict[str, Any]) -> bytes:
        seen.append(header)
        if header["code"] != HEART_BEAT:
            return b""
        check = frame({"code": CHECK_TRANSACTION_STATE, "opaque": 99, "flag": 2, "extFields": {
            "topic": "RMQ_SYS_TRANS_HALF_TOPIC", "tranStateTableOffset": "7", "commitLogOffset": "4242",
            "msgId": "U7", "transactionId": "U7", "offsetMsgId": "7F00000100002A9F0000000000001092"}}, body)
        return answer_to(header) + check

    server = ScriptedServer(answer)
    yield server, seen
    server.close()


def test_a_producer_channel_heartbeats_is_asked_back_and_answers_oneway(
        checking_broker: tuple[ScriptedServer, list[dict[str, Any]]]) -> None:
    server, seen = checking_broker
    channel = ProducerChannel(server.addr, TXN_GROUP, "host@1@rstream-x")
    try:
        check = channel.next_check(5.0)
        assert check is not None
        assert check.half == HalfMessage(4242, 7, "U7") and check.producer_group == TXN_GROUP
        assert parse_properties(check.properties_text)["RSTREAM_TXN"] == "a1"
        channel.answer(check, False)
        channel.answer(check, None)  # unknown: nothing sent, the broker asks again
        deadline = time.monotonic() + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        channel.close()
    beat, end = seen
    assert beat["code"] == HEART_BEAT
    assert end["code"] == END_TRANSACTION and end["flag"] == 2
    assert end["extFields"] == {"topic": "RMQ_SYS_TRANS_HALF_TOPIC", "producerGroup": TXN_GROUP,
                                "tranStateTableOffset": "7", "commitLogOffset": "4242", "commitOrRollback": "12",
                                "fromTransactionCheck": "true", "msgId": "U7", "transactionId": "U7"}
    assert len(seen) == 2


class FakeReader:
    """What ``CheckAnswerer`` asks of its copy of the broker, over a ``_Log`` held here: the log read, an
    entry appended (read at once), whether an attempt is overdue, the broker's ``transactionCheckMax``."""

    txn_timeout_ms = 300_000

    def __init__(self, log: _Log, overdue: bool = False) -> None:
        self.log, self.overdue, self.appended = log, overdue, []  # type: ignore[var-annotated]
        self.queues: dict[tuple[str, str, int], list[PulledMessage]] = {}  # (broker, topic, queue id) -> messages
        self.pulls: list[int] = []  # the offsets pulled from

    def _pull(self, broker: str, topic: str, queue_id: int, offset: int, n: int, what: str) -> Any:
        self.pulls.append(offset)
        held = self.queues.get((broker, topic, queue_id), [])
        got = held[offset:offset + n]
        return got, offset + len(got), len(held)

    def _refresh(self) -> _Log:
        return self.log

    def _log_append(self, entry: dict[str, Any]) -> int:
        self.appended.append(entry)
        read(self.log, entry, step_ms=self.txn_timeout_ms)  # stored that much later than what came before
        return self.log.next_offset - 1

    def _overdue(self, log: _Log, attempt: str, open_ms: int) -> bool:
        return self.overdue

    def _at(self, broker: str, call: Any) -> dict[str, str]:
        return {"transactionCheckMax": "15"}

    @property
    def _client(self) -> Any:
        return type("C", (), {"broker_config": None})()


def check_of(attempt: str, topic: str = "sink", checked: int = 1, at: int | None = None, seq: int | None = None) -> Any:
    from rstream.rocketmq.remoting import TransactionCheck

    text = f"RSTREAM_TXN\x01{attempt}\x02REAL_TOPIC\x01{topic}\x02TRANSACTION_CHECK_TIMES\x01{checked}\x02"
    if at is not None:
        text += f"REAL_QID\x010\x02RSTREAM_AT\x01{at}\x02RSTREAM_SEQ\x01{seq}\x02"
    return TransactionCheck("RMQ_SYS_TRANS_HALF_TOPIC", HalfMessage(1, 1, "U"), TXN_GROUP, text)


def answerer_over(reader: FakeReader) -> Any:
    from rstream.rocketmq.visible import CheckAnswerer

    made = CheckAnswerer.__new__(CheckAnswerer)
    made._reader, made._lock, made._check_max, made._known, made._copies = reader, threading.Lock(), {}, {}, {}
    made.answers = __import__("collections").deque()
    return made


def test_a_message_whose_committed_copy_its_queue_holds_is_rolled_back_not_committed_twice() -> None:
    """A broker that died after it committed a half message, before it marked it ended, asks about it again
    (seen on the two-broker cluster: 18 of 360 counts twice): the answerer finds the message's copy in its
    queue, after the queue's end its attempt noted (``RSTREAM_AT``), by attempt and place (``RSTREAM_SEQ``),
    and rolls the half message back; one not there yet is committed; a queue is read on from where the last
    look ended."""
    log = read(_Log(), {"t": "topic", "topic": "sink", "compact": False, "queues": [["broker-a", 0]]},
               {"t": "open", "a": "won", "range": ["j", "in", 0, 0], "at": {}, "half": ["sink/0"]},
               {"t": "commit", "a": "won", "range": ["j", "in", 0, 0], "out": {}, "tag": tag("j", 0)})
    reader = FakeReader(log)

    def copy(offset: int, attempt: str, seq: int) -> PulledMessage:
        return PulledMessage(0, offset, 0, 0, b"w:1", f"RSTREAM_TXN\x01{attempt}\x02RSTREAM_SEQ\x01{seq}\x02TRAN_MSG\x01true\x02")

    queue = reader.queues[("broker-a", "sink", 0)] = [copy(0, "won", 1), *(copy(i, "older", i) for i in range(1, 40))]
    queue += [copy(40, "won", 0), copy(41, "other", 1)]
    answerer = answerer_over(reader)
    assert answerer.decide("broker-a", check_of("won", at=40, seq=0)) is False  # committed already
    assert answerer.decide("broker-a", check_of("won", at=40, seq=1)) is True  # another attempt's 1; its own below 40
    assert reader.pulls == [40, 42]  # from RSTREAM_AT to the end once; the second check read on from there
    queue.append(copy(42, "won", 1))  # the broker committed it as answered
    assert answerer.decide("broker-a", check_of("won", at=40, seq=1)) is False  # asked again: there now
    assert answerer.decide("broker-a", check_of("won")) is True  # an older rstream's message: as before
    assert answerer.decide("broker-b", check_of("won", at=0, seq=0)) is True  # another broker's queue: empty
    assert list(answerer.answers) == [("won", False), ("won", True), ("won", False), ("won", True), ("won", True)]


def test_the_answerer_gives_up_on_an_attempt_before_the_broker_would_discard_its_messages() -> None:
    """An undecided attempt is left to the next round, until it is overdue (aborted as a reader aborts it,
    after ``txn_timeout_ms``) or its messages were checked one time short of ``transactionCheckMax`` (aborted
    at once: the broker would discard them, a commit after that would show nothing); a committed attempt's
    message of a topic deleted since is rolled back."""
    log = read(_Log(), {"t": "topic", "topic": "sink", "compact": False, "queues": [["broker-a", 0]]},
               {"t": "open", "a": "slow", "range": ["j", "in", 0, 0], "at": {}, "half": ["sink/0"]},
               {"t": "open", "a": "won", "range": ["j", "in", 0, 1], "at": {}, "half": ["gone/0"]},
               {"t": "commit", "a": "won", "range": ["j", "in", 0, 1], "out": {}, "tag": tag("j", 1)})
    reader = FakeReader(log)
    answerer = answerer_over(reader)
    assert answerer.decide("broker-a", check_of("slow", checked=13)) is None and reader.appended == []
    assert answerer.decide("broker-a", check_of("won", topic="gone")) is False  # its topic is gone
    assert answerer.decide("broker-a", check_of("slow", checked=14)) is False
    assert reader.appended == [{"t": "abort", "a": "slow", "after": 0}]
    assert answerer.decide("broker-a", check_of("slow", checked=15)) is False  # decided: no second abort
    assert len(reader.appended) == 1

    log = read(_Log(), {"t": "topic", "topic": "sink", "compact": False, "queues": [["broker-a", 0]]},
               {"t": "open", "a": "stale", "range": ["j", "in", 0, 0], "at": {}, "half": ["sink/0"]})
    late = FakeReader(log, overdue=True)
    assert answerer_over(late).decide("broker-a", check_of("stale")) is False
    assert late.appended == [{"t": "abort", "a": "stale", "after": 300_000}]
