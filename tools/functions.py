"""User functions that the tests and the benchmarks both run."""

from __future__ import annotations

from typing import Any

from rstream import KeyedProcessFunction


class Dedup(KeyedProcessFunction[Any, Any]):
    """Pass a key's first record, then drop its records until ``ttl`` ms of data time have passed
    (the README's de-duplication with a time to live)."""

    def __init__(self, ttl: int) -> None:
        self.ttl = ttl

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        if ctx.state.get() is None:
            ctx.state.set(ctx.timestamp)
            ctx.register_event_time_timer(ctx.timestamp + self.ttl)
            ctx.forward(key, value)

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.state.clear()
