"""What the timed operators share, in one neutral module so that no operator module imports another's
class: the base of window and join operators (``WindowedOperator``: the state store, the horizon up to
which windows have fired, late records), the base of the two-sided joins (``PairJoin``) and their sides,
and the ``LateRecord`` that ``.late()`` hands on (``rstream.processors.late``).

Each operator's own module (``window``, ``join``, ``interval_join``, ``late``) imports from here, never
from another operator's module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from rstream.processors.base import LateCause, Processor, RecordError, StreamContext
from rstream.processors.watermarks import FIRE_ALL
from rstream.state.store import MISSING
from rstream.time.watermark import NO_WATERMARK
from rstream.time.windows import Window


class LateRecord(NamedTuple):
    """A record that came too late for its window (or a join's interval), as ``.late()`` hands it on
    (its key is the record's key, its data time the record's). ``cause`` is coded (``LateCause``),
    ``reason`` tells it in words; ``watermark`` is what the record was judged by; ``operator`` is the
    window or join operator (``COUNT-4``, ``JOIN-5``); ``side`` is ``"left"`` or ``"right"`` for a
    join's record, None for an aggregation's. ``value`` is None only for a record of a combined
    partial that running its source range again did not give back (``reason`` says so)."""

    key: Any
    value: Any
    data_time: int
    watermark: int
    cause: LateCause
    reason: str
    operator: str
    side: str | None = None

    def __str__(self) -> str:
        where = self.operator if self.side is None else f"{self.operator}, {self.side}"
        return f"{self.value!r} at {self.data_time}: {self.cause}, watermark {self.watermark} ({where})"

    @property
    def late_ms(self) -> int:
        """How far behind the watermark it was (ms)."""
        return self.watermark - self.data_time


#: Pending windows listed per operator and queue in the progress (for "why has it not fired?").
MAX_PENDING = 20


class WindowedOperator(Processor):
    """What window and join operators share: the state store, and the *horizon*: the end up to which
    their windows have fired (a record whose window ends at or before it is late)."""

    emits_results = True
    fires_windows = True

    def __init__(self, name: str, window: Window | None) -> None:
        super().__init__(name)
        self.window = window
        self.late = 0
        self.fired = 0
        #: The children that take its late records (``.late()``), not its results.
        self.late_children: list[Processor] = []
        self.late_forward: Callable[[Any, Any, int], None] | None = None

    def wire(self) -> None:
        """``forward`` to the children that take results; ``late_forward`` to those that take late
        records (``rstream.processors.late``), None when there are none."""
        children = self.children
        self.late_children = [c for c in children if getattr(c, "takes_late", False)]
        if not self.late_children:
            super().wire()
            return
        self.children = [c for c in children if c not in self.late_children]
        super().wire()
        late = [c.process for c in self.late_children]
        if len(late) == 1:
            self.late_forward = late[0]
        else:
            def fan_out(key: Any, value: Any, ts: int) -> None:
                for kid in late:
                    kid(key, value, ts)

            self.late_forward = fan_out
        self.children = children  # (every processor stays reachable: ``walk``)

    @property
    def result_children(self) -> list[Processor]:
        """The children its results go to (all but the late ones)."""
        return [c for c in self.children if c not in self.late_children]

    @property
    def results_later(self) -> bool:
        return self.window is not None

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        assert ctx.store is not None
        self.store = ctx.store
        saved = self.store.get(self.name, "__horizon__")
        self.horizon = NO_WATERMARK if saved is MISSING else int(saved)
        self.horizon_changed = False
        self.watermark = NO_WATERMARK
        if self.window is not None:
            ctx.time.operators.append(self)

    def _fired_up_to(self, watermark: int, last_end: int) -> None:
        """After firing at ``watermark``: every window ending at or before it is closed (with every
        source idle, only the windows that existed: up to the last end fired)."""
        reached = watermark if watermark < FIRE_ALL else last_end
        if reached > self.horizon:
            self.horizon = reached
            self.horizon_changed = True
        if watermark < FIRE_ALL:
            self.watermark = max(self.watermark, watermark)

    def flush(self) -> None:
        if self.horizon_changed:
            self.store.put(self.name, "__horizon__", self.horizon)

    def _late(self, key: Any, value: Any, ts: int, watermark: int, cause: LateCause, reason: str,
              side: str | None = None) -> None:
        """A late record: counted, written to the job's late-data topic, and handed to the ``.late()``
        children as a ``LateRecord`` (``side``: a join's ``"left"`` or ``"right"``)."""
        self.late += 1
        self.ctx.late(self.name, key, value, ts, watermark, cause, reason)
        if self.late_forward is not None:
            try:
                self.late_forward(key, LateRecord(key, value, ts, watermark, cause, reason, self.name, side), ts)
            except RecordError as err:  # user code after ``.late()``: that late record is a dead letter
                if not self.ctx.settings.skip_data_error:
                    raise
                self.ctx.dead_letter(err, None, b"", ts)


LEFT, RIGHT = 0, 1
#: A side's name, as a join's ``LateRecord.side`` says it.
SIDE_NAMES = ("left", "right")


class PairJoin(WindowedOperator):
    """What the two-sided joins (window and interval) share: ``how`` (``"inner"`` or ``"left"``) and
    the user's ``fn(left, right)``, called on each pair by ``_emit``."""

    def __init__(self, name: str, how: str, window: Window | None, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name, window)
        self.how = how
        self.fn = fn
        self.emitted = 0

    def _emit(self, key: Any, left: Any, right: Any, ts: int, value: Any) -> None:
        """Forward ``fn(left, right)``; a raising ``fn`` is a record error of ``value``."""
        try:
            out = self.fn(left, right)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, value) from exc
        self.emitted += 1
        self.forward(key, out, ts)
