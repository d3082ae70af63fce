"""An independent reference for event-time results: plain Python and pandas over the records as the
broker stores them (per queue, in offset order), with RIP-58's rules and nothing of rstream's."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pandas as pd


def split_late(queues: dict[int, list[Any]], time_of: Callable[[Any], int], lateness: int) -> tuple[list[Any], list[tuple[Any, int]]]:
    """On-time records, and late ones with the watermark they were judged by: per source queue,
    watermark = max(previous, t - lateness) and a record is late when t < watermark."""
    on_time, late = [], []
    for records in queues.values():
        wm = None
        for rec in records:
            t = time_of(rec)
            wm = t - lateness if wm is None else max(wm, t - lateness)
            if t < wm:
                late.append((rec, wm))
            else:
                on_time.append(rec)
    return on_time, late


def fixed_windows(t: int, size: int, slide: int | None = None) -> list[tuple[int, int]]:
    slide = slide or size
    starts = range((t // slide) * slide, t - size, -slide)
    return sorted((s, s + size) for s in starts)


def window_frame(records: list[Any], key_of: Callable[[Any], Any], time_of: Callable[[Any], int],
                 value_of: Callable[[Any], Any], size: int, slide: int | None = None) -> pd.DataFrame:
    rows = [{"key": key_of(r), "start": s, "end": e, "value": value_of(r)}
            for r in records for s, e in fixed_windows(time_of(r), size, slide)]
    return pd.DataFrame(rows, columns=["key", "start", "end", "value"])


def sessions(records: list[Any], key_of: Callable[[Any], Any], time_of: Callable[[Any], int], gap: int) -> dict[tuple[Any, int, int], int]:
    """Per key, the times sorted and cut where two neighbours are ``gap`` or more apart; a session
    spans [first, last + gap). Returns the record count per (key, start, end)."""
    by_key: dict[Any, list[int]] = defaultdict(list)
    for r in records:
        by_key[key_of(r)].append(time_of(r))
    out = {}
    for key, times in by_key.items():
        times.sort()
        first = prev = times[0]
        n = 1
        for t in times[1:]:
            if t - prev >= gap:
                out[(key, first, prev + gap)] = n
                first, n = t, 0
            prev = t
            n += 1
        out[(key, first, prev + gap)] = n
    return out


def in_time_order(queues: dict[Any, list[Any]] | list[Any], time_of: Callable[[Any], int], lateness: int,
                  rank_of: Callable[[Any], int] = lambda r: 0) -> list[tuple[int, Any, int]]:
    """Every record of every source queue as ``(at, record, time)``, in the order an operator that takes
    its records in data-time order takes them: per queue, watermark = max(previous, t - lateness) and a
    record is taken at ``at = max(t, watermark)`` (a late one at the watermark it was read with); then
    by ``at``, ``rank_of`` (lower first), the queue's name as text, and each queue's own order.
    ``queues``: records per queue, or one queue's records."""
    if isinstance(queues, list):
        queues = {0: queues}
    rows = []
    for q, records in queues.items():
        wm = None
        for i, rec in enumerate(records):
            t = time_of(rec)
            wm = t - lateness if wm is None else max(wm, t - lateness)
            rows.append((max(t, wm), rank_of(rec), str(q), i, rec, t))
    rows.sort(key=lambda row: row[:4])
    return [(at, rec, t) for at, _rank, _q, _i, rec, t in rows]


def keyed_process(queues: dict[Any, list[Any]] | list[Any], fn: Any, key_of: Callable[[Any], Any],
                  time_of: Callable[[Any], int], lateness: int) -> dict[Any, list[Any]]:
    """What a keyed process function forwards, per forwarded key in order: the records taken in
    data-time order (``in_time_order``); before each, every event-time timer at or before its time
    fires (earliest first; one set meanwhile for a time already passed too); at the end every timer
    left fires (the end of input). A plain dict per key for the value, a set of ``(time, key)`` for
    the timers; ``fn`` is called with a context of its own that has the documented methods (effects
    applied when a call returns). No batches: the answer cannot depend on them."""
    values: dict[Any, Any] = {}
    timers: set[tuple[int, Any]] = set()
    out: dict[Any, list[Any]] = defaultdict(list)

    class State:
        def __init__(self, ctx: Any) -> None:
            self.ctx = ctx

        def get(self, default: Any = None) -> Any:
            v = self.ctx.value
            if v is _UNCHANGED:
                return values.get(self.ctx.key, default)
            return default if v is _CLEARED else v

        def set(self, value: Any) -> None:
            self.ctx.value = value

        def clear(self) -> None:
            self.ctx.value = _CLEARED

    class Ctx:
        def __init__(self, key: Any, timestamp: int, now: int) -> None:
            self.key, self.timestamp, self.watermark = key, timestamp, now
            self.value: Any = _UNCHANGED
            self.timers: dict[int, bool] = {}
            self.out: list[tuple[Any, Any]] = []
            self.state = State(self)

        def register_event_time_timer(self, ts: int) -> None:
            self.timers[ts] = True

        def delete_event_time_timer(self, ts: int) -> None:
            self.timers[ts] = False

        def forward(self, key: Any, value: Any) -> None:
            self.out.append((key, value))

        def apply(self) -> None:
            if self.value is _CLEARED:
                values.pop(self.key, None)
            elif self.value is not _UNCHANGED:
                values[self.key] = self.value
            for ts, on in self.timers.items():
                (timers.add if on else timers.discard)((ts, self.key))
            for k, v in self.out:
                out[k].append(v)

    def fire(up_to: float) -> None:
        while True:
            due = [t for t in timers if t[0] <= up_to]
            if not due:
                return
            ts, key = min(due, key=lambda t: (t[0], repr(t[1])))
            timers.discard((ts, key))
            ctx = Ctx(key, ts, ts)
            fn.on_timer(key, ts, ctx)
            ctx.apply()

    for at, rec, t in in_time_order(queues, time_of, lateness):
        fire(at)
        ctx = Ctx(key_of(rec), t, at)
        fn.process(ctx.key, rec, ctx)
        ctx.apply()
    fire(float("inf"))
    return dict(out)


_UNCHANGED: Any = object()
_CLEARED: Any = object()
