"""``LateDataTable``: a live table of a job's late records."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rstream import RocketMQStream

from .html import box
from .late import LateDataSnapshot
from .live import LiveView


class LateDataTable(LiveView):
    """How many records came late to each window or join operator and why, and the latest ``last``
    (20) of them, newest first: key, data time, the watermark they were judged by, how late, where
    they came from. A view over ``LateDataSnapshot``.

    ``start()`` starts one renderer thread that checks ``job.progress`` every ``interval`` seconds
    (0.25) and rereads the late-data topic only when a batch ran or the job started or stopped;
    ``stop()`` stops it after one last redraw. Only that thread sets the widget's values while it runs.
    """

    kind = "late"

    def __init__(self, job: RocketMQStream, interval: float = 0.25, last: int = 20, **kwargs: Any) -> None:
        if last < 1:
            raise ValueError(f"last must be at least 1 record, got {last!r}")
        self.summary_table = box()
        self.record_table = box()
        status_line = box()
        super().__init__(job, [status_line, self.summary_table, self.record_table], status_line, interval,
                         **kwargs)
        self.last = int(last)
        self.refresh()

    def snapshot(self) -> LateDataSnapshot:
        """The job's late records now, as a plain object (``to_pandas()``, ``summary_to_pandas()``)."""
        return LateDataSnapshot.of(self.job, last=self.last)

    def draw(self) -> Hashable:
        seen = self.seen()  # before reading the topic: a batch that lands meanwhile is drawn next time
        snap = self.snapshot()
        self.status_line.value = snap.status_html()
        self.summary_table.value = snap.summary_html()
        self.record_table.value = snap.records_html()
        return seen
