"""Windowed jobs with ``.late()`` and ``emit="early"``: their builder, clicks sent in steps (each step
one or more batches, so early results have batches to come from), what their sinks hold, and the
plain reference for both (``tests.support.reference``'s rules, nothing of rstream's)."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from rstream.time import Window
from tests.support.reference import fixed_windows, sessions, split_late

LATENESS = 2000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}  # no idleness mid-run: exact results


def late_job(job: str, window: Window, emit: str | None = "early", agg: str = "count", fn: Any = None,
             late: bool = True) -> StreamBuilder:
    """clicks -> key by user -> ``window(window, emit=emit)`` -> ``agg`` -> sink "results"; with
    ``late`` its late records -> sink "late" (JSON with keys). ``emit=None``: ``window(w)`` as
    written before emit existed."""
    b = StreamBuilder(job, shuffle_queues=3)
    ws = b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
    windowed = ws.window(window) if emit is None else ws.window(window, emit=emit)
    result = getattr(windowed, agg)() if fn is None else getattr(windowed, agg)(fn)
    result.to_rstream().sink("results", JsonSerializer(with_key=True))
    if late:
        result.late().sink("late", JsonSerializer(with_key=True))
    return b


def stepped_clicks(n: int, seed: int, steps: int, users: int = 3, spread: int = 30_000,
                   disorder: int = 4000) -> list[list[dict[str, Any]]]:
    """Clicks with roughly increasing time, some out of order (some later than the lateness), cut
    into ``steps`` consecutive parts; each click knows its step."""
    rng = random.Random(seed)
    events = [{"user": f"u{rng.randrange(users)}", "ts": 1_700_000_000_000 + i * spread // max(n, 1) - rng.randrange(disorder),
               "amount": rng.randint(1, 50)} for i in range(n)]
    cuts = sorted(rng.sample(range(1, n), min(steps - 1, n - 1))) if n > 1 else []
    parts = [events[a:b] for a, b in zip([0, *cuts], [*cuts, n])]
    for step, part in enumerate(parts):
        for e in part:
            e["step"] = step
    return parts


def per_queue(broker: EmbeddedBroker, topic: str = "clicks") -> dict[int, list[dict[str, Any]]]:
    """The clicks per source queue in offset order, as stored (what the reference judges lateness by)."""
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(broker.topic(topic).queues)}


def messages(broker: EmbeddedBroker, topic: str) -> list[tuple[int, int, dict[str, Any]]]:
    """``(queue, offset, JSON document)`` of every message of ``topic`` (none when it does not exist)."""
    if not broker.has_topic(topic):
        return []
    return [(m.queue_id, m.offset, json.loads(m.body)) for m in broker.read(topic)]


def late_stream(broker: EmbeddedBroker, topic: str = "late") -> list[tuple[Any, ...]]:
    """The late sink's records as ``(key, value, data_time, watermark, cause, operator)``, sorted."""
    out = []
    for _q, _o, doc in messages(broker, topic):
        key, value, data_time, watermark, cause, _reason, operator, _side = doc["value"]
        assert doc["key"] == key
        out.append((key, json.dumps(value), data_time, watermark, cause, operator))
    return sorted(out)


def late_rows(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows of the late-data topic (``job.late_records()``'s) as ``late_stream`` gives its records:
    the rows hold the key and value as ``repr`` text, so those are compared as text."""
    return sorted((r["key"], r["value"], r["data_time"], r["watermark"], r["cause"], r["operator"]) for r in rows)


def as_rows(stream: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """``late_stream``'s records with key and value as the late-data topic writes them (``repr``)."""
    return sorted((repr(k), repr(json.loads(v)), t, wm, cause, op) for k, v, t, wm, cause, op in stream)


def reference_late(queues: dict[int, list[dict[str, Any]]]) -> list[tuple[Any, ...]]:
    """The late clicks by the reference: ``(user, click, data time, watermark, "behind watermark")``, sorted."""
    _on_time, late = split_late(queues, lambda e: e["ts"], LATENESS)
    return sorted((e["user"], json.dumps(e), e["ts"], wm, "behind watermark") for e, wm in late)


def on_time(queues: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return split_late(queues, lambda e: e["ts"], LATENESS)[0]


def fixed_aggregates(records: list[dict[str, Any]], size: int, slide: int | None,
                     value_of: Callable[[dict[str, Any]], Any]) -> dict[tuple[Any, int, int], Any]:
    """Per (user, start, end): the sum of ``value_of`` over ``records`` in that window."""
    out: dict[tuple[Any, int, int], Any] = defaultdict(int)
    for r in records:
        for s, e in fixed_windows(r["ts"], size, slide):
            out[(r["user"], s, e)] += value_of(r)
    return dict(out)


def session_counts(records: list[dict[str, Any]], gap: int) -> dict[tuple[Any, int, int], int]:
    return sessions(records, lambda e: e["user"], lambda e: e["ts"], gap) if records else {}
