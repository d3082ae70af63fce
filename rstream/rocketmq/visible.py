"""Records visible on commit, for every consumer: RocketMQ's half messages, decided by rstream's decision log.

A sink made with ``visible="on_commit"`` hands its records to ``RocketMQBroker.append`` as
``OnCommitRecords``. There, each is sent as a *half* message (``Client.send_half``: RocketMQ keeps it in
its half topic, where no consumer sees it) before the append's commit record; once the decision log
says the attempt won, the writer commits each (``END_TRANSACTION``: the broker then writes it to its
queue, where every consumer, rstream's or another client's, reads it); an attempt that lost rolls them
back. So rstream's log stays the one decision, and RocketMQ's transaction is only how its records are
shown.

A writer that dies between its half messages and their end leaves them to RocketMQ's check-back: every
``transactionCheckInterval`` the broker asks a producer of the message's group (``CHECK_TRANSACTION_STATE``,
to a channel registered by ``HEART_BEAT``) about each half message older than ``transactionTimeOut``.
Any rstream process may answer, since the answer is in the log every process reads: ``CheckAnswerer``
(one per process and cluster) is a producer of ``TXN_GROUP`` on every master and answers from the log
(``verdict``): a committed attempt's message is committed (unless its queue holds it already: a broker
that died before it marked a commit asks again, ``CheckAnswerer._stored``), a lost one's rolled back, an
undecided one's left for the next round, unless it is overdue (``txn_timeout_ms``, as a reader gives up on it) or the
broker is about to give up on the message (``transactionCheckMax`` checks: it would then discard it, a
committed record lost for every consumer): then it aborts the attempt in the log first. The processes
that answer: each that wrote half messages (from its first such append on), and the driver of a job
with an on-commit sink (``prepare_topics``), while they live.

What an on-commit sink changes for rstream's own readers: nothing they read is different (a queue holds
committed records only, as always), but a record's offset is given when its message is committed, after
the decision: a commit tag's ``outputs`` cannot name where an on-commit queue's records went, so a
record's trace shows its on-commit sink messages without offsets. The writer's ``append`` returns once its
records are readable (it reads them back), so a finished job's output reads whole at once.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from rstream.rocketmq.remoting import ProducerChannel, RemotingError, TransactionCheck, parse_properties

if TYPE_CHECKING:
    from rstream.rocketmq.broker import RocketMQBroker, _Log

#: The producer group of every half message rstream sends: any rstream process of the cluster answers its
#: check-backs (the answer is in the decision log they all read).
TXN_GROUP = "rstream-txn"
#: Where the answerer says what it did (a check answered, a broker it cannot reach).
LOG = logging.getLogger("rstream.rocketmq")
_MASTERS_EVERY_S = 30.0  # how often the answerer looks for masters it has no channel to
_RETRY_S = 5.0  # how long a broker's channel waits before it connects again after a failure


def verdict(log: _Log, attempt: str | None) -> bool | None:
    """What the decision log ``log`` says of the half messages of ``attempt``: True (commit them: the
    attempt won), False (roll them back: it lost), None (it is undecided, or the message is none of
    rstream's: leave it for the broker's next round).

    An attempt the log does not know is one it committed and then forgot at a checkpoint (a checkpoint
    names no committed attempt); lost attempts that sent half messages it keeps (their ``half`` queues
    have no end, which ``_forget_lost`` never forgets), and an attempt's open record is readable before
    its first half message is sent, so no undecided attempt is unknown."""
    if attempt is None or attempt in log.undecided:
        return None
    decided = log.decided.get(attempt)
    if decided is not None:
        return decided
    return attempt not in log.lost


class CheckAnswerer:
    """Answers RocketMQ's check-backs of rstream's half messages from the decision log: one thread per
    master of the cluster, each a ``ProducerChannel`` of ``TXN_GROUP``; the decisions are read by a copy of
    ``broker`` (its own connections and log), one check at a time. ``answer_for(broker)`` starts one per
    process and cluster."""

    def __init__(self, broker: RocketMQBroker) -> None:
        self._reader: RocketMQBroker = pickle.loads(pickle.dumps(broker))
        self.pid = os.getpid()
        self._client_id = f"{socket.gethostname()}@{self.pid}@rstream-{uuid.uuid4().hex[:8]}"
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._stop = threading.Event()
        self._check_max: dict[str, int] = {}
        self._known: dict[tuple[str, str | None], bool] = {}  # (attempt, topic) -> its verdict, once decided
        # (broker, topic, queue id, attempt) -> the HALF_SEQ of its committed copies found, and where the look ended
        self._copies: dict[tuple[str, str, int, str], tuple[set[str], int]] = {}
        #: The answers given, newest last: (attempt, True / False / None), the last 100 000.
        self.answers: collections.deque[tuple[str | None, bool | None]] = collections.deque(maxlen=100_000)
        self._looked = 0.0

    def start(self) -> CheckAnswerer:
        self._look_for_masters()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in list(self._threads.values()):
            thread.join(timeout=5)

    def _look_for_masters(self) -> None:
        self._looked = time.monotonic()
        try:
            masters = self._reader.masters()
        except RemotingError as exc:
            LOG.debug("rstream's check-back answerer cannot list the masters: %s", exc)
            return
        with self._lock:
            for name, addr in masters.items():
                if name not in self._threads:
                    thread = threading.Thread(target=self._serve, args=(name, addr), daemon=True,
                                              name=f"rstream-check-back-{name}")
                    self._threads[name] = thread
                    thread.start()

    @property
    def _first(self) -> str:
        """The broker whose thread looks for new masters now and then."""
        with self._lock:
            return min(self._threads)

    def _serve(self, name: str, addr: str) -> None:
        while not self._stop.is_set():
            channel = ProducerChannel(addr, TXN_GROUP, self._client_id, self._reader.timeout,
                                      self._reader._client.credentials, self._reader.tls)
            try:
                while not self._stop.is_set():
                    check = channel.next_check(1.0)
                    if check is not None:
                        channel.answer(check, self.decide(name, check))
                    if name == self._first and time.monotonic() - self._looked > _MASTERS_EVERY_S:
                        self._look_for_masters()
            except (OSError, RemotingError) as exc:
                LOG.debug("rstream's check-back channel to %s (%s) broke: %s", name, addr, exc)
            finally:
                channel.close()
            if self._stop.wait(_RETRY_S):
                return
            found = self._reader._addrs.get(name)
            try:
                found = self._reader.masters().get(name, found)
            except RemotingError:
                pass
            addr = found or addr

    def decide(self, broker: str, check: TransactionCheck) -> bool | None:
        """The answer to ``check`` (``verdict``), aborting its attempt first when it is overdue or the
        broker is about to discard the message (``transactionCheckMax``)."""
        props = parse_properties(check.properties_text)
        attempt = props.get("RSTREAM_TXN")
        checked = int(props.get("TRANSACTION_CHECK_TIMES", "0") or 0)
        topic = props.get("REAL_TOPIC")
        known = self._known.get((attempt, topic)) if attempt is not None else None
        if known is not None:  # decided once, decided for ever: no read of the log for a burst of checks
            answer: bool | None = known
        else:
            answer = self._from_log(broker, attempt, topic, checked)
        if answer and attempt is not None and topic is not None and self._stored(broker, topic, attempt, props):
            answer = False  # its copy is in the queue already: end the half message without a second one
        self.answers.append((attempt, answer))
        return answer

    def _from_log(self, broker: str, attempt: str | None, topic: str | None, checked: int) -> bool | None:
        with self._lock:
            reader = self._reader
            log = reader._refresh()
            answer = verdict(log, attempt)
            if answer and topic not in log.numbering:
                answer = False  # its topic was deleted since (the log forgot the attempt with it): not to come back
            if answer is None and attempt is not None and attempt in log.undecided:
                near_max = checked >= self._max_checks(broker) - 1
                if near_max or reader._overdue(log, attempt, log.undecided[attempt][0]):
                    reader._log_append({"t": "abort", "a": attempt, "after": 0 if near_max else reader.txn_timeout_ms})
                    answer = verdict(reader._refresh(), attempt)
        if answer is not None and attempt is not None:
            if len(self._known) > 100_000:
                self._known.clear()
            self._known[(attempt, topic)] = answer
        return answer

    def _stored(self, broker: str, topic: str, attempt: str, props: dict[str, str]) -> bool:
        """Whether the queue of a half message of ``attempt`` already holds its committed copy. A broker asks
        about a message it committed again when it died before it marked it ended (RocketMQ writes those marks
        a moment later, ``transactionOpBatchInterval``, and a writer's commit whose answer a crash cut off is
        such a message too): committed again, it would be in the queue twice. Its copies lie after ``HALF_AT``
        (the queue's end before the attempt sent it), named by the attempt and ``HALF_SEQ``; what a queue
        holds of an attempt is read once and then on from where it was read to. A message without these
        properties (an older rstream's) is taken as not committed."""
        from rstream.rocketmq.broker import _PULL, _TXN, HALF_AT, HALF_SEQ

        try:
            queue_id, low, seq = int(props["REAL_QID"]), int(props[HALF_AT]), props[HALF_SEQ]
        except (KeyError, ValueError):
            return False
        where = (broker, topic, queue_id, attempt)
        with self._lock:
            seen, at = self._copies.get(where, (set(), low))
            while True:
                messages, after, end = self._reader._pull(broker, topic, queue_id, at, _PULL,
                                                           f"look for the committed records of {topic} in queue {queue_id}")
                for message in messages:
                    found = parse_properties(message.properties_text)
                    if found.get(_TXN) == attempt and HALF_SEQ in found:
                        seen.add(found[HALF_SEQ])
                done = not messages or after <= at or 0 <= end <= after
                at = max(at, after)
                if done:
                    break
            if len(self._copies) > 10_000:
                self._copies.clear()
            self._copies[where] = (seen, at)
        return seq in seen

    def _max_checks(self, broker: str) -> int:
        if broker not in self._check_max:
            try:
                config = self._reader._at(broker, self._reader._client.broker_config)
                self._check_max[broker] = int(config.get("transactionCheckMax") or 15)
            except (RemotingError, ValueError):
                return 15  # RocketMQ's default
        return self._check_max[broker]


_ANSWERERS: dict[tuple[str, Any], CheckAnswerer] = {}
_STARTING = threading.Lock()


def answer_for(broker: RocketMQBroker) -> CheckAnswerer:
    """This process's ``CheckAnswerer`` of ``broker``'s cluster (and user), started if it has none."""
    key = (broker.namesrv, broker.access_key)
    with _STARTING:
        found = _ANSWERERS.get(key)
        if found is None or found._stop.is_set() or found.pid != os.getpid():  # a forked child has no threads
            found = _ANSWERERS[key] = CheckAnswerer(broker).start()
        return found


def stop_answering(namesrv: str | None = None) -> None:
    """Stop this process's answerers (of the cluster of ``namesrv``, or all): their channels close, and the
    brokers send their check-backs to other rstream processes."""
    with _STARTING:
        for key in [k for k in _ANSWERERS if namesrv is None or k[0] == namesrv]:
            _ANSWERERS.pop(key).stop()
