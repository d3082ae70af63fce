"""Exactly once against at least once: a task killed between its sink write and its commit.

``crash_once`` makes the first task that reaches the point die as a killed process does. In local
mode the batch then fails, and the job's next run starts it again from its checkpoint: the range
runs a second time from the same committed state, so it makes the same sink records again."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from rstream import EmbeddedBroker, JobError
from rstream.runtime.trace import TraceError
from tests.support.jobs import assert_exact_counts, crash_then_finish, job_id, repeated_counts, wordcount

SENTENCES = ["a b c a", "b d", "e f a", "a a z", "d e", "c c c", "b a d", "z z a"]


def test_at_least_once_repeats_the_sink_records_of_the_range_that_died_before_its_commit(
        broker: EmbeddedBroker, make_job: Any) -> None:
    job = crash_then_finish(broker, make_job, SENTENCES, "at_least_once", "before_commit")
    # the dead range's running counts were written, then written again by its rerun
    assert repeated_counts(broker, "counts", SENTENCES) > 0
    expected = Counter(w for s in SENTENCES for w in s.split())
    # the state and the commits are exact: only the sink, written apart from the commit, repeats
    state = job.state()
    assert dict(zip(state["key"], state["value"])) == dict(expected)
    with pytest.raises(TraceError, match="at least once"):
        job.trace("sentences", 0, 0)


@pytest.mark.parametrize("point", ["before_commit", "after_commit"])
def test_exactly_once_writes_every_sink_record_once_whichever_side_of_the_commit_the_task_died(
        broker: EmbeddedBroker, make_job: Any, point: str) -> None:
    # before its commit the dead range had written nothing; after it, its rerun finds its tag
    crash_then_finish(broker, make_job, SENTENCES, "exactly_once", point)
    assert_exact_counts(broker, "counts", SENTENCES)


def test_a_crash_point_that_does_not_exist_is_refused(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=1)
    job = make_job(wordcount(job_id("refused")))
    with pytest.raises(JobError, match=r"crash_once takes one of \['before_commit', 'after_commit'\], not 'midway'"):
        job.crash_once("midway")


def test_an_unknown_guarantee_is_refused() -> None:
    from rstream.settings import JobProperties

    with pytest.raises(JobError, match="processing_guarantee must be one of"):
        JobProperties.of({"processing_guarantee": "at_most_once"})
