"""``JobMonitor``: a live view of a job's progress, redrawn by one renderer thread."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from rstream import RocketMQStream

from .html import box, row
from .live import LiveView
from .progress import ProgressSnapshot


class JobMonitor(LiveView):
    """A status line, the latest batches and the last batch's per-operator counters of ``job``.

    ``start()`` starts one renderer thread that polls ``job.progress`` every ``interval`` seconds
    (0.25: four times a second) and redraws only when something changed; ``stop()`` stops it after
    one last redraw. Neither blocks the kernel, and only the renderer thread (while it runs) sets the
    widget's values, so cell output is never written from a thread. ``refresh()`` redraws once, now.
    ``last`` is how many batches the table shows (10).
    """

    kind = "monitor"

    def __init__(self, job: RocketMQStream, interval: float = 0.25, last: int = 10, **kwargs: Any) -> None:
        self.batch_table = box()
        self.operator_table = box()
        status_line = box()
        super().__init__(job, [status_line, row([self.batch_table, self.operator_table])],
                         status_line, interval, **kwargs)
        self.last = int(last)
        self.refresh()

    def snapshot(self) -> ProgressSnapshot:
        """The job's progress now, as a plain object (``to_pandas()``, ``_repr_html_``)."""
        return ProgressSnapshot.of(self.job, last=self.last)

    def draw(self) -> Hashable:
        seen = self.seen()  # before the snapshot: a batch that lands meanwhile is drawn next time
        snap = self.snapshot()
        self.status_line.value = snap.status_html()
        self.batch_table.value = snap.batches_html()
        self.operator_table.value = snap.operators_html()
        return seen
