"""Why a sink record is what it is, in a notebook: ``job.explain`` drawn over the real topology, each of
its input records one click away from its own forward trace (``job.trace``)."""

from __future__ import annotations

from typing import Any

import ipywidgets

from .html import ALERT, box, note, status


class ExplainView(ipywidgets.VBox):
    """``ExplainView(job, topic, queue, offset)``: the explanation of the sink record at ``topic``/``queue``/
    ``offset`` (``job.explain``: its input records, the operator's state before and after each, the late
    records and dead letters of its key and window, the watermark that fired a window) over the real
    topology with the path highlighted; pick an input record and trace it forward through the job.

    ``explanation`` is the plain object (None when the record cannot be explained: the view says why)."""

    def __init__(self, job: Any, topic: str, queue: int, offset: int) -> None:
        self.job = job
        self.view = box()
        self.inputs = ipywidgets.Select(options=[], rows=8, layout=ipywidgets.Layout(width="100%"))
        self.trace_button = ipywidgets.Button(description="trace this input forward", icon="route", disabled=True,
                                              layout=ipywidgets.Layout(width="220px"))
        self.trace_view = box()
        super().__init__([self.view, self.inputs, self.trace_button, self.trace_view],
                         layout=ipywidgets.Layout(max_width="100%"))
        self.add_class("rstream-view")
        self.add_class("rstream-view-explain")
        self.explanation: Any = None
        try:
            self.explanation = job.explain(topic, queue, offset)
        except Exception as exc:  # a view must not raise into the kernel: say what went wrong
            self.view.value = status(f"cannot explain {topic}/{queue}/{offset}: {exc}", ALERT)
            self.inputs.layout.display = self.trace_button.layout.display = "none"
            return
        self.view.value = self.explanation._repr_html_()
        readable = set(job.topology.input_topics)
        self._traceable = [c for c in self.explanation.inputs if c.kind == "input" and c.topic in readable]
        self.inputs.options = [(f"{c.topic}/{c.queue} offset {c.offset}  t={c.data_time}  {c.value!r}"[:160], i)
                               for i, c in enumerate(self._traceable)]
        self.inputs.observe(lambda _c: self._picked(), names="value")
        self.trace_button.on_click(lambda _b: self.trace_input())
        if not self._traceable:
            self.trace_view.value = note("no input record of this job's topics to trace")

    def _picked(self) -> None:
        self.trace_button.disabled = self.inputs.value is None

    def trace_input(self, index: int | None = None) -> Any:
        """Trace the picked input record (or the ``index``-th) forward (``job.trace``); shows and returns it."""
        index = self.inputs.value if index is None else index
        if index is None or not 0 <= index < len(self._traceable):
            return None
        c = self._traceable[index]
        try:
            trace = self.job.trace(c.topic, c.queue, c.offset)
        except Exception as exc:
            self.trace_view.value = status(f"cannot trace {c.topic}/{c.queue}/{c.offset}: {exc}", ALERT)
            return None
        self.trace_view.value = trace._repr_html_()
        return trace
