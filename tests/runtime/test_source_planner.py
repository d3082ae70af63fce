"""The streaming source's planning of shuffle queues, without Spark: the driver drains a batch's shuffle
queues in the same trigger (``QueryDriver._run_shuffles``), so the source plans a shuffle queue from its
last commit, moves its offset only when it plans it, and a rerun plans around what was committed."""

from __future__ import annotations

import json
from typing import Any

from rstream import EmbeddedBroker
from rstream.broker import CommitTag
from rstream.runtime.config import dump_blob
from rstream.runtime.planning import shuffle_ranges
from rstream.runtime.source import BATCH_KEY, WATCH_MAX_S, WATCH_S, RStreamStreamReader, watch_pause

JOB = "planner"


def reader(broker: EmbeddedBroker, initial: dict[str, int], **options: str) -> RStreamStreamReader:
    return RStreamStreamReader({
        "sourcetopics": json.dumps(["src"]), "shuffletopics": json.dumps(["sh"]),
        "initialoffsets": json.dumps(initial), "brokersecret": dump_blob(broker), "job": JOB, **options,
    })


def write_shuffle(broker: EmbeddedBroker, per_queue: dict[int, int], tag: CommitTag) -> None:
    """What a committed range writes to the shuffle topic: ``per_queue[q]`` records to queue ``q``."""
    broker.append({("sh", q): [(None, b"x", 1, None, None)] * n for q, n in per_queue.items()}, tag)


def ranges(reader: RStreamStreamReader, start: dict[str, int], end: dict[str, int]) -> list[tuple[Any, ...]]:
    return sorted((t, q, b, e) for part in reader.partitions(start, end) for t, q, b, e, _batch in part.value[0])


def setup(broker: EmbeddedBroker) -> dict[str, int]:
    broker.create_topic("src", queues=1)
    broker.create_topic("sh", queues=2)
    broker.send_batch("src", ["a", "b", "c"])
    return {"src/0": 0, "sh/0": 0, "sh/1": 0}


def test_a_shuffle_queue_the_driver_drained_plans_no_batch(broker: EmbeddedBroker) -> None:
    initial = setup(broker)
    r = reader(broker, initial)
    first = r.latestOffset({BATCH_KEY: -1, **initial})
    assert first == {"src/0": 3, "sh/0": 0, "sh/1": 0, BATCH_KEY: 0}  # shuffle topics empty: sources only
    assert ranges(r, {BATCH_KEY: -1, **initial}, first) == [("src", 0, 0, 3)]
    # batch 0's source task writes the shuffle queues; the driver's second job commits both of them
    write_shuffle(broker, {0: 5, 1: 2}, CommitTag(JOB, "src", 0, 0, 3, batch_id=0))
    write_shuffle(broker, {}, CommitTag(JOB, "sh", 0, 0, 5, batch_id=0))
    write_shuffle(broker, {}, CommitTag(JOB, "sh", 1, 0, 2, batch_id=0))
    # nothing moved that the job has not done: no batch 1 (the offsets, and the batch counter, stay)
    assert r.latestOffset(first) == first
    # a later tick on sh/1 (written outside any range) is planned from sh/1's commit, not from 0
    broker.append({("sh", 1): [(None, b"tick", 1, None, None)]})
    second = r.latestOffset(first)
    assert second == {"src/0": 3, "sh/0": 0, "sh/1": 3, BATCH_KEY: 1}
    assert ranges(r, first, second) == [("sh", 1, 2, 3)]


def test_a_rerun_plans_around_the_drivers_commits(broker: EmbeddedBroker) -> None:
    initial = setup(broker)
    write_shuffle(broker, {0: 6, 1: 4}, CommitTag(JOB, "src", 0, 0, 3, batch_id=0))
    r = reader(broker, initial)
    start = {**initial, "src/0": 3, BATCH_KEY: 0}
    end = r.latestOffset(start)
    assert end == {"src/0": 3, "sh/0": 6, "sh/1": 4, BATCH_KEY: 1}  # the driver never ran: plan them
    # the batch's tasks commit sh/0 up to 6 and the driver's job goes on to sh/1 [0, 2) before a crash...
    write_shuffle(broker, {}, CommitTag(JOB, "sh", 0, 0, 6, batch_id=1))
    write_shuffle(broker, {}, CommitTag(JOB, "sh", 1, 0, 2, batch_id=1))
    # ...so the rerun of the logged batch (same start and end) runs only what is left
    assert ranges(r, start, end) == [("sh", 1, 2, 4)]
    assert shuffle_ranges(broker, JOB, ["sh"], 10, 1) == [["sh", 1, 2, 4, 1]]
    assert shuffle_ranges(broker, JOB, ["sh"], 1, 1) == [["sh", 1, 2, 3, 1]]  # at most max_per_queue
    assert shuffle_ranges(broker, "another-job", ["sh"], 100, 0) == [["sh", 0, 0, 6, 0], ["sh", 1, 0, 4, 0]]


def test_an_available_now_run_stops_at_the_drivers_target(broker: EmbeddedBroker) -> None:
    initial = setup(broker)
    r = reader(broker, initial, target=json.dumps({"src/0": 2}))
    r.prepareForTriggerAvailableNow()
    broker.send_batch("src", ["d"])  # sent after the driver took its target: for the next run
    end = r.latestOffset({BATCH_KEY: -1, **initial})
    assert end["src/0"] == 2 and ranges(r, {BATCH_KEY: -1, **initial}, end) == [("src", 0, 0, 2)]


def test_the_source_tasks_get_a_share_of_the_shuffle_side_from_where_each_queue_is_committed(
        broker: EmbeddedBroker) -> None:
    """With the shuffle topic named in ``shufflesintasks`` and no more tasks than cores, every task
    of a batch carries the same plan of the shuffle side: the batch's ranges to wait for, and where
    each shuffle queue starts (after what this batch plans of it, else after its last commit)."""
    initial = setup(broker)
    write_shuffle(broker, {0: 6, 1: 4}, CommitTag(JOB, "src", 0, 0, 3, batch_id=0))
    write_shuffle(broker, {}, CommitTag(JOB, "sh", 0, 0, 6, batch_id=0))  # sh/0 drained; sh/1 not
    broker.send_batch("src", ["d", "e"], queue=0)
    start = {**initial, "src/0": 3, BATCH_KEY: 0}
    shared = reader(broker, initial, shufflesintasks=json.dumps(["sh"]), slots="2", tasks="2")
    end = shared.latestOffset(start)
    parts = [p.value for p in shared.partitions(start, end)]
    batch_ranges = [["src", 0, 3, 5, 1], ["sh", 1, 0, 4, 1]]
    assert sorted(r for group, _share in parts for r in group) == sorted(batch_ranges)
    shares = [share for _group, share in parts]
    assert [s["index"] for s in shares] == list(range(len(parts))) and {s["count"] for s in shares} == {len(parts)}
    for s in shares:
        assert sorted(s["barrier"]) == sorted(batch_ranges)
        assert s["begins"] == {"sh/0": 6, "sh/1": 4} and s["batch"] == 1
    # more tasks than cores, or no topic to share: the driver's job, as before
    assert all(share is None for _g, share in (p.value for p in reader(
        broker, initial, shufflesintasks=json.dumps(["sh"]), slots="1", tasks="2").partitions(start, end)))
    assert all(share is None for _g, share in (p.value for p in reader(broker, initial).partitions(start, end)))


def test_window_topics_are_shared_except_in_the_batch_the_idle_flush_follows(broker: EmbeddedBroker) -> None:
    """A window or join topic (``framedintasks``) goes to the source tasks like any other, but not in
    the batch of an ``availableNow`` run that reads the sources up to the driver's target when that
    run ends with the idle flush (``flushatend``): the driver sends the flush after that batch's
    source ranges, then runs the windows with their last records, in one job."""
    initial = setup(broker)
    start = {**initial, BATCH_KEY: -1}

    def begins(**options: str) -> list[Any]:
        r = reader(broker, initial, framedintasks=json.dumps(["sh"]), slots="2", tasks="2", **options)
        if "target" in options:
            r.prepareForTriggerAvailableNow()
        end = r.latestOffset(start)
        return [share if share is None else share["begins"] for _g, share in (p.value for p in r.partitions(start, end))]

    assert begins() == [{"sh/0": 0, "sh/1": 0}]  # a started job: every batch shares its windows
    assert begins(target=json.dumps({"src/0": 3})) == [{"sh/0": 0, "sh/1": 0}]  # no flush at the end
    assert begins(target=json.dumps({"src/0": 3}), flushatend="1") == [None]  # the flush follows this batch
    # a batch short of the target (more input than one range holds): the flush does not follow it
    assert begins(target=json.dumps({"src/0": 3}), flushatend="1", maxrecordsperqueue="2") == [{"sh/0": 0, "sh/1": 0}]


def test_the_idle_watch_looks_less_often_the_longer_no_input_came(broker: EmbeddedBroker) -> None:
    # within a second of the last input every 5 ms, then a pause growing with the idle time, to 40 ms
    assert [watch_pause(s) for s in (0.0, 0.5, 0.99, 2.0, 4.0, 8.0, 3600.0)] == \
        [WATCH_S, WATCH_S, WATCH_S, 2 * WATCH_S, 4 * WATCH_S, WATCH_MAX_S, WATCH_MAX_S]
    initial = setup(broker)
    r = reader(broker, initial, waitms="1")
    first = r.latestOffset({**initial, BATCH_KEY: 0})  # input: three records
    found_at = r._input_at
    r._input_at -= 100  # as if it were long ago
    r.latestOffset(first)  # nothing new: the time of the last input stays
    assert r._input_at == found_at - 100
    broker.send("src", "d")
    r.latestOffset(first)  # new input: the watch is quick again
    assert r._input_at > found_at - 100


def test_a_job_s_source_options_are_redacted_where_spark_shows_them(broker: Any, make_job: Any) -> None:
    """The broker (with its credentials on a RocketMQ with ACL) and the task config travel to the source in
    options whose names hold "secret": Spark redacts them wherever it shows a source's options (a plan's
    text, its UI), as it does for a password."""
    from tests.support.jobs import job_id, wordcount

    broker.create_topic("sentences", queues=1)
    job = make_job(wordcount(job_id("plan")))
    options = job._driver._source_options()
    df = job.spark.readStream.format("rstream").options(**options).load()
    plan = str(df._jdf.queryExecution().toString())  # what df.explain(True) prints
    assert "brokerSecret=*********(redacted)" in plan and "configSecret=*********(redacted)" in plan
    assert options["brokerSecret"][:40] not in plan and options["configSecret"][:40] not in plan
