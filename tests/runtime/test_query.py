"""``job.query(operator, key)`` on Spark: a word count's value of every word after a run, then read while
the job runs (never stopped for it) until it says what ``collections.Counter`` says; the same after a
restart that lost the local state (read from the state topics, then from what the next batch replayed)."""

from __future__ import annotations

import shutil
from collections import Counter
from typing import Any

from rstream import EmbeddedBroker
from tests.support.jobs import job_id, wordcount

WORDS = ["a rose is a rose", "is it", "a b c", "kiwi"]


def _counter(job: Any) -> str:
    return next(n.name for n in job.topology.nodes if n.stateful)


def test_query_reads_each_words_count_after_a_run_and_while_the_job_runs(broker: EmbeddedBroker,
                                                                          make_job: Any) -> None:
    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", WORDS * 3)
    name = job_id("query")
    job = make_job(wordcount(name))
    job.run_until_idle(progress=False)
    count = _counter(job)
    expected = Counter(w for s in WORDS * 3 for w in s.split())
    assert {w: job.query(count, w) for w in expected} == dict(expected)
    assert job.query(count, "nowhere") is None

    job.start()
    try:
        more = ["a kiwi", "rose rose"] * 40
        broker.send_batch("sentences", more)
        expected.update(w for s in more for w in s.split())
        seen = []
        job.wait_for(lambda j: seen.append(j.query(count, "rose")) or seen[-1] == expected["rose"], timeout=120,
                     what="query to see every rose")
        assert job.is_running
        assert all(a <= b for a, b in zip(seen, seen[1:]))  # a count read mid-run only grows
    finally:
        job.stop()
    assert {w: job.query(count, w) for w in expected} == dict(expected)

    shutil.rmtree(job.state_dir)  # the local state is gone: query reads the state topics
    again = make_job(wordcount(name))
    assert {w: again.query(count, w) for w in expected} == dict(expected)
    broker.send_batch("sentences", ["a"])  # the batch replays one queue's state, the others stay unread
    again.run_until_idle(progress=False)
    expected["a"] += 1
    assert {w: again.query(count, w) for w in expected} == dict(expected)
