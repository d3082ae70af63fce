"""What an operator reports for one queue and batch: typed counters, not loose dicts.

An ``OperatorMetrics`` has a typed attribute per counter (0, None or empty when the operator does not
report it) and also reads as a mapping of the counters the operator does report, which is how it
travels as JSON in the commit tags and how tables iterate it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: Counters summed over queues and batches (the rest are watermarks and lists).
COUNTERS = ("records_in", "keys_changed", "late", "windows_fired", "windows_open", "emitted", "markers",
            "timers_fired", "timers_pending", "held")


@dataclass(frozen=True)
class OperatorMetrics(Mapping[str, Any]):
    records_in: int = 0
    #: keyed aggregations: keys whose state this batch changed
    keys_changed: int = 0
    #: windows and joins: late records, windows fired in this batch, windows still open
    late: int = 0
    windows_fired: int = 0
    windows_open: int = 0
    #: windows: the operator watermark; framed shuffle sinks: their source queue's watermark (None: none yet)
    watermark: int | None = None
    #: windowed and interval joins: the end up to which windows have closed (the watermark the join passed)
    horizon: int | None = None
    #: joins: results emitted
    emitted: int = 0
    #: shuffle sources: control records (watermark markers, ticks) read
    markers: int = 0
    #: keyed process functions: timers fired in this batch, timers still pending (event and processing time);
    #: interval joins: records dropped in this batch, records waiting for a partner
    timers_fired: int = 0
    timers_pending: int = 0
    #: keyed process functions, stream–table joins, running aggregations in data-time order: records held
    #: until the watermark passes their data time (``rstream.processors.ordered``)
    held: int = 0
    #: windows and joins: the first open windows, ``(key text, start, end)``; interval joins: the first
    #: waiting records, ``(side and key, data time, time the watermark must reach to drop it)``
    pending: tuple[tuple[str, int, int], ...] = ()
    #: which counters the operator reports (the mapping's keys)
    reported: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    @classmethod
    def of(cls, **counters: Any) -> OperatorMetrics:
        """The metrics with these counters reported (unknown names are an error)."""
        if "pending" in counters:
            counters["pending"] = tuple((str(k), int(s), int(e)) for k, s, e in counters["pending"])
        return cls(reported=frozenset(counters), **counters)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OperatorMetrics:
        """Back from the JSON of a commit tag (names this version does not know are dropped)."""
        known = {f.name for f in fields(cls)} - {"reported"}
        return cls.of(**{k: v for k, v in data.items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        """The reported counters, for JSON."""
        return {name: getattr(self, name) for name in self}

    def __getitem__(self, name: str) -> Any:
        if name not in self.reported:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return (f.name for f in fields(self) if f.name in self.reported)

    def __len__(self) -> int:
        return len(self.reported)
