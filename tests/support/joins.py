"""Joins on Spark: generated events of two sides, the join job's builder, what it emitted, and the
windowed pairs a plain Python join gives."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from tests.support.reference import fixed_windows, split_late


def events(n: int, seed: int, side: str, keys: int = 6) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": f"k{rng.randrange(keys)}", "ts": 1_700_000_000_000 + i * 40_000 // n - rng.randrange(3000),
             "v": f"{side}{i}", "type": side} for i in range(n)]


def emitted(broker: EmbeddedBroker, topic: str = "joined") -> list[tuple[Any, Any]]:
    return sorted((d["key"], d["value"]) for d in (json.loads(m.body) for m in broker.read(topic)))


def windowed_pairs(lefts: list[dict[str, Any]], rights: list[dict[str, Any]], size: int, how: str) -> list[tuple[Any, Any]]:
    buckets: dict[tuple[Any, int], list[list[dict[str, Any]]]] = defaultdict(lambda: [[], []])
    for side, records in enumerate((lefts, rights)):
        for r in records:
            (start, _end), = fixed_windows(r["ts"], size)
            buckets[(r["id"], start)][side].append(r)
    out = []
    for (key, _start), (ls, rs) in buckets.items():
        out += [(key, [left["v"], right["v"]]) for left in ls for right in rs]
        if how == "left" and not rs:
            out += [(key, [left["v"], None]) for left in ls]
    return sorted(out)


def join_job(name: str, how: str, window: Any, same_topic: bool = False, late: bool = False) -> StreamBuilder:
    b = StreamBuilder(name, shuffle_queues=3)
    if same_topic:
        both = b.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
        left, right = both.filter(lambda e: e["type"] == "L"), both.filter(lambda e: e["type"] == "R")
    else:
        left = b.source("left", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
        right = b.source("right", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    joined = left.join(right) if how == "inner" else left.left_join(right)
    joined = joined.where(lambda e: e["id"]).equal_to(lambda e: e["id"])
    if window is not None:
        joined = joined.window(window)
    out = joined.apply(lambda left, right: [left["v"], None if right is None else right["v"]])
    out.sink("joined", JsonSerializer(with_key=True))
    if late:
        out.late().sink("late", JsonSerializer(with_key=True))
    return b


def interval_pairs(lefts: list[dict[str, Any]], rights: list[dict[str, Any]], lower: int, upper: int,
                   how: str) -> list[tuple[Any, Any]]:
    """What an interval join emits, as plain Python: ``(key, [left v, right v])`` for each left and
    right record of one key with ``lower <= right ts - left ts <= upper``; with ``how="left"`` also
    ``(key, [left v, None])`` for each left record that has no such right one."""
    out = []
    for left in lefts:
        mates = [r for r in rights if r["id"] == left["id"] and lower <= r["ts"] - left["ts"] <= upper]
        out += [(left["id"], [left["v"], r["v"]]) for r in mates]
        if how == "left" and not mates:
            out.append((left["id"], [left["v"], None]))
    return sorted(out)


def interval_join_job(name: str, how: str, lower: int, upper: int, shuffle_queues: int = 3,
                      late: bool = False) -> StreamBuilder:
    """``left`` joined with ``right`` (two topics of ``events``-like records) by ``id`` within
    ``[lower, upper]``, each pair written to ``joined`` as ``[left v, right v]``; with ``late`` its
    late records to ``late`` (``LateRecord``s as JSON, with keys)."""
    b = StreamBuilder(name, shuffle_queues=shuffle_queues)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    joined = left.join(right) if how == "inner" else left.left_join(right)
    out = (joined.where(lambda e: e["id"]).equal_to(lambda e: e["id"]).between(lower, upper)
           .apply(lambda left, right: [left["v"], None if right is None else right["v"]]))
    out.sink("joined", JsonSerializer(with_key=True))
    if late:
        out.late().sink("late", JsonSerializer(with_key=True))
    return b


def join_late_stream(broker: EmbeddedBroker, topic: str = "late") -> list[tuple[Any, ...]]:
    """A join's late sink as ``(side, key, value as JSON, data_time, watermark, cause, operator)``, sorted."""
    out = []
    if not broker.has_topic(topic):
        return out
    for m in broker.read(topic):
        doc = json.loads(m.body)
        key, value, data_time, watermark, cause, _reason, operator, side = doc["value"]
        assert doc["key"] == key
        out.append((side, key, json.dumps(value), data_time, watermark, cause, operator))
    return sorted(out)


def reference_join_late(lq: dict[int, list[dict[str, Any]]], rq: dict[int, list[dict[str, Any]]], lateness: int,
                        operator: str) -> list[tuple[Any, ...]]:
    """The records a join drops as late by the plain rule (per source queue, behind its watermark),
    as ``join_late_stream`` gives them."""
    out = []
    for side, queues in (("left", lq), ("right", rq)):
        _on_time, late = split_late(queues, lambda e: e["ts"], lateness)
        out += [(side, e["id"], json.dumps(e), e["ts"], wm, "behind watermark", operator) for e, wm in late]
    return sorted(out)


def join_state(job: Any, operator: str) -> dict[tuple[int, Any], list[Any]]:
    """What ``operator`` of an in-process ``job`` holds in its local state stores, over every queue:
    ``(side, key) -> [[data time, value, matched], ...]``."""
    from rstream.runtime.job_state import local_store
    from rstream.state.store import is_bookkeeping

    topology = job.topology
    [topic] = [t for t in topology.shuffle_topics if operator in t]
    out: dict[tuple[int, Any], list[Any]] = {}
    for q in range(job.broker.topic(topic).queues):
        store = local_store(topology, job.broker, job.job_dir / "state", topic, q)
        if store is None:
            continue
        try:
            out.update({key: value for op, key, value in store.items(operator)
                        if op == operator and not is_bookkeeping(op, key)})
        finally:
            store.close()
    return out


def source_watermark(lateness: int, *per_queue: dict[int, list[dict[str, Any]]]) -> int:
    """The operator watermark after the whole input, without idleness: the minimum over the source
    queues (none while a queue has had no record: it may still bring any data time)."""
    from rstream.time.watermark import NO_WATERMARK

    queues = [q for qs in per_queue for q in qs.values()]
    if not all(queues):
        return NO_WATERMARK
    return min(max(e["ts"] for e in q) - lateness for q in queues)


def waiting_records(lefts: list[dict[str, Any]], rights: list[dict[str, Any]], lower: int, upper: int,
                    watermark: int) -> list[tuple[int, Any, int, Any]]:
    """``(side, key, data time, v)`` of the on-time records an interval join still holds at
    ``watermark``: those that may still meet a partner (a left one while ``ts + upper >= watermark``,
    a right one while ``ts - lower >= watermark``)."""
    return sorted([(0, e["id"], e["ts"], e["v"]) for e in lefts if e["ts"] + upper >= watermark]
                  + [(1, e["id"], e["ts"], e["v"]) for e in rights if e["ts"] - lower >= watermark])
