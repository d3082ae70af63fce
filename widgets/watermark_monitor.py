"""``WatermarkMonitor``: a live view of where event time stands in a job's windows and joins."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rstream import RocketMQStream

from .html import box, row
from .live import LiveView
from .watermarks import WatermarkSnapshot


class WatermarkMonitor(LiveView):
    """Per window or join shuffle queue: its operator watermark, the producer holding it back, windows
    open and fired, late records; the open windows with why each has not fired yet; every producer's
    and every source queue's watermark. A view over ``WatermarkSnapshot``.

    ``start()`` starts one renderer thread that polls ``job.progress`` every ``interval`` seconds
    (0.25) and redraws when a batch ran or the job started or stopped; ``stop()`` stops it after one
    last redraw. Neither blocks the kernel; only that thread sets the widget's values while it runs.
    """

    kind = "watermarks"

    def __init__(self, job: RocketMQStream, interval: float = 0.25, **kwargs: Any) -> None:
        self.queue_table = box()
        self.pending_table = box()
        self.producer_table = box()
        self.source_table = box()
        self.legend = box()
        status_line = box()
        super().__init__(job, [status_line, self.queue_table, self.pending_table,
                               row([self.producer_table, self.source_table]), self.legend],
                         status_line, interval, **kwargs)
        self.refresh()

    def snapshot(self) -> WatermarkSnapshot:
        """The job's watermarks now, as a plain object (``to_pandas()``, ``pending_to_pandas()``, ...)."""
        return WatermarkSnapshot.of(self.job)

    def draw(self) -> Hashable:
        seen = self.seen()  # before the snapshot: a batch that lands meanwhile is drawn next time
        snap = self.snapshot()
        self.status_line.value = snap.status_html()
        self.queue_table.value = snap.queues_html()
        self.pending_table.value = snap.pending_html()
        self.producer_table.value = snap.producers_html()
        self.source_table.value = snap.sources_html()
        self.legend.value = snap.legend_html()
        return seen
