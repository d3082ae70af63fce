"""``JobMonitor``: a live view of a job's progress, redrawn by one renderer thread."""

from __future__ import annotations

import threading
from html import escape
from typing import Any

import ipywidgets

from rstream import RocketMQStream
from widgets.progress import ProgressSnapshot


class JobMonitor(ipywidgets.VBox):
    """A status line, the latest batches and the last batch's per-operator counters of ``job``.

    ``start()`` starts one renderer thread that polls ``job.progress`` every ``interval`` seconds
    (0.25: four times a second) and redraws only when something changed; ``stop()`` stops it after
    one last redraw. Neither blocks the kernel, and only the renderer thread (while it runs) sets the
    widget's values, so cell output is never written from a thread. ``refresh()`` redraws once, now.
    ``last`` is how many batches the table shows (10).
    """

    def __init__(self, job: RocketMQStream, interval: float = 0.25, last: int = 10, **kwargs: Any) -> None:
        if not isinstance(job, RocketMQStream):
            raise TypeError(f"JobMonitor needs a RocketMQStream, got {type(job).__name__}")
        if interval <= 0:
            raise ValueError(f"interval must be positive seconds, got {interval!r}")
        self.status_line = ipywidgets.HTML()
        self.batch_table = ipywidgets.HTML()
        self.operator_table = ipywidgets.HTML()
        super().__init__([self.status_line, ipywidgets.HBox([self.batch_table, self.operator_table])], **kwargs)
        self.job = job
        self.interval = float(interval)
        self.last = int(last)
        self._drawn: tuple[int, bool] | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.refresh()

    def snapshot(self) -> ProgressSnapshot:
        """The job's progress now, as a plain object (``to_pandas()``, ``_repr_html_``)."""
        return ProgressSnapshot.of(self.job, last=self.last)

    def refresh(self) -> bool:
        """Redraw if the job has new batches or started or stopped; returns whether it redrew."""
        seen = (len(self.job.progress), self.job.is_running)
        if seen == self._drawn:
            return False
        snap = self.snapshot()
        self.status_line.value = snap.status_html()
        self.batch_table.value = snap.batches_html()
        self.operator_table.value = snap.operators_html()
        self._drawn = (snap.total_batches, snap.running)
        return True

    @property
    def is_monitoring(self) -> bool:
        """Whether the renderer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> JobMonitor:
        """Start the renderer thread (once; a second call does nothing); returns at once."""
        if self.is_monitoring:
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._render, name=f"rstream-monitor-{self.job.job_id}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the renderer thread after its last redraw (waits ``timeout`` seconds at most)."""
        thread, self._thread = self._thread, None
        self._stopping.set()
        if thread is not None:
            thread.join(timeout)

    def _render(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception as exc:  # a display must never take the kernel or the job down
                self.status_line.value = f'<div style="color:#c92a2a">monitor cannot read the job: {escape(repr(exc))}</div>'
                self._drawn = None
            if self._stopping.wait(self.interval):
                break
        try:
            self.refresh()
        except Exception:
            pass

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        # Where widgets cannot render (a static notebook view), show the same tables as HTML.
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, dict):
            bundle["text/html"] = self.snapshot()._repr_html_()
        return bundle

    def __repr__(self) -> str:
        state = "monitoring" if self.is_monitoring else "idle"
        return f"JobMonitor(job={self.job.job_id!r}, {state})"
