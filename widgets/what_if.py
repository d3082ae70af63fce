"""What another lateness, window or function would have given, in a notebook: ``job.what_if`` as a view,
the two runs' event-time pictures one above the other and the differences as a table to filter."""

from __future__ import annotations

from typing import Any

import ipywidgets

from rstream.runtime.what_if import WhatIf

from .html import ALERT, box, counted, row, status


class WhatIfView(ipywidgets.VBox):
    """``WhatIfView(job, topology=None, **changes)``: the job's committed input run again with ``changes``
    (``allowed_lateness_ms=500``, ...) and/or another ``topology`` from the same sources, and as it is
    (``job.what_if``); or ``WhatIfView(result)`` over a ``WhatIf`` already made. Shows what changed
    (each run's batches and the differences by kind), both runs' event-time pictures on the same axes,
    and the differences per key and window: pick a kind of change, or type part of a key.

    ``result`` is the plain object (None when the run could not be made: the view says why)."""

    def __init__(self, job: Any, topology: Any = None, **changes: Any) -> None:
        self.summary = box()
        self.pictures = box()
        self.change = ipywidgets.Dropdown(options=[("every change", None)], description="show",
                                          layout=ipywidgets.Layout(width="280px"))
        self.key = ipywidgets.Text(placeholder="part of a key", description="key",
                                   layout=ipywidgets.Layout(width="260px"))
        self.table = box()
        super().__init__([self.summary, self.pictures, row([self.change, self.key]), self.table],
                         layout=ipywidgets.Layout(max_width="100%"))
        self.add_class("rstream-view")
        self.add_class("rstream-view-what-if")
        self.result: Any = None
        try:
            self.result = job if isinstance(job, WhatIf) else job.what_if(topology, **changes)
        except Exception as exc:  # a view must not raise into the kernel: say what went wrong
            self.result = None
            self.summary.value = status(f"cannot run what_if({changes}): {exc}", ALERT)
            for hidden in (self.pictures, self.change, self.key, self.table):
                hidden.layout.display = "none"
            return
        counts = self.result.counts()
        self.summary.value = status(self.result.summary)
        self.pictures.value = self.result.pictures_html()
        self.change.options = [(f"every change ({sum(counts.values())})", None),
                               *[(f"{c} ({counted(n, 'row')})", c) for c, n in counts.items()]]
        self.change.observe(lambda _c: self.redraw(), names="value")
        self.key.observe(lambda _c: self.redraw(), names="value")
        self.redraw()

    def redraw(self) -> None:
        """Draw the table of differences as the pickers say."""
        if self.result is None:
            return
        picked = self.change.value
        self.table.value = self.result.table_html(changes=None if picked is None else [picked],
                                                  key=self.key.value.strip() or None)
