"""Time: units, time types, watermarks and windows."""

from rstream.time.units import Time, to_millis
from rstream.time.watermark import TimeType, next_watermark
from rstream.time.windows import (
    SessionWindow,
    SlidingWindow,
    TumblingWindow,
    Window,
    WindowEmit,
    WindowError,
    WindowKey,
    WindowResult,
)

__all__ = [
    "SessionWindow",
    "SlidingWindow",
    "Time",
    "TimeType",
    "TumblingWindow",
    "Window",
    "WindowEmit",
    "WindowError",
    "WindowKey",
    "WindowResult",
    "next_watermark",
    "to_millis",
]
