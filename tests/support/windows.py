"""Event-time jobs on Spark: generated clicks, a windowed aggregate's builder, and its results read
back; compare them with ``tests.support.reference``."""

from __future__ import annotations

import json
import random
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder

LATENESS = 2000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}  # no idleness mid-run: exact results


def produce(broker: EmbeddedBroker, topic: str, events: list[dict[str, Any]], queues: int = 2) -> dict[int, list[dict[str, Any]]]:
    """Send events (keyless, so round robin) and return them per queue in offset order, as stored."""
    broker.create_topic(topic, queues=queues)
    broker.send_batch(topic, [json.dumps(e) for e in events])
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(queues)}


def windowed(job: str, window: Any, agg: str, fn: Any = None, key: Any = lambda e: e["user"]) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    ws = (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(key).window(window))
    result = getattr(ws, agg)() if fn is None else getattr(ws, agg)(fn)
    result.to_rstream().sink("results", JsonSerializer(with_key=True))
    return b


def results(broker: EmbeddedBroker, topic: str = "results") -> dict[tuple[Any, int, int], Any]:
    out = {}
    for m in broker.read(topic):
        doc = json.loads(m.body)
        key, start, end = doc["key"]
        key = tuple(key) if isinstance(key, list) else key
        assert (key, start, end) not in out, "a window fired twice"
        out[(key, start, end)] = doc["value"]
    return out


def clicks(n: int, seed: int, users: int = 4, spread: int = 30_000, disorder: int = 4000) -> list[dict[str, Any]]:
    """Clicks with roughly increasing time and some out of order (some of them later than the lateness)."""
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(users)}", "ts": 1_700_000_000_000 + i * spread // n - rng.randrange(disorder),
             "amount": rng.randint(1, 50)} for i in range(n)]
