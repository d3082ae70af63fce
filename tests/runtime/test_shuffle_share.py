"""The shuffle side run by a batch's source tasks (``run_with_share``): each task waits until every
source range of the batch is committed, then runs its bin of the shuffle queues; a task that waits
in vain leaves its bin to the driver's second job. Counts are exact either way, and no shuffle range
runs twice."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, StreamBuilder, TextDeserializer, TextSerializer, Time, TumblingWindow
from rstream.broker.base import BrokerError
from rstream.broker.embedded import broker as embedded_broker
from rstream.processors.rewrites import ALL, SHUFFLE_IN_SOURCE
from rstream.runtime import config, job_query, queue_run, shuffle_share
from rstream.runtime.commit import run_partition
from rstream.runtime.config import dump_blob
from rstream.runtime.planning import plan_tasks, shuffle_ranges
from rstream.runtime.shuffle_share import run_with_share
from rstream.runtime.topics import task_config
from rstream.settings import JobProperties
from tests.support.jobs import assert_exact_counts, job_id, wordcount
from tests.support.joins import emitted, events, join_job, windowed_pairs
from tests.support.reference import split_late, window_frame
from tests.support.windows import EXACT, LATENESS, clicks, produce, results, windowed

SENTENCES = [f"w{i % 7} w{i % 3} w{i % 11} w{(i * 5) % 13}" for i in range(120)]


def _setup(broker: EmbeddedBroker, tmp_path: Path) -> tuple[str, str, list[list[list[Any]]], dict[str, Any]]:
    """A word count's task blob, its shuffle topic, two source tasks' ranges and the share's plan,
    as the planner (``RStreamStreamReader.partitions``) makes them for batch 0."""
    broker.create_topic("sentences", queues=4)
    broker.send_batch("sentences", SENTENCES)
    topology = wordcount(job_id("share")).build()
    cfg = task_config(topology, broker, JobProperties(), tmp_path / "state")
    shuffle = next(iter(topology.shuffle_topics))
    assert topology.shuffles_after_sources == [shuffle]
    ranges = [["sentences", q, 0, end, 0] for q, end in enumerate(broker.end_offsets("sentences"))]
    groups = plan_tasks(ranges, 2)
    plan = {"count": len(groups), "barrier": ranges, "batch": 0, "max_per_queue": 1_000_000,
            "begins": {f"{shuffle}/{q}": 0 for q in range(topology.shuffle_topics[shuffle])}}
    return dump_blob(cfg), shuffle, groups, plan


def _shuffle_tags(broker: EmbeddedBroker, job: str, shuffle: str) -> list[tuple[int, int, int]]:
    return sorted((t.queue, t.start_offset, t.end_offset) for t in broker.commits(job) if t.topic == shuffle)


def test_both_tasks_run_their_bins_once_the_batch_is_committed(broker: EmbeddedBroker, tmp_path: Path) -> None:
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    rows: list[list[Any]] = [[], []]

    def run(i: int) -> None:
        rows[i] = run_with_share(blob, groups[i], {**plan, "index": i})

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert_exact_counts(broker, "counts", SENTENCES)
    ends = broker.end_offsets(shuffle)
    # every shuffle queue that got records ran once, from 0 to its end, in one of the two tasks
    assert _shuffle_tags(broker, job, shuffle) == [(q, 0, end) for q, end in enumerate(ends) if end]
    ran = [[(r[0], r[1]) for r in task_rows if r[0] == shuffle] for task_rows in rows]
    assert ran[0] and ran[1] and not set(ran[0]) & set(ran[1])
    assert shuffle_ranges(broker, job, [shuffle], 1_000_000, 1) == []  # the driver finds nothing left


def test_a_task_that_waits_in_vain_leaves_its_bin_to_the_driver(broker: EmbeddedBroker, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    monkeypatch.setattr(shuffle_share, "SHARE_WAIT_S", (0.05, 0.05))
    # task 0 runs alone: task 1's source ranges are not committed, so it gives up and runs no shuffle
    first = run_with_share(blob, groups[0], {**plan, "index": 0})
    assert {r[0] for r in first} == {"sentences"}
    assert _shuffle_tags(broker, job, shuffle) == []
    # task 1 then finds the batch committed and runs its own bin, not task 0's
    second = run_with_share(blob, groups[1], {**plan, "index": 1})
    mine = [(r[1], r[2], r[3]) for r in second if r[0] == shuffle]
    assert mine and _shuffle_tags(broker, job, shuffle) == sorted(mine)
    # the driver's job runs what is left: task 0's bin, exactly
    left = shuffle_ranges(broker, job, [shuffle], 1_000_000, 0)
    assert {(r[1], r[2], r[3]) for r in left}.isdisjoint(mine)
    run_partition(blob, left)
    assert_exact_counts(broker, "counts", SENTENCES)
    assert len(_shuffle_tags(broker, job, shuffle)) == len({q for q, _s, _e in _shuffle_tags(broker, job, shuffle)})


def test_a_task_whose_source_range_failed_runs_no_shuffle(broker: EmbeddedBroker, tmp_path: Path) -> None:
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    bad = [["sentences", 0, 5, 7, 0]]  # Spark asks for a range past what the queue's commits say: fatal
    run_partition(blob, [["sentences", 0, 0, 9, 0]])
    rows = run_with_share(blob, bad, {**plan, "index": 0})
    assert len(rows) == 1 and "fatal" in rows[0][4]
    assert _shuffle_tags(broker, job, shuffle) == []


def test_a_task_whose_config_does_not_load_here_reports_it_fatal_at_once(broker: EmbeddedBroker, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """An EmbeddedBroker unpickled on another host refuses to open: the task says so in a fatal row (the
    driver raises it) instead of raising, which Spark would retry in vain, four times, on a cluster."""
    broker.create_topic("sentences", queues=2)
    cfg = task_config(wordcount(job_id("far")).build(), broker, JobProperties(), tmp_path / "state")
    with monkeypatch.context() as patched:  # the blob is made on another host
        patched.setattr(embedded_broker, "host_identity", lambda: ("elsewhere", "another-boot", 1))
        blob = dump_blob(cfg)
    for ranges in ([["sentences", 1, 0, 5, 0], ["sentences", 0, 0, 5, 0]], []):
        rows = run_with_share(blob, ranges, {"index": 0, "count": 1, "barrier": ranges, "batch": 0})
        assert len(rows) == 1 and tuple(rows[0][:4]) == (tuple(ranges[0][:4]) if ranges else ("", -1, 0, 0))
        info = json.loads(rows[0][4])
        assert "RocketMQBroker" in info["message"] and isinstance(config.load_blob(info["fatal"]), BrokerError)


def _count_driver_jobs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The driver's shuffle-side jobs: each one plans its tasks with ``plan_tasks`` first."""
    calls: list[int] = []
    real = job_query.plan_tasks

    def counted(ranges: list[list[Any]], tasks: int) -> list[list[list[Any]]]:
        calls.append(len(ranges))
        return real(ranges, tasks)

    monkeypatch.setattr(job_query, "plan_tasks", counted)
    return calls


@pytest.mark.parametrize("props, driver_jobs", [
    ({}, False),  # two source queues on local[2]: the source job runs the shuffle side too
    ({"shuffle_in_source_job": False}, True),
    ({"optimize": ALL - {SHUFFLE_IN_SOURCE.name}}, True),  # the rewrite off: the same counts, the driver's job
    ({"tasks": 4}, True),  # more tasks than cores: some would wait for others, so the driver does it
])
def test_one_spark_job_per_batch_where_the_source_tasks_can_run_the_shuffle(
        broker: EmbeddedBroker, make_job: Any, monkeypatch: pytest.MonkeyPatch, props: dict[str, Any],
        driver_jobs: bool) -> None:
    broker.create_topic("sentences", queues=4 if "tasks" in props else 2)
    broker.send_batch("sentences", SENTENCES)
    calls = _count_driver_jobs(monkeypatch)
    optimize = props.pop("optimize", None)
    topology = wordcount(job_id("onejob")).build(optimize=optimize)
    assert ("shuffle in source" in topology.real_dot()) is (optimize is None)  # drawn in the title
    job = make_job(topology, **props)
    job.run_until_idle(timeout=120)
    assert_exact_counts(broker, "counts", SENTENCES)
    assert bool(calls) is driver_jobs
    shuffle = next(iter(job.topology.shuffle_topics))
    assert sum(q.records_in for p in job.progress for q in p.queues if q.topic == shuffle) == \
        sum(len(s.split()) for s in SENTENCES)


def test_a_chain_of_shuffles_runs_its_second_shuffle_in_the_drivers_job(
        broker: EmbeddedBroker, make_job: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Words counted, then the counts of each count (how many words were seen n times): the second
    shuffle topic is written by the first one's pipeline, so only the driver's job can run it."""
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", SENTENCES)
    b = StreamBuilder(job_id("chain"), shuffle_queues=3)
    (b.source("sentences", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count().to_rstream()
     .key_by(lambda n: n).count().to_rstream().sink("histogram", TextSerializer(with_key=True)))
    topology = b.build()
    first, second = topology.shuffle_topics
    assert topology.shuffles_after_sources == [first]
    calls = _count_driver_jobs(monkeypatch)
    make_job(topology).run_until_idle(timeout=120)
    assert calls  # the second shuffle
    # every running count n of a word is one update of key n: key n is seen once per word that reached n
    words = Counter(w for s in SENTENCES for w in s.split())
    expected = Counter(n for total in words.values() for n in range(1, total + 1))
    got: dict[str, int] = {}
    for m in broker.read("histogram"):
        key, _, value = m.body.decode().partition(":")
        got[key] = max(got.get(key, 0), int(value))
    assert got == {str(n): c for n, c in expected.items()}


def test_a_broker_that_cannot_say_leaves_the_shuffle_side_to_the_driver(
        broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    cfg = config.config_from_blob(blob)
    for group in groups:
        run_partition(blob, group)  # the whole batch is committed...

    def unreadable(*args: Any) -> Any:
        raise OSError("disk I/O error")

    monkeypatch.setattr(cfg.broker, "end_offsets", unreadable)  # ...but the shuffle queues' ends cannot be read
    assert run_with_share(blob, [], {**plan, "index": 0}) == []
    monkeypatch.undo()
    assert _shuffle_tags(broker, cfg.job, shuffle) == []
    run_partition(blob, shuffle_ranges(broker, cfg.job, [shuffle], 1_000_000, 0))  # the driver's job
    assert_exact_counts(broker, "counts", SENTENCES)


def test_a_task_with_little_input_waits_for_a_partner_with_much(broker: EmbeddedBroker, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Queues of unequal input: task 0 is done long before task 1 commits, and still runs its bin
    (it waits at least ``SHARE_WAIT_S[0]``, here made long enough for any machine)."""
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    monkeypatch.setattr(shuffle_share, "SHARE_WAIT_S", (30.0, 30.0))
    rows: list[Any] = []
    waiting = threading.Thread(target=lambda: rows.extend(run_with_share(blob, groups[0], {**plan, "index": 0})))
    waiting.start()
    waiting.join(timeout=0.5)
    assert waiting.is_alive() and _shuffle_tags(broker, job, shuffle) == []  # waits: task 1 has not committed
    run_with_share(blob, groups[1], {**plan, "index": 1})
    waiting.join(timeout=60)
    assert [r for r in rows if r[0] == shuffle]  # it ran its bin once task 1 had committed
    assert shuffle_ranges(broker, job, [shuffle], 1_000_000, 0) == []
    assert_exact_counts(broker, "counts", SENTENCES)


def _run_slowly(blob: str, ranges: list[list[Any]], go: Any, out: Any) -> None:
    """In another process: run ``ranges`` once ``go`` is set, each range holding its store half a
    second longer than it needs, so that two such processes overlap on every range."""
    real = queue_run.QueueRun.feed_blocks

    def slow(self: Any, blocks: Any) -> None:
        time.sleep(0.5)
        real(self, blocks)

    queue_run.QueueRun.feed_blocks = slow  # type: ignore[method-assign]
    go.wait(60)
    out.put(run_partition(blob, ranges))


def test_two_attempts_of_the_same_shuffle_ranges_at_once_commit_each_once(broker: EmbeddedBroker,
                                                                           tmp_path: Path) -> None:
    """What a task that waited in vain leaves behind: the driver's job runs every shuffle range while
    a partner task runs its bin. Both attempts want the same state store; the second waits for the
    first to let go, finds its range committed and skips it, rather than failing the batch."""
    blob, shuffle, groups, _plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    for group in groups:
        run_partition(blob, group)
    left = shuffle_ranges(broker, job, [shuffle], 1_000_000, 0)
    assert len(left) > 1
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    attempts = [ctx.Process(target=_run_slowly, args=(blob, left, go, out)) for _ in range(2)]
    for p in attempts:
        p.start()
    go.set()
    rows = [out.get(timeout=120) for _ in attempts]
    for p in attempts:
        p.join(60)
    infos = [[json.loads(r[4]) for r in attempt] for attempt in rows]
    assert not [i for attempt in infos for i in attempt if "fatal" in i]
    for q in range(len(left)):  # each range ran in one attempt and was skipped by the other
        assert sorted(attempt[q]["skipped"] for attempt in infos) == [False, True]
    assert _shuffle_tags(broker, job, shuffle) == sorted((r[1], r[2], r[3]) for r in left)
    assert_exact_counts(broker, "counts", SENTENCES)


def test_a_task_drains_each_queue_of_its_bin_in_ranges_of_at_most_max_records_per_queue(
        broker: EmbeddedBroker, tmp_path: Path) -> None:
    """A task's share is each of its queues from where it begins to where it ends once the batch is
    committed, cut into ranges of at most ``max_records_per_queue``, in order and all in the same
    bin (a queue's ranges must run one after the other); the bins are planned from whole queues, so
    every task plans alike. The counts are exact and the driver finds nothing left."""
    blob, shuffle, groups, plan = _setup(broker, tmp_path)
    job = config.config_from_blob(blob).job
    for group in groups:
        run_partition(blob, group)
    ends = broker.end_offsets(shuffle)
    plan = {**plan, "max_per_queue": 7}
    bins = [shuffle_share.share_ranges(broker, {**plan, "index": i}) for i in range(plan["count"])]
    for mine in bins:
        for q in {r[1] for r in mine}:
            steps = [(r[2], r[3]) for r in mine if r[1] == q]
            assert steps == [(lo, min(lo + 7, ends[q])) for lo in range(0, ends[q], 7)]
    assert sorted(r[1] for mine in bins for r in mine if r[2] == 0) == [q for q, end in enumerate(ends) if end]
    for mine in bins:
        run_partition(blob, mine)
    assert_exact_counts(broker, "counts", SENTENCES)
    assert shuffle_ranges(broker, job, [shuffle], 7, 1) == []
    assert max(end - start for _q, start, end in _shuffle_tags(broker, job, shuffle)) == 7


@pytest.mark.parametrize("kind", ["window", "join"])
def test_window_and_join_queues_run_in_the_source_job_in_every_batch_and_its_tasks_send_the_idle_flush(
        broker: EmbeddedBroker, make_job: Any, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """An ``availableNow`` run in several batches (``max_records_per_queue``): the source tasks run the
    window (join) queues of every batch, and in the one that reads the sources to the run's end they
    first send the idle flush, once (the first of them; the others find it sent), so no batch starts a
    second Spark job, and the results are exact."""
    from rstream.shuffle.wire import FLUSH_HEADER, FLUSH_TAG_TOPIC

    if kind == "window":
        per_queue = {"clicks": produce(broker, "clicks", clicks(150, seed=31))}
        builder = windowed(job_id("wshare"), TumblingWindow(Time.seconds(5)), "count")
    else:
        per_queue = {"left": produce(broker, "left", events(120, 1, "L")),
                     "right": produce(broker, "right", events(90, 2, "R"))}
        builder = join_job(job_id("jshare"), "inner", TumblingWindow(Time.seconds(10)))
    driver_ranges: list[list[Any]] = []
    real = job_query.plan_tasks

    def counted(ranges: list[list[Any]], tasks: int) -> list[list[list[Any]]]:
        driver_ranges.extend(ranges)
        return real(ranges, tasks)

    monkeypatch.setattr(job_query, "plan_tasks", counted)
    job = make_job(builder, max_records_per_queue=20, **EXACT)
    assert job.topology.framed_after_sources == list(job.topology.framed_topics)
    job.run_until_idle(timeout=180)
    last_read = max(p.batch_id for p in job.progress
                    for q in p.queues if q.topic in job.topology.source_topics and q.records_in)
    assert last_read >= 2  # batches that read the sources before the last one
    assert driver_ranges == []  # no batch ran a job of the driver's, the flush's neither
    flushes = [(t, m.queue_id) for t in job.topology.framed_topics for m in broker.read(t)
               if FLUSH_HEADER in (m.headers or {})]
    assert sorted(flushes) == [(t, q) for t in job.topology.framed_topics for q in range(job.topology.shuffle_topics[t])]
    sent = broker.find_commit(job.job_id, FLUSH_TAG_TOPIC, 0, last_read)
    assert sent is not None and sent.batch_id == last_read
    framed = [q for p in job.progress for q in p.queues if q.topic in job.topology.framed_topics]
    assert framed and all(q.records_in for q in framed if q.batch_id < last_read)  # windows ran in each batch
    if kind == "window":
        on_time, late = split_late(per_queue["clicks"], lambda e: e["ts"], LATENESS)
        frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
        assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
        assert len(job.late_records()) == len(late)
    else:
        lefts, late_l = split_late(per_queue["left"], lambda e: e["ts"], LATENESS)
        rights, late_r = split_late(per_queue["right"], lambda e: e["ts"], LATENESS)
        assert emitted(broker) == windowed_pairs(lefts, rights, 10_000, "inner")
        assert len(job.late_records()) == len(late_l) + len(late_r)
    assert (job.lag()["lag"] == 0).all()


def test_an_idle_tick_waits_while_a_batch_runs(broker: EmbeddedBroker, make_job: Any) -> None:
    """A batch's source tasks plan the window queues' ranges from where those queues end, each task on
    its own: a tick another thread sends (a started job's ticker, ``run_until_idle`` on a running job)
    waits until the batch's jobs are done, so the ends hold still while the tasks plan."""

    produce(broker, "clicks", [{"user": "u", "ts": 1}])
    job = make_job(windowed(job_id("tlock"), TumblingWindow(Time.seconds(5)), "count"))
    window_topic = next(iter(job.topology.framed_topics))
    for topic, queues in job.topology.shuffle_topics.items():
        broker.create_topic(topic, queues=queues)
    before = broker.end_offsets(window_topic)
    with job._batch_lock:  # what _on_batch holds while the batch's jobs run
        sender = threading.Thread(target=job.tick)
        sender.start()
        sender.join(timeout=0.5)
        assert sender.is_alive() and broker.end_offsets(window_topic) == before
    sender.join(timeout=30)
    assert not sender.is_alive() and broker.end_offsets(window_topic) == [n + 1 for n in before]
    job.tick()  # the batch's own thread may tick (the idle flush): the lock is its own
    assert broker.end_offsets(window_topic) == [n + 2 for n in before]


def test_without_the_source_tasks_the_driver_sends_the_idle_flush_once(broker: EmbeddedBroker, make_job: Any) -> None:
    """With ``shuffle_in_source_job`` off the driver runs the window queues and sends the idle flush:
    one flush tick a queue, tagged with its batch, and the windows exact."""
    from rstream.shuffle.wire import FLUSH_HEADER, FLUSH_TAG_TOPIC

    per_queue = produce(broker, "clicks", clicks(60, seed=5))
    job = make_job(windowed(job_id("dflush"), TumblingWindow(Time.seconds(5)), "count"),
                   shuffle_in_source_job=False, **EXACT)
    job.run_until_idle(timeout=180)
    [topic] = job.topology.framed_topics
    flushes = sorted(m.queue_id for m in broker.read(topic) if FLUSH_HEADER in (m.headers or {}))
    assert flushes == list(range(job.topology.shuffle_topics[topic]))
    assert [t.batch_id for t in broker.commits(job.job_id) if t.topic == FLUSH_TAG_TOPIC] == [job.progress[-1].batch_id]
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    assert results(broker) == frame.groupby(["key", "start", "end"]).size().to_dict()
