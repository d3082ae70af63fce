"""``LiveView``: what every live widget of the toolkit shares: one renderer thread that redraws a job's
view a few times a second, and only ever sets widget traits."""

from __future__ import annotations

import threading
from collections.abc import Hashable
from html import escape
from typing import Any

import ipywidgets

import rstream


class LiveView(ipywidgets.VBox):
    """A ``VBox`` over ``job`` whose first child is a status line, redrawn by one renderer thread.

    Subclasses build their child widgets, then call ``super().__init__``; they implement ``draw()``
    (set the widgets' values from one fresh snapshot and return the ``seen()`` key it showed) and
    ``snapshot()``. ``refresh()`` redraws once, now, when ``seen()`` changed since the last redraw.
    ``start()`` starts the renderer thread (every ``interval`` seconds, 0.25 by default) and returns
    at once; ``stop()`` stops it after one last redraw. Only that thread sets the widgets while it
    runs, so cell output is never written from a thread, and the kernel is never blocked.
    """

    #: Names the renderer thread ``rstream-<kind>-<job id>``, and the view's CSS class ``rstream-view-<kind>``
    #: (what a browser test finds it by).
    kind = "view"
    #: The job shown (views over a broker or a topic have none: ``needs_job`` False).
    job: rstream.RocketMQStream

    def __init__(self, job: rstream.RocketMQStream | None, children: list[ipywidgets.Widget], status_line: ipywidgets.HTML,
                 interval: float = 0.25, **kwargs: Any) -> None:
        if job is not None and not isinstance(job, rstream.RocketMQStream) or job is None and self.needs_job:
            raise TypeError(f"{type(self).__name__} needs a RocketMQStream, got {type(job).__name__}")
        if interval <= 0:
            raise ValueError(f"interval must be positive seconds, got {interval!r}")
        kwargs.setdefault("layout", ipywidgets.Layout(max_width="100%"))
        super().__init__(children, **kwargs)
        self.add_class("rstream-view")
        self.add_class(f"rstream-view-{self.kind}")
        self.status_line = status_line
        self.job = job  # type: ignore[assignment]  # None only where needs_job is False
        self.interval = float(interval)
        self._drawn: Hashable | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    #: Whether the view is over a job (views over a broker or a topic set this to False and
    #: define ``seen()`` and ``label``).
    needs_job = True

    @property
    def label(self) -> str:
        """What the view shows, for its thread's name and its repr: the job id."""
        return self.job.job_id

    # -- what subclasses provide ------------------------------------------------------------------
    def snapshot(self) -> Any:
        """The plain object this widget shows (``to_pandas()``, ``_repr_html_``)."""
        raise TypeError(f"{type(self).__name__} must define snapshot()")

    def draw(self) -> Hashable:
        """Set the widgets' values from one snapshot; return the ``seen()`` key it showed."""
        raise TypeError(f"{type(self).__name__} must define draw()")

    def seen(self) -> Hashable:
        """What, when it changes, calls for a redraw: a queue of the job committed, or the job started
        or stopped."""
        return (self.job.commit_seq, self.job.is_running)

    # -- drawing ----------------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Redraw if ``seen()`` changed since the last redraw; returns whether it redrew."""
        if self.seen() == self._drawn:
            return False
        self._drawn = self.draw()
        return True

    @property
    def is_monitoring(self) -> bool:
        """Whether the renderer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Any:
        """Start the renderer thread (once; a second call does nothing); returns the widget at once."""
        if self.is_monitoring:
            return self
        self._stopping.clear()
        self._thread = threading.Thread(target=self._render, name=f"rstream-{self.kind}-{self.label}", daemon=True)
        self._thread.start()
        self.add_class("rstream-live")  # what a browser test watches change
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
                self.status_line.value = (f'<div style="color:#c92a2a">{escape(type(self).__name__)} cannot read '
                                          f"the job: {escape(repr(exc))}</div>")
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
        what = f"job={self.label!r}" if self.needs_job else repr(self.label)
        return f"{type(self).__name__}({what}, {state})"
