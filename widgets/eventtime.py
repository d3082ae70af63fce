"""``EventTimeChart``: the classic picture of event time against processing time, live.

Processing time runs left to right, event time bottom to top. Grey dots are records as they crossed
a window or join shuffle (when, and the data time they carried); a step line per source queue is its
watermark; the dashed line is the operator watermark (the minimum over producers that are not idle);
each window span is a band from when it opened to when it fired (amber while open, green once
fired); red crosses are late records, drawn when they were found, at their data time.

``EventTimeSnapshot`` is the plain object under it (``rstream.runtime.eventtime``, where ``job.what_if``
draws it too), drawn with matplotlib as a PNG: the same picture live in JupyterLab and in a static
notebook.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rstream import RocketMQStream
from rstream.runtime.eventtime import EVENT, FIRED, LATE, MAX_EVENTS, OPEN, EventTimeSnapshot, Span

from .html import box, note, status
from .live import LiveView

__all__ = ["EVENT", "FIRED", "LATE", "MAX_EVENTS", "OPEN", "EventTimeChart", "EventTimeSnapshot", "Span"]


class EventTimeChart(LiveView):
    """The event-time picture of ``job`` (see the module): per source queue its watermark over
    processing time, the operator watermark, window spans open and fired, records and late records.
    ``start()`` redraws it after every commit, at most once a second (one renderer thread)."""

    kind = "event-time"

    def __init__(self, job: RocketMQStream, interval: float = 1.0, **kwargs: Any) -> None:
        self.picture = box()
        legend = box()
        legend.value = note("grey dots: records (when they crossed the shuffle, their event time); lines: each "
                            "source queue's watermark and the operator watermark (dashed); bands: window spans, "
                            "amber while open, green once fired; red crosses: late records")
        status_line = box()
        super().__init__(job, [status_line, self.picture, legend], status_line, interval, **kwargs)
        self.refresh()

    def snapshot(self) -> EventTimeSnapshot:
        return EventTimeSnapshot.of(self.job)

    def draw(self) -> Hashable:
        seen = self.seen()
        snap = self.snapshot()
        self.status_line.value = status(snap.status)
        self.picture.value = snap.html()
        return seen
