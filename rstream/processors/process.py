"""``grouped.process(fn)``: a keyed process function with timers, for what no built-in operator does.

``fn`` is an instance of a subclass of ``KeyedProcessFunction``: ``process(key, value, ctx)`` runs
for every record, ``on_timer(key, timestamp, ctx)`` for every timer of the key that fires. Through
``ctx`` it reads and writes one value per key (``ctx.state``), sets event-time and processing-time
timers, and forwards records. This is Flink's ``KeyedProcessFunction``, Kafka Streams' Processor API
with punctuators and Spark's ``transformWithState``; RocketMQ Streams 1.1 has ``GroupedStream.
addGraphNode(name, supplier)``, which adds a user ``Processor`` (``preProcess(context)``,
``process(data)``) to a keyed stream, with neither timers nor state of its own.

How it runs, per shuffle queue:

- The value of a key is kept in the state store under ``(operator, key)``, like an aggregation's, so
  the state topic, ``job.state()`` and the state inspector show it.
- A timer is a key of the same store (``timer_key``: operator, time, the record key), sorted by time:
  event-time timers under the operator's name, processing-time timers under ``<operator>.processing-
  time``. A timer is set by a put and removed when it fires by a delete, both in the batch's
  changelog, so timers survive restarts and a lost local state (the replay restores them), and a
  timer's firing and what ``on_timer`` did commit together in the batch's one tagged append: it
  fires exactly once.
- Records are taken in data-time order (``rstream.processors.ordered``): each is held until the
  operator watermark (the minimum over the source queues that feed it, as for windows; its shuffle
  topic carries their watermarks, ``OperatorSpec.timed``) passes its data time, then ``process``
  runs on the records it passed, earliest first. An event-time timer at ``t`` fires once the
  watermark reaches ``t``, before every record of time ``t`` or later. So the results are the same
  however the input was cut into batches: a backlog read in one batch fires its timers between its
  records exactly as the same records read a few at a time would. A record that was late where it
  was read is taken at the watermark it carried; ``ctx.timestamp`` is still its own time and
  ``ctx.watermark`` (the time the operator has reached) is later.
- A timer set for a time that has passed fires at once, after the call that set it. ``on_timer`` that
  sets its key a timer at or before its own time, again and again, is stopped after
  ``MAX_TIMERS_AT_ONCE`` firings at one time: a ``TimerLoopError``, to the dead-letter topic.
- When every source is idle (``idle_timeout_ms``) every held record is taken, and event time moves
  to the latest of them: timers up to it fire, later ones wait for data that brings their time. At
  the end of input (``run_until_idle``'s idle flush) every timer fires.
- Processing-time timers fire when the wall clock reaches them, checked at each watermark marker and
  idle tick of the queue and at the end of each of its batches (a re-executed batch, ``job.trace``,
  uses the batch's own clock), after the event-time work of that moment: unlike event time, where
  they fall among the records depends on when the batches ran. One that ``on_timer`` sets and that
  is already due fires at the next check.
- The effects of one call (state changes, timers, forwarded records) apply when it returns; a call
  that raises changes nothing, and its record goes to the dead-letter topic.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, Generic, TypeVar

from rstream.errors import RStreamError
from rstream.processors.base import Processor, RecordError, StreamContext, _short_repr
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.ordered import Held, InTimeOrder
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register
from rstream.processors.watermarks import FIRE_ALL, finite
from rstream.serde.codec import encode
from rstream.settings import JobProperties
from rstream.state.store import MISSING, StateStore, timer_key
from rstream.time.watermark import NO_WATERMARK

__all__ = ["PROCESS", "KeyedProcessFunction", "ProcessContext", "ProcessProcessor", "StateValueError"]

K = TypeVar("K")
V = TypeVar("V")

#: The suffix of the namespace of an operator's processing-time timers in its state store.
PROCESSING_TIME_TIMERS = ".processing-time"
EVENT_TIME, PROCESSING_TIME = 0, 1
_CLEARED: Any = object()
#: How often one key's event-time timers may fire at one time before a loop is assumed
#: (``on_timer`` setting a timer at or before its own time, again and again).
MAX_TIMERS_AT_ONCE = 1000


class TimerLoopError(RStreamError):
    """``on_timer`` of a key kept setting a timer at or before the time it fired at."""


class StateValueError(RStreamError, TypeError):
    """``ctx.state.set(value)`` was given a value the state store cannot keep (it must be marshal-able
    or picklable: numbers, strings, lists, dicts, tuples, or objects of importable classes)."""


class KeyedProcessFunction(Generic[K, V]):
    """Base of a keyed process function: subclass it, define ``process`` (and ``on_timer`` if it sets
    timers), and pass an instance to ``grouped.process(fn)``.

    - ``process(self, key, value, ctx)``: one record of ``key``.
    - ``on_timer(self, key, timestamp, ctx)``: a timer of ``key`` set for ``timestamp`` fired
      (``ctx.time_domain`` says ``"event_time"`` or ``"processing_time"``).

    ``ctx`` (a ``ProcessContext``) gives ``ctx.state.get()`` / ``set(value)`` / ``clear()`` (this key's
    value, kept in the state store), ``ctx.timestamp`` (the record's data time, or the timer's time),
    ``ctx.watermark``, ``ctx.register_event_time_timer(ts)``, ``ctx.register_processing_time_timer(ts)``
    (and ``delete_...``), and ``ctx.forward(key, value)``. Times are epoch milliseconds.

    The instance is shipped to the Spark tasks (pickled): keep what must last in ``ctx.state``, not
    in attributes, which are neither persisted nor shared between queues. Example, de-duplication
    with a time to live::

        class Dedup(KeyedProcessFunction):
            def process(self, key, value, ctx):
                if ctx.state.get() is None:          # first time this key is seen (within the TTL)
                    ctx.state.set(True)
                    ctx.register_event_time_timer(ctx.timestamp + 60_000)
                    ctx.forward(key, value)

            def on_timer(self, key, timestamp, ctx):
                ctx.state.clear()                    # forget the key: it may pass again
    """

    def process(self, key: K, value: V, ctx: ProcessContext) -> None:
        raise TypeError(f"{type(self).__name__} must define process(self, key, value, ctx)")

    def on_timer(self, key: K, timestamp: int, ctx: ProcessContext) -> None:
        """A timer fired; by default nothing happens."""


class KeyState:
    """``ctx.state``: the value of the current key (None when it has none)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ProcessContext) -> None:
        self._ctx = ctx

    def get(self, default: Any = None) -> Any:
        """The key's value, or ``default`` when it has none. A changed value must be ``set`` again to
        be kept (changing a list in place is not enough)."""
        ctx = self._ctx
        value = ctx._value
        if value is MISSING:
            value = ctx._store.get(ctx._name, ctx.key)
        return default if value is MISSING or value is _CLEARED else value

    def set(self, value: Any) -> None:
        """Keep ``value`` for the key (in the state store and the state topic when the batch commits).
        Raises ``StateValueError`` for a value that cannot be stored (a lambda, a lock, a generator)."""
        try:
            encode(value)
        except Exception as exc:
            raise StateValueError(
                f"ctx.state.set needs a value rstream can store (marshal-able or picklable); "
                f"{_short_repr(value, 80)} of type {type(value).__name__} is not: {type(exc).__name__}: {exc}") from exc
        self._ctx._value = value

    def clear(self) -> None:
        """Forget the key's value (deleted from the store, a tombstone in the state topic)."""
        self._ctx._value = _CLEARED


class ProcessContext:
    """What a keyed process function's calls see (see ``KeyedProcessFunction``); one per operator and
    queue, reused for every call. What a call does takes effect when it returns."""

    def __init__(self, name: str, store: StateStore, now_ms: Any) -> None:
        self._name = name
        self._store = store
        self._now_ms = now_ms
        self.state = KeyState(self)
        #: The key of the record or timer being handled.
        self.key: Any = None
        #: The record's data time, or the time of the timer that fired (epoch ms).
        self.timestamp = 0
        #: ``"event_time"`` or ``"processing_time"`` in ``on_timer``; None in ``process``.
        self.time_domain: str | None = None
        self._watermark = NO_WATERMARK
        self._begin(None, 0)

    @property
    def watermark(self) -> int | None:
        """The event time the operator has reached (epoch ms; None before any): the time of the record
        or timer being handled, or later for a record that was late where it was read. Every timer up
        to it has fired, and no record earlier than it comes after (but such a late one)."""
        return finite(self._watermark)

    def current_processing_time(self) -> int:
        """The processing time now (epoch ms): the wall clock, or a re-executed batch's own."""
        return int(self._now_ms())

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer(key, timestamp, ctx)`` once the operator watermark reaches ``timestamp``. One
        timer per key and time: registering it again changes nothing."""
        self._timers[(EVENT_TIME, _time(timestamp))] = True

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call ``on_timer(key, timestamp, ctx)`` once the wall clock reaches ``timestamp`` (epoch ms),
        checked at each marker and idle tick of the queue and at the end of each of its batches."""
        self._timers[(PROCESSING_TIME, _time(timestamp))] = True

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Remove this key's event-time timer at ``timestamp``, if set."""
        self._timers[(EVENT_TIME, _time(timestamp))] = False

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Remove this key's processing-time timer at ``timestamp``, if set."""
        self._timers[(PROCESSING_TIME, _time(timestamp))] = False

    def forward(self, key: Any, value: Any) -> None:
        """Emit ``(key, value)`` downstream, with ``ctx.timestamp`` as its data time."""
        self._out.append((key, value))

    def _begin(self, key: Any, timestamp: int, domain: str | None = None) -> None:
        self.key, self.timestamp, self.time_domain = key, timestamp, domain
        self._value: Any = MISSING
        self._timers: dict[tuple[int, int], bool] = {}
        self._out: list[tuple[Any, Any]] = []


def _time(timestamp: Any) -> int:
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)):
        raise TypeError(f"a timer's time must be epoch milliseconds (an int), got {timestamp!r}")
    return int(timestamp)


class ProcessProcessor(Processor):
    """A keyed process function on one shuffle queue (``rstream.processors.process`` says how)."""

    emits_results = True
    results_later = True

    def __init__(self, name: str, fn: KeyedProcessFunction[Any, Any]) -> None:
        super().__init__(name)
        self.fn = fn
        self.timer_names = (name, name + PROCESSING_TIME_TIMERS)
        self.emitted = 0
        self.fired = 0

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        if ctx.store is None:
            raise RuntimeError(f"{self.name} needs a state store for {ctx.at.topic}/{ctx.at.queue}")
        self.store = ctx.store
        self.order = InTimeOrder(self.name, ctx)
        self.context = ProcessContext(self.name, ctx.store, ctx.now_ms)
        self.context._watermark = self.order.position
        # the children as the batch has them: what a record's call forwards that raises further down
        # makes that record a dead letter, also when it is taken as the batch ends
        self.hand_on = self.forward
        #: While event time moves on (``_run``): the event-time timers due, as (time taken at, time,
        #: key bytes, key), and the latest time a timer set meanwhile may have to fire in the same run.
        self._due: list[tuple[int, int, bytes, Any]] | None = None
        self._due_until = NO_WATERMARK
        ctx.time.operators.append(self)

    def process(self, key: Any, value: Any, ts: int) -> None:
        """Hold the record until the operator watermark passes its data time (``ordered``)."""
        self.records_in += 1
        self.order.hold(0, key, value, ts)

    def on_watermark(self, watermark: int) -> None:
        """Take the held records the watermark passed and fire the event-time timers it reached, in
        data-time order; then the processing-time timers due now. When every source is idle, every
        held record is taken but event time only moves to the latest of them: a timer beyond it waits
        for data that brings it (or for the end of input, ``run_until_idle``'s flush, which fires all)."""
        order = self.order
        if watermark < FIRE_ALL:
            self._run(watermark, watermark)
        elif self.ctx.time.flushed:
            self._run(FIRE_ALL, FIRE_ALL)
        else:
            self._run(FIRE_ALL, order.last())
        self.context._watermark = order.position
        processing = self.timer_names[1]
        self._fire_processing(self.store.timers_due(processing, self.context.current_processing_time()))

    def _run(self, records_until: int, timers_until: int) -> None:
        """Take the held records due before ``records_until`` and fire the event-time timers up to
        ``timers_until``, in data-time order: a timer before a record of the same time."""
        order, store = self.order, self.store
        now = order.position
        due = self._due = [(max(at, now), at, encode(key), key) for at, key in store.timers_due(self.name, timers_until)]
        self._due_until = timers_until
        fired_here: dict[bytes, int] = {}
        at_time = NO_WATERMARK
        try:
            while True:
                held = order.head(records_until)
                if due and (held is None or due[0][0] <= held.at):
                    at, ts, kb, key = heapq.heappop(due)
                    if at != at_time:
                        at_time, fired_here = at, {}
                    fired_here[kb] = n = fired_here.get(kb, 0) + 1
                    self._fire_event(at, ts, key, n)
                elif held is not None:
                    self._take(order.pop())
                else:
                    return
        finally:
            self._due = None

    def _take(self, held: Held) -> None:
        """One held record: ``fn.process`` on it, and what that call did."""
        c = self.context
        with self.order.taking(held):
            c._begin(held.key, held.ts)
            c._watermark = self.order.position
            try:
                self.fn.process(held.key, held.value, c)
            except Exception as exc:
                self.order.dead_letter(held, self.ctx.record_error(self.name, exc, held.value))
                return
            try:
                self._apply(c, held.ts)
            except RecordError as err:  # what it forwarded raised further down
                self.order.dead_letter(held, err)

    def _apply(self, c: ProcessContext, ts: int) -> None:
        """What one call did: its key's value, its timers, then its records forwarded."""
        store, name, key = self.store, self.name, c.key
        if c._value is _CLEARED:
            store.delete(name, key)
        elif c._value is not MISSING:
            store.put(name, key, c._value)
        for (domain, at), on in c._timers.items():
            where = self.timer_names[domain]
            if on:
                store.set_timer(where, at, key)
                if domain == EVENT_TIME and self._due is not None and at <= self._due_until:
                    # due in this run: at once if its time has passed, else at its time
                    heapq.heappush(self._due, (max(at, self.order.position), at, encode(key), key))
            else:
                self._cancel(where, at, key)
        for k, v in c._out:
            self.emitted += 1
            self.hand_on(k, v, ts)

    def _cancel(self, where: str, at: int, key: Any) -> None:
        """Drop a timer: a delete for the state topic, or nothing if it was set in this batch only."""
        store = self.store
        if store.has_timer(where, at, key):
            store.cancel_timer(where, at, key, new=store.committed_raw(timer_key(where, at, key)) is None)

    def _fire_event(self, at: int, ts: int, key: Any, n: int) -> None:
        """Fire the event-time timer of ``key`` at ``ts``, taken at ``at`` (later than ``ts`` when it was
        set after its time had passed), if it is still set; the ``n``-th of its key at ``at``."""
        where = self.timer_names[EVENT_TIME]
        if not self.store.has_timer(where, ts, key):
            return  # deleted since it was listed
        self.order.reach(at)
        if n > MAX_TIMERS_AT_ONCE:
            self._cancel(where, ts, key)
            err = self.ctx.record_error(self.name, TimerLoopError(
                f"on_timer of key {_short_repr(key)} set a timer at or before the time it fired at {at} "
                f"{MAX_TIMERS_AT_ONCE} times: it would never stop; set the next timer later than ctx.timestamp"),
                f"event_time timer {ts} of key {_short_repr(key)}")
            self._timer_failed(err, ts)
            return
        self.context._watermark = self.order.position
        self._fire_one(EVENT_TIME, ts, key)

    def _fire_processing(self, due: list[tuple[int, Any]]) -> None:
        """Fire the processing-time timers ``due``, earliest first (those still set: an earlier one's
        ``on_timer`` may have deleted a later one of its key)."""
        where = self.timer_names[PROCESSING_TIME]
        for at, key in due:
            if self.store.has_timer(where, at, key):
                self._fire_one(PROCESSING_TIME, at, key)

    def _fire_one(self, domain: int, at: int, key: Any) -> None:
        """Fire one timer that is set: it is gone, then ``on_timer`` runs and what it did applies."""
        self._cancel(self.timer_names[domain], at, key)
        self.fired += 1
        c = self.context
        label = "event_time" if domain == EVENT_TIME else "processing_time"
        c._begin(key, at, label)
        try:
            self.fn.on_timer(key, at, c)
        except Exception as exc:
            what = f"{label} timer {at} of key {_short_repr(key)}"
            self._timer_failed(self.ctx.record_error(self.name, exc, what), at)
            return
        try:
            self._apply(c, at)
        except RecordError as err:  # what it forwarded raised further down
            self._timer_failed(err, at)

    def _timer_failed(self, err: RecordError, at: int) -> None:
        """A timer's ``on_timer`` raised (then nothing it did is applied), or an operator after it raised
        on what it forwarded: the timer is gone, and the error goes to the dead-letter topic
        (``skip_data_error``, the default) with the timer in its value; the other timers fire on."""
        if not self.ctx.settings.skip_data_error:
            raise err
        self.ctx.dead_letter(err, None, b"", at)

    def flush(self) -> None:
        self.order.flush()

    def pending(self) -> list[tuple[int, Any]]:
        """Every pending timer ``(time, key)``, event time first then processing time."""
        return [t for where in self.timer_names for t in self.store.timers(where)]

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, emitted=self.emitted, timers_fired=self.fired,
                                  timers_pending=len(self.pending()), held=len(self.order),
                                  watermark=self.context.watermark)


def _make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return ProcessProcessor(name, params["fn"])


#: ``grouped.process(fn)``: shuffled by key like an aggregation, on a framed topic (the watermark).
PROCESS = register(OperatorSpec("process", STATEFUL_STYLE, _make, shuffle=Shuffle.BY_KEY, stateful=True, timed=True))
