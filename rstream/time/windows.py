"""Windows aligned to the epoch, in milliseconds, end exclusive."""

from __future__ import annotations

from typing import Any, NamedTuple

from rstream.enums import TextEnum
from rstream.errors import RStreamError
from rstream.time.units import Time, to_millis


class WindowError(RStreamError, ValueError):
    """A window was given a size, slide or gap it cannot have."""


#: How a ``WindowKey`` reads (its ``str``, and a window result's message key): key, start, end.
WINDOW_KEY_FORMAT = "{}@[{},{})"


class WindowKey(NamedTuple):
    """The key of a window's result: the record key and the window ``[start, end)`` in epoch ms
    (RocketMQ Streams' ``WindowKey``, Kafka Streams' ``Windowed``)."""

    key: Any
    start: int
    end: int

    def __str__(self) -> str:
        return WINDOW_KEY_FORMAT.format(self.key, self.start, self.end)


class WindowEmit(TextEnum):
    """When a window emits its result (``window(w, emit=...)``)."""

    FINAL = "final"  # once, when the watermark reaches its end (RIP-58, RocketMQ Streams; the default)
    EARLY = "early"  # its current value at the end of every batch that changed it while open, then its final one


class WindowResult(NamedTuple):
    """A result of a window that emits early (``window(w, emit="early")``): ``value`` is the window's
    aggregate, and ``final`` is False for an early result (the window is still open; the value may
    change) and True for the one emitted when the window fires (its last). With the default
    ``emit="final"`` results are the plain values, as in RocketMQ Streams."""

    value: Any
    final: bool

    def __str__(self) -> str:
        return f"{self.value} ({'final' if self.final else 'early'})"


def window_emit(emit: Any) -> WindowEmit:
    """``emit`` as a ``WindowEmit`` (``"final"`` or ``"early"``); raises ``WindowError`` otherwise."""
    try:
        return WindowEmit(emit)
    except ValueError:
        raise WindowError(
            f"emit must be 'final' (one result per window, when it fires: the default) or 'early' (also the "
            f"current value after every batch while the window is open), got {emit!r}"
        ) from None


def _positive(value: Any, what: str) -> int:
    try:
        ms = to_millis(value, what)
    except TypeError as exc:
        raise WindowError(str(exc)) from None
    if ms <= 0:
        raise WindowError(f"{what} must be positive, got {value!r} ms")
    return ms


class Window:
    """Base of the window kinds; ``assign(t)`` gives the ``(start, end)`` windows holding time ``t``."""

    kind = "window"
    size: int

    def assign(self, t: int) -> list[tuple[int, int]]:
        raise TypeError(f"{type(self).__name__} does not assign fixed windows")

    def describe(self) -> str:
        return self.kind


class TumblingWindow(Window):
    """Fixed, non-overlapping windows of ``size``: ``TumblingWindow(Time.seconds(10))``."""

    kind = "tumbling"

    def __init__(self, size: int | Time) -> None:
        self.size = _positive(size, "the window size")

    def assign(self, t: int) -> list[tuple[int, int]]:
        start = t - t % self.size
        return [(start, start + self.size)]

    def describe(self) -> str:
        return f"tumbling {Time(self.size)!r}"

    def __repr__(self) -> str:
        return f"TumblingWindow({Time(self.size)!r})"


class SlidingWindow(Window):
    """Hopping windows of ``size`` that start every ``slide`` (a record is in ``size / slide`` of them)."""

    kind = "sliding"

    def __init__(self, size: int | Time, slide: int | Time) -> None:
        self.size = _positive(size, "the window size")
        self.slide = _positive(slide, "the window slide")
        if self.slide > self.size:
            raise WindowError(
                f"the slide ({self.slide} ms) must not exceed the size ({self.size} ms): records would fall between windows"
            )

    def assign(self, t: int) -> list[tuple[int, int]]:
        last = t - t % self.slide
        out = []
        start = last
        while start > t - self.size:
            out.append((start, start + self.size))
            start -= self.slide
        out.reverse()
        return out

    def describe(self) -> str:
        return f"sliding {Time(self.size)!r} / {Time(self.slide)!r}"

    def __repr__(self) -> str:
        return f"SlidingWindow({Time(self.size)!r}, {Time(self.slide)!r})"


class SessionWindow(Window):
    """Sessions per key that close after ``gap`` without records; a record that bridges two
    sessions merges them."""

    kind = "session"

    def __init__(self, gap: int | Time) -> None:
        self.gap = _positive(gap, "the session gap")
        self.size = self.gap

    def describe(self) -> str:
        return f"session gap {Time(self.gap)!r}"

    def __repr__(self) -> str:
        return f"SessionWindow({Time(self.gap)!r})"
