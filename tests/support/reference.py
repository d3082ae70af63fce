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
