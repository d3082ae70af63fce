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


def keyed_process(records: list[Any], fn: Any, key_of: Callable[[Any], Any], time_of: Callable[[Any], int],
                  lateness: int, chunk: int) -> dict[Any, list[Any]]:
    """What a keyed process function forwards, per forwarded key in order, when the records of one
    source queue arrive ``chunk`` at a time: each chunk's records in order, then the watermark moves to
    ``max(t - lateness)`` over everything read so far and the event-time timers it reached fire
    (those due when it moved, earliest first); at the end every timer left fires (the idle flush).
    A plain dict per key for the value, a set of ``(time, key)`` for the timers; ``fn`` is called with
    a context of its own that has the documented methods (effects applied when a call returns)."""
    values: dict[Any, Any] = {}
    timers: set[tuple[int, Any]] = set()
    out: dict[Any, list[Any]] = defaultdict(list)
    state = {"wm": None}

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
        def __init__(self, key: Any, timestamp: int) -> None:
            self.key, self.timestamp, self.watermark = key, timestamp, state["wm"]
            self.value: Any = _UNCHANGED
            self.timers: dict[int, bool] = {}
            self.out: list[tuple[Any, Any]] = []
            self.state = State(self)

        def register_event_time_timer(self, ts: int) -> None:
            wm = state["wm"]
            if wm is not None and ts <= wm:
                raise AssertionError(f"the reference does not model a timer already due ({ts} <= watermark {wm})")
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

    def fire(up_to: int | None) -> None:
        due = sorted((t for t in timers if up_to is None or t[0] <= up_to), key=lambda t: (t[0], repr(t[1])))
        for ts, key in due:
            if (ts, key) not in timers:
                continue
            timers.discard((ts, key))
            ctx = Ctx(key, ts)
            fn.on_timer(key, ts, ctx)
            ctx.apply()

    for i in range(0, len(records), chunk):
        part = records[i:i + chunk]
        for rec in part:
            ctx = Ctx(key_of(rec), time_of(rec))
            fn.process(ctx.key, rec, ctx)
            ctx.apply()
        marks = [time_of(r) - lateness for r in part] + ([state["wm"]] if state["wm"] is not None else [])
        state["wm"] = max(marks)
        fire(state["wm"])
    fire(None)
    return dict(out)


_UNCHANGED: Any = object()
_CLEARED: Any = object()
