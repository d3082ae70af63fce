"""The shuffle side of a batch, shared among tasks: a source-job task runs its share of the shuffle
queues once the batch's source ranges are committed (``run_with_share``), and the driver's
shuffle-side job runs what is left in groups of ranges (``run_groups``); every range still goes
through the commit protocol (``rstream.runtime.commit``), so none runs twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

from rstream.broker.base import Broker, range_end
from rstream.runtime.commit import run_partition
from rstream.runtime.config import config_from_blob
from rstream.runtime.planning import committed_end, plan_tasks, split_queue_key
from rstream.shuffle.wire import flush_tag, send_ticks


def run_groups(cfg_blob: str, groups: Iterable[list[list[Any]]]) -> Iterator[tuple[str, int, int, int, str]]:
    """A Spark task of the driver's shuffle-side job (an RDD job over the range groups): the queue
    ranges of the groups of its partition, in turn; one metrics row per range."""
    for ranges in groups:
        yield from run_partition(cfg_blob, ranges)



#: How long a source-job task waits for the batch's other source ranges before it leaves its share of
#: the shuffle side to the driver's job: twice its own ranges' time, within these bounds (s). The
#: least is for a task with little to do next to one with much (queues of unequal input); only a
#: failed task (whose batch fails anyway) or a task with no free core keeps its partners waiting.
SHARE_WAIT_S = (1.0, 10.0)

#: How often the wait looks at the broker (s).
SHARE_POLL_S = 0.002


def run_with_share(cfg_blob: str, ranges: list[list[Any]], share: dict[str, Any] | None,
                   ) -> list[tuple[str, int, int, int, str]]:
    """A task of a batch's source job: its queue ranges (``run_partition``), then, with a ``share``
    (``RStreamStreamReader.partitions``), its part of the batch's shuffle side. Once every range of
    the batch is committed, the shuffle queues ``share["begins"]`` names hold all the batch gives
    them: every task plans their ranges alike, from those begins and the queues' ends, spreads them
    over ``share["count"]`` bins as the driver would (``plan_tasks``) and runs bin ``share["index"]``.
    In the last batch of ``run_until_idle``'s run, ``share["flush"]`` names the window and join topics
    that get the run's idle flush first: the first task there sends it (``flush_tag``: once), so
    every task plans with it. That saves the batch a second Spark job (the driver's,
    ``QueryDriver._run_shuffles``), which still runs what is left: all of it when a task gave up
    waiting (a source range not committed within ``SHARE_WAIT_S``: its task failed, or found no
    free core; the driver then sends the flush if no task did), and what came after the tasks
    planned (a started job's idle ticks). A range a task ran is committed with its tag like any
    other, so none runs twice."""
    began = time.perf_counter()
    rows = run_partition(cfg_blob, ranges)
    if share is None or any("fatal" in json.loads(row[4]) for row in rows):
        return rows
    cfg = config_from_blob(cfg_blob)
    low, high = SHARE_WAIT_S
    try:
        if not _committed_all(cfg.broker, cfg.job, share["barrier"],
                              min(high, max(low, 2 * (time.perf_counter() - began)))):
            return rows
        if share.get("flush"):  # the last batch of run_until_idle's run: its idle flush, sent once
            send_ticks(cfg.broker, share["flush"], flush=True, once=flush_tag(cfg.job, share["batch"]))
        mine = share_ranges(cfg.broker, share)
    except Exception:  # the broker could not say: the driver's job runs the shuffle side, and reports
        return rows
    return rows + run_partition(cfg_blob, mine)


def _committed_all(broker: Broker, job: str, ranges: list[list[Any]], wait_s: float) -> bool:
    """Whether every range ``[topic, queue, start, end, batch]`` gets committed within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    # commit tags are all that is waited on here: a broker that says when they may have changed is asked that
    version = getattr(broker, "commits_version", None) or getattr(broker, "data_version", None)
    seen = None
    pending = list(ranges)
    while True:
        now = version() if version is not None else None
        if now is None or now != seen:  # a broker that says nothing changed need not be read again
            seen = now
            pending = [r for r in pending if committed_end(broker, job, r[0], r[1], r[2]) < r[3]]
            if not pending:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(SHARE_POLL_S)


def share_ranges(broker: Broker, share: dict[str, Any]) -> list[list[Any]]:
    """The shuffle ranges of bin ``share["index"]`` of the batch's shuffle side, as every task of the
    batch plans them once the batch's source ranges are committed (see ``run_with_share``): each
    queue from its begin to its end now, in ranges of at most ``share["max_per_queue"]`` records,
    all in one bin and in order; the bins are planned from the queues' whole spans."""
    ends: dict[str, list[int]] = {}
    spans = []
    for key, begin in sorted(share["begins"].items()):
        topic, queue = split_queue_key(key)
        if topic not in ends:
            ends[topic] = broker.end_offsets(topic)
        if ends[topic][queue] > begin:
            spans.append([topic, queue, begin, ends[topic][queue], share["batch"]])
    bins = plan_tasks(spans, share["count"])
    step = share["max_per_queue"]
    mine = bins[share["index"]] if share["index"] < len(bins) else []
    out = []
    for topic, queue, begin, end, batch in mine:
        lo = begin
        while lo < end:
            hi = range_end(broker, topic, queue, lo, end, step)
            out.append([topic, queue, lo, hi, batch])
            lo = hi
    return out

