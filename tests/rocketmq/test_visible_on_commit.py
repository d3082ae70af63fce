"""A sink made visible on commit, on the session's RocketMQ, read by the official client's ``SimpleConsumer``
and by Java's push consumers (RocketMQ's own ``DefaultMQPushConsumer`` and the official gRPC client's
``PushConsumer``): each committed record once, never
one of an attempt that lost, also when its writer died and RocketMQ's check-back decided
(``rstream.rocketmq.visible``); a writer that lost its race rolls its half messages back itself; and a
job's progress as consumer group ``rstream-<job>``, as ``mqadmin consumerProgress`` shows it.

The word count of ``crashed_twice`` writes its counts with ``visible="on_commit"``; two of its writers are
SIGKILLed by a hook, one as it is about to append the commit of the count stage (its half messages sent: the
attempt then loses to the rerun's), one just after that commit, before it ends its half messages (the attempt
won: only the check-back can show them). This process answers the check-backs (``CheckAnswerer``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rstream.broker.base import CommitTag
from rstream.broker.batch import OnCommitRecords
from rstream.rocketmq import LocalRocketMQ, RocketMQBroker, remoting
from rstream.rocketmq.broker import progress_group
from rstream.rocketmq.local import default_lib, find_java
from rstream.rocketmq.official import consume
from rstream.rocketmq.remoting import END_TRANSACTION
from rstream.runtime.inprocess import InProcessJob
from tests.support.jobs import wordcount
from tests.support.rocketmq import grpc_push_consume, max_offset, push_consume

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]

#: ``python -c WRITER_DIES <namesrv> commit|end <job> <source> <sink> <job dir>``: the on-commit word count run
#: until idle by a writer SIGKILLed at the commit of its first append with half messages (``commit``), or
#: right after that commit, before it ends them (``end``); it prints that attempt's id and how many half
#: messages it sent. They are asked back ``CHECK_AFTER_S`` after they were sent.
WRITER_DIES = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from rstream.rocketmq import RocketMQBroker
    from rstream.runtime.inprocess import InProcessJob
    from tests.support.jobs import wordcount
    namesrv, point, job, source, sink, job_dir = sys.argv[1:7]
    broker = RocketMQBroker(namesrv, check_after_s=4)
    sent = {}
    log_append, send_half, end_halves = broker._log_append, broker._send_half, broker._end_halves
    def dying_append(entry, wait=True):
        if point == "commit" and entry["t"] == "commit" and entry["a"] in sent:
            print(entry["a"], sent[entry["a"]], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return log_append(entry, wait)
    def counting_send(topic, queue, records, attempt, out):
        send_half(topic, queue, records, attempt, out)
        sent[attempt] = sent.get(attempt, 0) + len(out)
    def dying_end(targets, writes, halves, attempt, commit):
        if point == "end" and commit and attempt in sent:
            print(attempt, sent[attempt], flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return end_halves(targets, writes, halves, attempt, commit)
    broker._log_append, broker._send_half, broker._end_halves = dying_append, counting_send, dying_end
    job = InProcessJob(wordcount(job, source, sink, visible="on_commit").build(), broker, Path(job_dir), {"sink_queues": 2})
    job.run_until_idle(fire_idle=False)
""")


def writer_dies(namesrv: str, point: str, *args: str) -> tuple[str, int]:
    """Run ``WRITER_DIES``; the attempt it left and how many half messages it sent."""
    done = subprocess.run([sys.executable, "-c", WRITER_DIES, namesrv, point, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr  # SIGKILLed by itself
    attempt, sent = done.stdout.split()
    return attempt, int(sent)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_for(what: str, ready: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.1)


class Crashed:
    """What ``crashed_twice`` did: the job, its topics, what it read and the two attempts its writers left."""

    def __init__(self, broker: RocketMQBroker, name: str, source: str, sink: str, sentences: list[str], first: int,
                 lost: tuple[str, int], won: tuple[str, int], answerer: Any) -> None:
        self.broker, self.name, self.source, self.sink, self.sentences = broker, name, source, sink, sentences
        self.first, self.lost, self.won, self.answerer = first, lost, won, answerer


@pytest.fixture(scope="module")
def crashed_twice(local_rocketmq: LocalRocketMQ, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crashed]:
    broker = local_rocketmq.broker()
    answerer = broker.answer_checks()  # this process answers the check-backs
    source, sink, name = unique("sentences"), unique("visible-counts"), unique("visible")
    job_dir = tmp_path_factory.mktemp("visible") / "job"
    broker.create_topic(source, queues=2)
    first = [f"w{i % 7} w{i % 3} w{i % 5}" for i in range(30)]
    broker.send_batch(source, first)
    args = (name, source, sink, str(job_dir))
    lost = writer_dies(local_rocketmq.namesrv, "commit", *args)  # its count stage's half messages sent, then killed
    InProcessJob(wordcount(name, source, sink, "on_commit").build(), broker, job_dir,
                 {"sink_queues": 2}).run_until_idle(fire_idle=False)  # runs that range again: its commit wins
    second = [f"w{i % 4} w{i % 6}" for i in range(20)]
    broker.send_batch(source, second)
    won = writer_dies(local_rocketmq.namesrv, "end", *args)  # committed, its half messages never ended by it
    InProcessJob(wordcount(name, source, sink, "on_commit").build(), broker, job_dir,
                 {"sink_queues": 2}).run_until_idle(fire_idle=False)  # the ranges it left: that one committed
    yield Crashed(broker, name, source, sink, first + second, len(first), lost, won, answerer)
    for topic in broker.topics():
        if topic.name.startswith((source, sink, name)):
            broker.delete_topic(topic.name)
    broker.close()


def test_the_official_consumer_sees_each_committed_record_once_and_none_of_an_attempt_that_lost(
        local_rocketmq: LocalRocketMQ, crashed_twice: Crashed) -> None:
    """The check-back rolls back the half messages of the attempt that lost and commits those of the one
    that won (its writer dead): then the sink's queues hold every count once, and the official consumer
    receives exactly what rstream reads; each word's counts 1..n once, the first batch's in order."""
    job = crashed_twice
    log = job.broker._refresh()
    (lost, lost_sent), (won, won_sent) = job.lost, job.won
    assert log.decided[lost] is False and log.decided[won] is True and lost_sent > 0 and won_sent > 0

    def answered(attempt: str, answer: bool) -> int:
        return sum(1 for a, said in list(job.answerer.answers) if a == attempt and said is answer)

    wait_for("the broker asked back every half message of both attempts, and rstream answered from its log",
             lambda: answered(lost, False) >= lost_sent and answered(won, True) >= won_sent)
    assert answered(lost, True) == 0 and answered(won, False) == 0
    words = Counter(w for s in job.sentences for w in s.split())
    wait_for("every committed count stored in the sink's queues",
             lambda: sum(max_offset(local_rocketmq.broker_addr, job.sink, q) for q in range(2)) >= sum(words.values()))
    stored = sum(max_offset(local_rocketmq.broker_addr, job.sink, q) for q in range(2))
    assert stored == sum(words.values())  # no message of the lost attempt in any queue: nobody can see one

    committed = job.broker.read(job.sink)
    got = consume(local_rocketmq.proxy, job.sink, unique("official-group"), stored, timeout=60)
    assert len(got) == stored
    assert Counter((next(iter(m.keys)), m.body) for m in got) == Counter((m.key, m.body) for m in committed)
    counts: dict[str, list[int]] = {}
    for message in sorted(committed, key=lambda m: (m.queue_id, m.offset)):
        word, _, count = message.body.decode().rpartition(":")
        counts.setdefault(word, []).append(int(count))
    firsts = Counter(w for s in job.sentences[:job.first] for w in s.split())
    assert {w: sorted(c) for w, c in counts.items()} == {w: list(range(1, n + 1)) for w, n in words.items()}
    # committed by the writer, in each key's order; the check-back's commits keep no order (RocketMQ's own)
    assert {w: c[:firsts[w]] for w, c in counts.items()} == {w: list(range(1, firsts[w] + 1)) for w in counts}


@pytest.mark.parametrize("client", ["remoting", "grpc"])
def test_javas_push_consumer_sees_each_committed_record_once_and_none_of_an_attempt_that_lost(
        local_rocketmq: LocalRocketMQ, crashed_twice: Crashed, tmp_path: Path, client: str) -> None:
    """Java's push consumers, each a new group reading from the first offset: RocketMQ's own
    ``DefaultMQPushConsumer`` (``remoting``, from the name server) and the official gRPC client's
    ``PushConsumer`` (``grpc``, rocketmq-client-java, through the proxy). Each committed count delivered
    once (by the remoting client, as a committed transactional message), the same records rstream reads;
    none of the attempt that lost (its writer killed before the commit), all of the one that won (its
    writer killed after the commit: the check-back committed them)."""
    job = crashed_twice
    words = Counter(w for s in job.sentences for w in s.split())
    wait_for("every committed count stored in the sink's queues", lambda: sum(
        max_offset(local_rocketmq.broker_addr, job.sink, q) for q in range(2)) >= sum(words.values()))
    if client == "remoting":
        got = push_consume(local_rocketmq.namesrv, job.sink, sum(words.values()), tmp_path / "java-logs")
        assert all(d.transactional for d in got)  # through half messages, committed
    else:  # the gRPC client's MessageView does not say whether a message was transactional
        got = grpc_push_consume(local_rocketmq.proxy, job.sink, sum(words.values()), tmp_path / "java-logs")
    assert Counter((d.broker, d.queue_id, d.offset) for d in got).most_common(1)[0][1] == 1  # each delivered once
    assert len(got) == sum(words.values())  # and nothing else, lingering a second after the last
    committed = job.broker.read(job.sink)
    assert Counter((d.keys, d.body) for d in got) == Counter((m.key, m.body) for m in committed)
    counts: dict[str, list[int]] = {}
    for d in got:
        word, _, count = d.body.decode().rpartition(":")
        assert d.keys == word
        counts.setdefault(word, []).append(int(count))
    assert {w: sorted(c) for w, c in counts.items()} == {w: list(range(1, n + 1)) for w, n in words.items()}


def test_the_jobs_progress_is_its_consumer_groups_offsets_as_mqadmin_shows_them(
        local_rocketmq: LocalRocketMQ, crashed_twice: Crashed) -> None:
    """Group ``rstream-<job>``'s offset of each input queue (source and shuffle) is its last committed end, as
    the broker answers ``GET_CONSUME_STATS``; input sent since shows as lag in ``mqadmin consumerProgress``."""
    job = crashed_twice
    group = progress_group(job.name)
    shuffle = f"{job.name}-ROCKETMQ-COUNT-4-shuffleTopic"
    ends = {}
    for topic, queues in ((job.source, 2), (shuffle, 3)):
        for q in range(queues):
            last = job.broker.last_commit(job.name, topic, q)
            assert last is not None
            # RocketMQ's own offsets: a packed shuffle topic's hold 4096 record offsets a message
            ends[(topic, q)] = -(-last.end_offset >> job.broker._get(topic).shift)
    client = job.broker._client
    stats = client.consume_stats(local_rocketmq.broker_addr, group)
    assert {where: offsets[1] for where, offsets in stats.items()} == ends
    assert all(broker_end == consumer for broker_end, consumer in stats.values())  # nothing left to read
    job.broker.send_batch(job.source, ["late input"] * 6, queue=1)
    java, lib = find_java(), default_lib()
    if not (lib / "rocketmq-tools-5.3.3.jar").exists():
        pytest.skip(f"mqadmin's jar is not in {lib}")
    shown = subprocess.run([java, "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{lib}/*",
                            "org.apache.rocketmq.tools.command.MQAdminStartup", "consumerProgress", "-g", group,
                            "-n", local_rocketmq.namesrv], capture_output=True, text=True, timeout=120)
    rows = {(cols[0], int(cols[2])): (int(cols[3]), int(cols[4]), int(cols[5]))
            for cols in (line.split() for line in shown.stdout.splitlines()) if len(cols) >= 6 and cols[2].isdigit()}
    assert rows[(job.source, 0)] == (ends[(job.source, 0)], ends[(job.source, 0)], 0), shown.stdout + shown.stderr
    assert rows[(job.source, 1)] == (ends[(job.source, 1)] + 6, ends[(job.source, 1)], 6)
    assert "Consume Diff Total: 6" in shown.stdout


def test_a_writer_that_lost_its_race_rolls_its_half_messages_back_itself(local_rocketmq: LocalRocketMQ,
                                                                           rocket_broker: RocketMQBroker) -> None:
    """Two writers of one range: the second commits while the first is between its half messages and its
    commit; the first's commit loses, and it rolls its half messages back at once (no check-back): the queue
    only ever holds the winner's records, in order."""
    topic, job = unique("raced"), unique("job")
    rocket_broker.create_topic(topic, queues=1)
    slow, fast = local_rocketmq.broker(), local_rocketmq.broker()
    tag = CommitTag(job, "input", 0, 0, 3)

    def records(who: str) -> dict[tuple[str, int], OnCommitRecords]:
        out = OnCommitRecords()
        for i in range(3):
            out.append((f"k{i % 2}", f"{who}{i}".encode(), i, None, None))
        return {(topic, 0): out}

    log_append = slow._log_append
    raced: list[str] = []

    def racing(entry: dict[str, Any], wait: bool = True) -> int:
        if entry["t"] == "commit" and not raced:
            raced.append(entry["a"])
            assert max_offset(local_rocketmq.broker_addr, topic, 0) == 0  # its records: half messages only
            assert fast.append(records("fast"), tag) is True
        return log_append(entry, wait)

    slow._log_append = racing  # type: ignore[method-assign]
    ends = remoting.REQUESTS[END_TRANSACTION]
    assert slow.append(records("slow"), tag) is False
    assert rocket_broker._refresh().decided[raced[0]] is False
    assert remoting.REQUESTS[END_TRANSACTION] - ends == 6  # the winner's 3 commits, the loser's 3 rollbacks
    # the winner's records, each key's in order (the broker ends transactions on several threads: only a
    # key's records wait for each other)
    read = [(m.key, m.body) for m in rocket_broker.read(topic)]
    assert sorted(body for _key, body in read) == [b"fast0", b"fast1", b"fast2"]
    assert [body for key, body in read if key in ("k0", b"k0")] == [b"fast0", b"fast2"]
    assert max_offset(local_rocketmq.broker_addr, topic, 0) == 3  # nothing else, for any consumer
    slow.close()
    fast.close()


def test_the_same_job_on_the_embedded_broker_commits_its_on_commit_sink_as_any_other(tmp_path: Path) -> None:
    from rstream.broker.embedded import EmbeddedBroker
    from tests.support.jobs import assert_exact_counts

    broker = EmbeddedBroker(tmp_path / "broker.db")
    broker.create_topic("sentences", queues=2)
    sentences = [f"a b {i % 3}" for i in range(12)]
    broker.send_batch("sentences", sentences)
    InProcessJob(wordcount("emb", visible="on_commit").build(), broker, tmp_path / "job").run_until_idle()
    assert_exact_counts(broker, "counts", sentences)
    shutil.rmtree(tmp_path / "job")


def test_a_trace_follows_a_record_to_its_on_commit_sink_messages_without_their_offsets(
        crashed_twice: Crashed, tmp_path: Path) -> None:
    """A commit tag cannot say where an on-commit sink's records went (RocketMQ gave them their offsets when
    it committed them, after the tag): a trace still finds each of the record's counts, without an offset and
    saying why, and re-executing the ranges gives what they committed everywhere else (``exact``)."""
    from rstream.runtime.job_core import JobCore
    from rstream.runtime.job_progress import ProgressLog
    from rstream.runtime.trace import Tracer

    job = crashed_twice
    core = JobCore.of(wordcount(job.name, job.source, job.sink, "on_commit").build(),
                      {"job_dir": str(tmp_path / "job"), "sink_queues": 2}, job.broker)
    trace = Tracer(core, ProgressLog(core)).trace(job.source, 0, 0)  # what job.trace(...) does, without Spark
    hops = trace.to_pandas()
    sunk = hops[hops["kind"] == "sink"]
    first = job.broker.read(job.source, 0, 0, 1)[0].body.decode()
    assert trace.exact
    assert sorted(v.split(":")[0] for v in sunk["value"]) == sorted(first.split())
    assert list(sunk["offset"]) == [None] * len(sunk)
    assert all("visible on commit" in note for note in sunk["note"])
    assert hops[hops["kind"] == "shuffle"]["offset"].notna().all()  # the other outputs' offsets, as ever
