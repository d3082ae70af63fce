"""Interval joins: ``left.join(right).where(lk).equal_to(rk).between(lower, upper).apply(fn)``.

A left record at data time ``l`` and a right record of the same key at ``r`` are a pair when
``lower <= r - l <= upper`` (Flink's ``IntervalJoin``, Kafka Streams' ``JoinWindows`` with before and
after). Each pair is emitted once, when the second of the two arrives, at data time ``max(l, r)``.

Each side's records wait in the state store, per side and key, as ``[data time, value, matched]``
sorted by data time: a record finds its partners by bisection, and a key's list is decoded and
written once per batch, so a batch costs time linear in its records, not in records times the
records waiting (a list rewritten per record was quadratic per key). A
left record can meet no further right record once the operator watermark passes ``l + upper``, and a
right record no further left one once it passes ``r - lower``: an event-time timer then drops it (a
left join first emits ``fn(left, None)`` for a left record that met nobody, at data time
``max(l, l + upper)``). Why that is exact: a record on time at its source queue has a data time at or
above the operator watermark (the minimum over the queues), so every partner it can have is still
waiting. A record behind its source queue's watermark is late; so is one below the watermark the
operator already passed while a source queue was idle (its partners may have been dropped): both go to
the job's late-data topic, as a windowed join's do, and with ``joined.late()`` on as ``LateRecord``s
saying their side (Flink's ``sideOutputLeftLateData`` and ``sideOutputRightLateData``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping
from operator import itemgetter
from typing import Any

from rstream.processors.base import LateCause, Processor, StreamContext, _short_repr
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register
from rstream.processors.timed import LEFT, MAX_PENDING, SIDE_NAMES, PairJoin
from rstream.processors.watermarks import finite
from rstream.settings import JobProperties
from rstream.state.store import MISSING
from rstream.time.units import Time
from rstream.time.watermark import NO_WATERMARK

_TIME = itemgetter(0)


def describe_interval(lower: int, upper: int) -> str:
    """How graphs and the topology name an interval: ``between Time.minutes(-5) and Time.minutes(5)``."""
    return f"between {Time(lower)!r} and {Time(upper)!r}"


class IntervalJoinProcessor(PairJoin):
    """An inner (``how="inner"``) or left (``how="left"``) interval join on one shuffle queue of the join
    topic. State: ``(side, key) -> [[data time, value, matched], ...]``; a timer per side, key and data
    time at the time the watermark must pass to drop those records."""

    def __init__(self, name: str, how: str, lower: int, upper: int, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name, how, None, fn)
        self.lower, self.upper = lower, upper

    @property
    def results_later(self) -> bool:
        return True

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        ctx.time.operators.append(self)  # (the base class does so only for a window)
        #: The waiting records of each ``(side, key)`` the batch touched, sorted by data time (a key's
        #: list is decoded once per batch and written once, at ``flush``), and those it changed.
        self.cache: dict[tuple[int, Any], list[list[Any]]] = {}
        self.dirty: set[tuple[int, Any]] = set()

    def result_of(self, key: Any, state_key: Any) -> bool:
        # its state entries are (side, key): their results are keyed by ``key``
        return bool(key == state_key or (isinstance(state_key, tuple) and len(state_key) == 2 and key == state_key[1]))

    def expiry(self, side: int, ts: int) -> int:
        """The data time after which a record of ``side`` at ``ts`` can meet no further partner."""
        return ts + self.upper if side == LEFT else ts - self.lower

    def _waiting(self, state_key: tuple[int, Any]) -> list[list[Any]]:
        """The records of ``state_key`` waiting for a partner, sorted by data time (the batch's copy)."""
        entries = self.cache.get(state_key)
        if entries is None:
            stored = self.store.get(self.name, state_key)
            # sorted by data time, arrival order kept among equal times (a stable sort: a list an
            # older version kept in arrival order comes back sorted)
            entries = self.cache[state_key] = [] if stored is MISSING else sorted(stored, key=_TIME)
        return entries

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        ctx = self.ctx
        side, carried = ctx.at.frame.side, ctx.at.frame.watermark
        if ts < carried:
            self._late(key, value, ts, carried, LateCause.BEHIND_WATERMARK,
                       f"data time {ts} is behind its source queue's watermark {carried}", SIDE_NAMES[side])
            return
        if ts < self.horizon:
            self._late(key, value, ts, self.horizon, LateCause.INTERVAL_PASSED,
                       f"data time {ts} is behind the join's watermark {self.horizon}: records it could have "
                       "met were already dropped while its source queue was idle", SIDE_NAMES[side])
            return
        other_key = (1 - side, key)
        others = self._waiting(other_key)
        lo, hi = (ts + self.lower, ts + self.upper) if side == LEFT else (ts - self.upper, ts - self.lower)
        # the partners: a run of the other side's sorted list, found by bisection
        first, last = bisect_left(others, [lo]), bisect_left(others, [hi + 1])
        if side == LEFT:
            for r_ts, right, _ in others[first:last]:
                self._emit(key, value, right, max(ts, r_ts), value)
        else:
            for l_ts, left, _ in others[first:last]:
                self._emit(key, left, value, max(ts, l_ts), value)
            # marked once every pair is out: a record whose fn raised changes nothing
            for entry in others[first:last]:
                if not entry[2]:
                    entry[2] = True
                    self.dirty.add(other_key)
        mine_key = (side, key)
        mine = self._waiting(mine_key)
        mine.insert(bisect_left(mine, [ts + 1]), [ts, value, last > first])  # after those of its time
        self.dirty.add(mine_key)
        self.store.set_timer(self.name, self.expiry(side, ts) + 1, (side, key, ts))

    def on_watermark(self, watermark: int) -> None:
        """Drop every record the watermark passed the interval of (a left join emits the unmatched lefts).
        A key's records expire in order of their data times, so those due are the front of its list."""
        store, name = self.store, self.name
        last_end = NO_WATERMARK
        due: dict[tuple[int, Any], int] = {}  # (side, key) -> the latest data time due
        for end, (side, key, ts) in store.timers_due(name, watermark):
            due[(side, key)] = max(ts, due.get((side, key), ts))
            store.cancel_timer(name, end, (side, key, ts))
            self.fired += 1
            last_end = max(last_end, end)
        for state_key, until in due.items():
            side, key = state_key
            entries = self._waiting(state_key)
            cut = bisect_left(entries, [until + 1])
            if self.how == "left" and side == LEFT:
                for ts, left, matched in entries[:cut]:
                    if not matched:
                        self._emit(key, left, None, ts + max(0, self.upper), left)
            del entries[:cut]
            self.dirty.add(state_key)
        self._fired_up_to(watermark, last_end)

    def staged(self) -> list[tuple[Any, Any]]:
        """``(state key, waiting records)`` changed in memory that ``flush`` will write to the store."""
        return [(k, self.cache[k]) for k in self.dirty if self.cache[k]]

    def flush(self) -> None:
        store, name = self.store, self.name
        for state_key in self.dirty:
            entries = self.cache[state_key]
            if entries:
                store.put(name, state_key, entries)
            elif store.get(name, state_key) is not MISSING:
                store.delete(name, state_key)
        self.dirty = set()
        super().flush()

    def metrics(self) -> OperatorMetrics:
        # a waiting record is a pending timer; ``pending`` lists them as ("left 'k1'", data time, drop time)
        pending = self.store.timers(self.name)
        return OperatorMetrics.of(
            records_in=self.records_in, emitted=self.emitted, late=self.late, timers_fired=self.fired,
            timers_pending=len(pending), horizon=finite(self.horizon),
            pending=[(f"{'left' if side == LEFT else 'right'} {_short_repr(key)}", ts, end)
                     for end, (side, key, ts) in pending[:MAX_PENDING]])


def _interval_join(how: str) -> Any:
    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        return IntervalJoinProcessor(name, how, params["lower"], params["upper"], params["fn"])
    return make


#: ``left.join(right).where(lk).equal_to(rk).between(lower, upper).apply(fn)``: pairs whose right data
#: time minus left data time is in ``[lower, upper]``.
INTERVAL_JOIN = register(OperatorSpec("interval_join", STATEFUL_STYLE, _interval_join("inner"), shuffle=Shuffle.JOIN,
                                      stateful=True, keyed_state=False, timed=True))
#: ``left.left_join(right)...between(lower, upper)``: also ``fn(left, None)`` for a left record that met
#: nobody, once the watermark passes its interval.
LEFT_INTERVAL_JOIN = register(OperatorSpec("left_interval_join", STATEFUL_STYLE, _interval_join("left"),
                                           shuffle=Shuffle.JOIN, stateful=True, keyed_state=False, timed=True))
