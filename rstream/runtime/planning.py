"""Planning queue ranges, shared by the streaming source (``rstream.runtime.source``), the driver
(``rstream.runtime.job_query``) and the tasks that share a batch's shuffle side
(``rstream.runtime.shuffle_share``): a queue's key in the source offsets, where a job's commits
left an input queue, the uncommitted ranges of its shuffle queues, and the spread of ranges over
Spark tasks. No Spark here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rstream.broker.base import range_end


def queue_key(topic: str, queue: int) -> str:
    return f"{topic}/{queue}"


def split_queue_key(key: str) -> tuple[str, int]:
    topic, _, queue = key.rpartition("/")
    return topic, int(queue)


def committed_end(broker: Any, job: str, topic: str, queue: int, default: int) -> int:
    """The end offset of ``job``'s last commit on an input queue; ``default`` if it has none."""
    last = broker.last_commit(job, topic, queue)
    return default if last is None else int(last.end_offset)


def shuffle_positions(broker: Any, job: str, topics: Sequence[str]) -> dict[str, int]:
    """Per queue of ``topics`` (a job's shuffle topics), where its next range starts: its last
    commit's end, or 0 (a shuffle topic has no other writer than its job, and ``reset()`` deletes it)."""
    return {queue_key(topic, q): committed_end(broker, job, topic, q, 0)
            for topic in topics for q in range(len(broker.end_offsets(topic)))}


def shuffle_ranges(broker: Any, job: str, topics: Sequence[str], max_per_queue: int,
                   batch: int) -> list[list[Any]]:
    """The ranges ``[topic, queue, start, end, batch]`` of ``topics`` (a job's shuffle topics) not
    committed yet, from where ``shuffle_positions`` says they start, at most ``max_per_queue``
    records each."""
    ranges = []
    for topic in topics:
        for q, end in enumerate(broker.end_offsets(topic)):  # each topic's ends read once
            begin = committed_end(broker, job, topic, q, 0)
            if end > begin:
                ranges.append([topic, q, begin, range_end(broker, topic, q, begin, end, max_per_queue), batch])
    return ranges


def plan_tasks(ranges: list[list[Any]], tasks: int) -> list[list[list[Any]]]:
    """Spread queue ranges over at most ``tasks`` Spark tasks, biggest first onto the least loaded,
    so one task per core runs several queues in turn."""
    bins: list[list[list[Any]]] = [[] for _ in range(min(tasks, len(ranges)))]
    loads = [0] * len(bins)
    for rng in sorted(ranges, key=lambda r: (-(r[3] - r[2]), r[0], r[1])):
        i = loads.index(min(loads))
        bins[i].append(rng)
        loads[i] += rng[3] - rng[2]
    return [b for b in bins if b]
