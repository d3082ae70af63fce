"""Joins of two streams shuffled by key into one topic (each record says its side).

Without a window a join keeps the latest value per key and side. An inner join emits when both
sides have the key; a left join also emits ``fn(left, None)`` at once for a left record that finds
no right value. With a window the sides are buffered per window; an inner join emits every pair
in the same window, and a left join emits ``fn(left, None)`` for each left record still unmatched
when its window closes.

A windowed join's late records (behind their source queue's watermark, or for a window that already
closed) go to the job's late-data topic and, with ``joined.late()``, on as ``LateRecord``s saying
their side; a join without a window keeps the latest value per key and has no late records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rstream.processors.base import LateCause, Processor, _short_repr
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register
from rstream.processors.timed import LEFT, MAX_PENDING, RIGHT, SIDE_NAMES, PairJoin
from rstream.processors.watermarks import finite
from rstream.settings import JobProperties
from rstream.state.store import MISSING
from rstream.time.watermark import NO_WATERMARK


class JoinProcessor(PairJoin):
    """An inner (``how="inner"``) or left (``how="left"``) join on one shuffle queue of the join topic."""

    def result_of(self, key: Any, state_key: Any) -> bool:
        # a join's state entry is (side, key, window start, window end): its results are keyed by ``key``
        return bool(key == state_key or (isinstance(state_key, tuple) and len(state_key) == 4 and key == state_key[1]))

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        side = self.ctx.at.frame.side
        if self.window is None:
            self._latest(key, value, ts, side)
        else:
            self._windowed(key, value, ts, side)

    def _latest(self, key: Any, value: Any, ts: int, side: int) -> None:
        store, name = self.store, self.name
        store.put(name, (side, key), value)
        other = store.get(name, (1 - side, key))
        if side == LEFT:
            if other is not MISSING:
                self._emit(key, value, other, ts, value)
            elif self.how == "left":
                self._emit(key, value, None, ts, value)
        elif other is not MISSING:
            self._emit(key, other, value, ts, value)

    def _windowed(self, key: Any, value: Any, ts: int, side: int) -> None:
        ctx = self.ctx
        carried = ctx.at.frame.watermark
        if ts < carried:
            self._late(key, value, ts, carried, LateCause.BEHIND_WATERMARK,
                       f"data time {ts} is behind its source queue's watermark {carried}", SIDE_NAMES[side])
            return
        store, name, window = self.store, self.name, self.window
        assert window is not None  # (a windowed join's)
        for start, end in window.assign(ts):
            if end <= self.horizon:
                self._late(key, value, ts, self.horizon, LateCause.WINDOW_FIRED,
                           f"its window [{start},{end}) already closed: its source queue was idle", SIDE_NAMES[side])
                continue
            mine_key, other_key = (side, key, start, end), (1 - side, key, start, end)
            mine = store.get(name, mine_key)
            other = store.get(name, other_key)
            if mine is MISSING and other is MISSING:
                store.set_timer(name, end, (key, start))
            mine = [] if mine is MISSING else mine
            other = [] if other is MISSING else other
            if side == LEFT:
                for right in other:
                    self._emit(key, value, right[0], ts, value)
                mine.append([value, bool(other)])
            else:
                for left in other:
                    self._emit(key, left[0], value, ts, value)
                    left[1] = True
                if other:
                    store.put(name, other_key, other)
                mine.append([value, True])
            store.put(name, mine_key, mine)

    def on_watermark(self, watermark: int) -> None:
        store, name = self.store, self.name
        last_end = NO_WATERMARK
        for end, (key, start) in store.timers_due(name, watermark):
            lefts = store.get(name, (LEFT, key, start, end))
            if self.how == "left" and lefts is not MISSING:
                for left in lefts:
                    if not left[1]:
                        self._emit(key, left[0], None, end - 1, left[0])
            store.delete(name, (LEFT, key, start, end))
            store.delete(name, (RIGHT, key, start, end))
            store.cancel_timer(name, end, (key, start))
            self.fired += 1
            last_end = max(last_end, end)
        self._fired_up_to(watermark, last_end)

    def metrics(self) -> OperatorMetrics:
        if self.window is None:
            return OperatorMetrics.of(records_in=self.records_in, emitted=self.emitted)
        pending = self.store.timers(self.name)
        return OperatorMetrics.of(
            records_in=self.records_in, emitted=self.emitted, late=self.late, windows_fired=self.fired,
            windows_open=len(pending), horizon=finite(self.horizon),
            pending=[(_short_repr(key), start, end) for end, (key, start) in pending[:MAX_PENDING]])


def _join(how: str) -> Any:
    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        return JoinProcessor(name, how, params.get("window"), params["fn"])
    return make


#: ``left.join(right).where(lk).equal_to(rk)[.window(w)].apply(fn)``: both sides keyed and shuffled into one topic.
JOIN = register(OperatorSpec("join", STATEFUL_STYLE, _join("inner"), shuffle=Shuffle.JOIN, stateful=True,
                            keyed_state=False))
#: ``left.left_join(right)...``: every left record is emitted, with None for a missing right.
LEFT_JOIN = register(OperatorSpec("left_join", STATEFUL_STYLE, _join("left"), shuffle=Shuffle.JOIN,
                                 stateful=True, keyed_state=False))
