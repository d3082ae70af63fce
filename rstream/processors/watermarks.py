"""The watermark of an operator on a shuffle queue: the minimum over the source queues that feed it
(its *producers*) of their latest watermark, which shuffle sinks send as markers at the end of each
batch. A producer silent for ``idle_timeout_ms`` of processing time stops holding the minimum back;
when every producer is idle, every open window fires (a quiet stream's last window too).

Processing time here is the broker's clock: a producer was last active when its latest marker was
stored, and the consumer's "now" is the store time of the last record it read, or the wall clock once
it has read its whole queue (``StreamContext.idle_clock``). So a consumer catching up on a backlog
never mistakes the backlog for silence."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rstream.time.watermark import NO_WATERMARK

if TYPE_CHECKING:
    from rstream.state.store import StateStore

#: The operator watermark when every producer is idle: every open window is due.
FIRE_ALL = 2**62

_NAMESPACE = "__watermarks__"


@dataclass
class ProducerState:
    watermark: int
    active_ms: int
    #: its latest marker came from a range that had not read its whole queue: more data is coming
    behind: bool = False
    #: its input ended (``run_until_idle``'s flush): it holds nothing back until it sends data again
    ended: bool = False


class OperatorWatermark:
    """Per shuffle queue: each producer's latest watermark and when it last had data."""

    def __init__(self, producers: list[str], idle_timeout_ms: int, store: StateStore, now_ms: int,
                 framed_topics: Collection[str] = ()) -> None:
        self.producers = producers
        self.idle_timeout_ms = idle_timeout_ms
        self.store = store
        #: The producers whose own input is a window or join topic: their input ends with a flush marker
        #: of theirs, after what the end of input made them send; every other producer's input ends
        #: with the flush tick that ``run_until_idle`` sends once it has read them to the end.
        self.chained = frozenset(p for p in producers if p.rpartition("/")[0].rpartition("/")[0] in framed_topics)
        saved = store.get(_NAMESPACE, "table")
        if isinstance(saved, dict):
            self.started_ms = int(saved["started"])
            self.table = {p: ProducerState(int(s[0]), int(s[1]), *(bool(flag) for flag in s[2:4]))
                          for p, s in saved["producers"].items()}
        else:
            self.started_ms = now_ms
            self.table = {}
        self.changed = not isinstance(saved, dict)
        #: The producers that were not idle, and the watermark, at the last ``current`` (``observe``).
        self._active: list[str] = []
        self._floor = FIRE_ALL

    def update(self, producer: str, watermark: int, active_ms: int, behind: bool = False, ended: bool = False) -> None:
        """A marker of ``producer``: its watermark, when it was stored, whether its range left a
        backlog in its queue (then it is not idle, however long its next batch takes), and whether
        its input ended (a flush marker)."""
        old = self.table.get(producer)
        wm = watermark if old is None else max(old.watermark, watermark)
        if old is None or active_ms >= old.active_ms:
            self.table[producer] = ProducerState(wm, active_ms, behind, ended)
        else:
            self.table[producer] = ProducerState(wm, old.active_ms, old.behind, old.ended or ended)
        self.changed = True

    def end_input(self) -> None:
        """``run_until_idle``'s flush tick: the input of every producer that is not ``chained`` ended
        (it was read to its end before the flush was sent)."""
        for p in self.producers:
            if p not in self.chained:
                state = self.table.get(p)
                if state is None:
                    self.table[p] = ProducerState(NO_WATERMARK, self.started_ms, False, True)
                else:
                    state.ended = True
        self.changed = True

    def all_ended(self) -> bool:
        """Whether the input of every producer ended: then everything is due, as at the end of input,
        once; the producers are no longer taken as ended (new input may come: another run)."""
        table = self.table
        if not all(p in table and table[p].ended for p in self.producers):
            return False
        for p in self.producers:
            table[p].ended = False
        self.changed = True
        return True

    def idle(self, producer: str, now_ms: int | None) -> bool:
        """Whether ``producer`` has been silent for longer than the idle timeout at ``now_ms`` (None: no
        producer can be judged idle yet). A producer whose latest range left a backlog in its own queue
        is never idle: its next records are there, only not read yet (a slow batch is not silence)."""
        state = self.table.get(producer)
        if state is not None and state.ended:
            return True
        if now_ms is None:
            return False
        if state is not None and state.behind:
            return False
        last = state.active_ms if state is not None else self.started_ms
        return now_ms - last > self.idle_timeout_ms

    def current(self, now_ms: int | None, force_idle: bool = False) -> int:
        """The watermark that gates firing: min over producers that are not idle."""
        if force_idle:
            self._active, self._floor = [], FIRE_ALL
            return FIRE_ALL
        active = self._active = [p for p in self.producers if not self.idle(p, now_ms)]
        self._floor = self._minimum(active)
        return self._floor

    def _minimum(self, producers: list[str]) -> int:
        if not producers:
            return FIRE_ALL
        table = self.table
        return min(table[p].watermark if p in table else NO_WATERMARK for p in producers)

    def observe(self, producer: str, watermark: int) -> bool:
        """A record of ``producer`` carried ``watermark`` (its source queue's when it was read): raise
        that producer's watermark to it. Returns whether that raised the minimum over the producers
        that were not idle at the last ``current`` (then ``current`` is worth asking again)."""
        state = self.table.get(producer)
        if state is not None and watermark <= state.watermark:
            return False
        if state is None:
            self.table[producer] = ProducerState(watermark, self.started_ms)
        else:
            state.watermark = watermark
        self.changed = True
        return producer in self._active and self._minimum(self._active) > self._floor

    def holding_back(self, now_ms: int | None, all_idle: bool = False) -> str | None:
        """The producer whose watermark is the minimum (why windows have not fired yet); None when
        every producer is idle (``all_idle``: a flush declared them so)."""
        active = [] if all_idle else [p for p in self.producers if not self.idle(p, now_ms)]
        if not active:
            return None
        return min(active, key=lambda p: self.table[p].watermark if p in self.table else NO_WATERMARK)

    def persist(self) -> None:
        if self.changed:
            self.store.put(_NAMESPACE, "table", {
                "started": self.started_ms,
                "producers": {p: (s.watermark, s.active_ms, s.behind, s.ended) for p, s in self.table.items()},
            })
            self.changed = False

    def describe(self, now_ms: int | None, all_idle: bool = False) -> dict[str, Any]:
        return {
            p: {
                "watermark": self.table[p].watermark if p in self.table else None,
                "idle": all_idle or self.idle(p, now_ms),
            }
            for p in self.producers
        }


def finite(watermark: int) -> int | None:
    """A watermark for display: None before any record, and never the FIRE_ALL sentinel."""
    if watermark <= NO_WATERMARK or watermark >= FIRE_ALL:
        return None
    return watermark
