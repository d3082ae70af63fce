"""``StateInspector``: a job's state as it is, as it was after any batch, what a batch changed, and a
replay you can watch. A view over two plain objects, ``StateSnapshot`` and ``StateDiffSnapshot``."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import ipywidgets

from rstream import RocketMQStream

from .html import ALERT, BLUE, GREEN, RED, RUNNING, YELLOW, box, cell_text, note, row, select, status, table
from .live import LiveView

STATE_COLUMNS = ["operator", "queue", "key", "value"]
DIFF_COLUMNS = ["operator", "queue", "key", "change", "before", "after"]
REPLAY_COLUMNS = ["topic", "queue", "committed_offset", "replayed", "replayed_keys", "state_keys"]
CHANGE_COLOURS = {"added": GREEN, "changed": YELLOW, "deleted": RED}
#: Keys shown per page.
PAGE_SIZE = 20
#: The batch slider's last stop: the local state stores as they are now.
NOW = "now"


def _filtered(frame: Any, operator: str | None, queue: int | None, key_filter: str) -> Any:
    """Rows of ``frame`` for one operator and queue (None: all) whose key's text holds ``key_filter``
    (case-insensitive), sorted by operator, queue and key."""
    if operator is not None:
        frame = frame[frame["operator"] == operator]
    if queue is not None:
        frame = frame[frame["queue"] == queue]
    texts = frame["key"].map(cell_text)
    if key_filter:
        keep = texts.str.lower().str.contains(key_filter.lower(), regex=False)
        frame, texts = frame[keep], texts[keep]
    order = sorted(range(len(frame)), key=lambda i: (frame["operator"].iloc[i], int(frame["queue"].iloc[i]), texts.iloc[i]))
    return frame.iloc[order].reset_index(drop=True)


def _where(operator: str | None, queue: int | None, key_filter: str) -> str:
    parts = [f"operator {operator}" if operator else "", f"queue {queue}" if queue is not None else "",
             f"keys holding {key_filter!r}" if key_filter else ""]
    return ", ".join(p for p in parts if p)


@dataclass(frozen=True)
class _Page:
    """Rows filtered by operator, queue and key text, shown one page at a time."""

    job_id: str
    rows: Any
    operator: str | None
    queue: int | None
    key_filter: str
    page: int
    page_size: int

    @staticmethod
    def clamped(page: int, rows: Any, page_size: int) -> int:
        """``page`` within the pages ``rows`` fill (a page past the end shows the last one)."""
        if page_size < 1:
            raise ValueError(f"page_size must be at least 1, got {page_size!r}")
        return min(max(page, 0), max(1, -(-len(rows) // page_size)) - 1)

    @property
    def pages(self) -> int:
        return max(1, -(-len(self.rows) // self.page_size))

    def page_rows(self) -> Any:
        start = self.page * self.page_size
        return self.rows.iloc[start:start + self.page_size]

    def to_pandas(self) -> Any:
        """Every matching row (all pages)."""
        return self.rows.copy()

    @property
    def where(self) -> str:
        return _where(self.operator, self.queue, self.key_filter)


@dataclass(frozen=True)
class StateSnapshot(_Page):
    """A job's state at one batch (``batch``; None: the local RocksDB stores now), filtered by operator,
    queue and key text, one page of it shown. ``to_pandas()`` has every matching key: operator, queue,
    key, value."""

    batch: int | None
    total_keys: int
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream, batch: int | None = None, operator: str | None = None, queue: int | None = None,
           key_filter: str = "", page: int = 0, page_size: int = PAGE_SIZE) -> StateSnapshot:
        """The state after batch ``batch`` (read from the state topics) or now (``batch=None``)."""
        frame = job.state(batch=batch)
        rows = _filtered(frame, operator, queue, key_filter)
        return cls(job.job_id, rows, operator, queue, key_filter, cls.clamped(page, rows, page_size), page_size,
                   batch, len(frame), time.time())

    @property
    def status(self) -> str:
        when = "now (local RocksDB)" if self.batch is None else f"after batch {self.batch} (state topics)"
        shown = f"{len(self.rows)} of {self.total_keys} keys" + (f" ({self.where})" if self.where else "")
        return f"state of job {self.job_id!r} {when}: {shown}; page {self.page + 1} of {self.pages}"

    def _repr_html_(self) -> str:
        rows = [[r.operator, r.queue, r.key, r.value] for r in self.page_rows().itertuples()]
        body = table("keys", STATE_COLUMNS, rows) if rows else "<i>no keys</i>"
        return f"<div>{status(self.status)}{body}</div>"

    def __repr__(self) -> str:
        return f"StateSnapshot({self.status})"


@dataclass(frozen=True)
class StateDiffSnapshot(_Page):
    """What changed in a job's state from right after batch ``from_batch`` to right after
    ``to_batch``: one row per key added, changed or deleted, with its value before and after."""

    from_batch: int
    to_batch: int
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream, to_batch: int, from_batch: int | None = None, operator: str | None = None,
           queue: int | None = None, key_filter: str = "", page: int = 0,
           page_size: int = PAGE_SIZE) -> StateDiffSnapshot:
        """The changes of batch ``to_batch`` (from the batch before it, or from ``from_batch``)."""
        if from_batch is None:
            earlier = [p.batch_id for p in job.history() if p.batch_id < to_batch]
            from_batch = earlier[-1] if earlier else -1
        rows = _filtered(job.state_diff(from_batch, to_batch), operator, queue, key_filter)
        return cls(job.job_id, rows, operator, queue, key_filter, cls.clamped(page, rows, page_size), page_size,
                   from_batch, to_batch, time.time())

    def counts(self) -> dict[str, int]:
        """How many keys were added, changed and deleted."""
        return {c: int((self.rows["change"] == c).sum()) for c in ("added", "changed", "deleted")}

    @property
    def status(self) -> str:
        span = f"batch {self.to_batch}" if self.from_batch == self.to_batch - 1 else \
            f"after batch {self.from_batch} to after batch {self.to_batch}"
        counts = ", ".join(f"{n} {c}" for c, n in self.counts().items())
        return (f"changes in the state of job {self.job_id!r}, {span}: {counts}"
                + (f" ({self.where})" if self.where else "") + f"; page {self.page + 1} of {self.pages}")

    def _repr_html_(self) -> str:
        page = self.page_rows()
        rows = [[r.operator, r.queue, r.key, r.change, r.before, r.after] for r in page.itertuples()]
        colours = [CHANGE_COLOURS.get(r.change) for r in page.itertuples()]
        body = table("changed keys", DIFF_COLUMNS, rows, row_colours=colours) if rows else "<i>nothing changed</i>"
        return f"<div>{status(self.status)}{body}</div>"

    def __repr__(self) -> str:
        return f"StateDiffSnapshot({self.status})"


class StateInspector(LiveView):
    """Browse ``job``'s state: pick an operator and a queue, filter keys by text, page through them.

    - **state**: the batch slider shows the state right after any committed batch (read from the
      state topics, so also after a restart or with the local state gone); its last stop, ``now``,
      is the local RocksDB stores.
    - **changes**: what a batch changed (keys added, changed, deleted, with before and after), or
      the difference between any two batches.
    - **replay**: delete the local state and replay it from the state topics, with a progress bar
      and per-queue counts (the job must be stopped).

    ``start()`` keeps the batch list up to date while the job runs (one renderer thread, as every
    live view); ``refresh()`` redraws once.
    """

    kind = "state"

    def __init__(self, job: RocketMQStream, interval: float = 0.5, page_size: int = PAGE_SIZE, **kwargs: Any) -> None:
        operators = [n.name for n in job.topology.nodes if n.stateful]
        queues = sorted({q for t in job.topology.state_topics if job.broker.has_topic(t)
                         for q in range(job.broker.topic(t).queues)})
        self.operator = ipywidgets.Dropdown(options=[("all operators", None), *[(o, o) for o in operators]],
                                            description="operator", layout=ipywidgets.Layout(width="230px"))
        self.queue = ipywidgets.Dropdown(options=[("all", None), *[(str(q), q) for q in queues]], description="queue",
                                         layout=ipywidgets.Layout(width="160px"))
        self.key_filter = ipywidgets.Text(placeholder="key contains…", description="key",
                                          continuous_update=False, layout=ipywidgets.Layout(width="230px"))
        self.previous = ipywidgets.Button(description="◀", layout=ipywidgets.Layout(width="36px"), tooltip="previous page")
        self.next = ipywidgets.Button(description="▶", layout=ipywidgets.Layout(width="36px"), tooltip="next page")
        self.batch = ipywidgets.SelectionSlider(options=[NOW], value=NOW, description="after batch",
                                                continuous_update=False, layout=ipywidgets.Layout(width="95%"))
        self.diff_to = ipywidgets.SelectionSlider(options=[-1], value=-1, description="batch",
                                                  continuous_update=False, layout=ipywidgets.Layout(width="95%"))
        self.diff_from = ipywidgets.Dropdown(options=[("the batch before", None)], description="from",
                                             layout=ipywidgets.Layout(width="260px"))
        for dropdown in (self.operator, self.queue, self.diff_from):
            select(dropdown, None)  # "all", "the batch before": shown, not an empty box
        self.state_table = box()
        self.diff_table = box()
        self.replay_button = ipywidgets.Button(description="delete local state and replay", icon="refresh",
                                               layout=ipywidgets.Layout(width="260px"))
        self.replay_bar = ipywidgets.IntProgress(value=0, min=0, max=1, description="replay",
                                                 layout=ipywidgets.Layout(width="95%"))
        self.replay_table = box()
        self.replay_status = box()
        self.tabs = ipywidgets.Tab(children=[
            ipywidgets.VBox([self.batch, self.state_table]),
            ipywidgets.VBox([row([self.diff_from]), self.diff_to, self.diff_table]),
            ipywidgets.VBox([self.replay_button, self.replay_bar, self.replay_status, self.replay_table]),
        ], layout=ipywidgets.Layout(max_width="100%"))
        for i, title in enumerate(("state", "changes", "replay")):
            self.tabs.set_title(i, title)
        status_line = box()
        controls = row([self.operator, self.queue, self.key_filter, self.previous, self.next])
        super().__init__(job, [status_line, controls, self.tabs], status_line, interval, **kwargs)
        self.page_size = int(page_size)
        self._page = 0
        self._asked = 0  # bumped by every control change: the next redraw must happen
        for control in (self.operator, self.queue, self.key_filter, self.batch, self.diff_to, self.diff_from):
            control.observe(self._filter_changed, names="value")
        self.tabs.observe(lambda _change: self._ask(), names="selected_index")
        self.previous.on_click(lambda _b: self._turn(-1))
        self.next.on_click(lambda _b: self._turn(1))
        self.replay_button.on_click(lambda _b: self.replay())
        self.replay_status.value = note("Deletes this job's local RocksDB folders (what losing an executor's "
                                        "disk does) and rebuilds them from the state topics.")
        self.refresh()

    # -- what the controls ask for -------------------------------------------------------------
    def _filter_changed(self, _change: Any) -> None:
        self._page = 0
        self._ask()

    def _turn(self, step: int) -> None:
        self._page = max(0, self._page + step)
        self._ask()

    def _ask(self) -> None:
        self._asked += 1
        if not self.is_monitoring:
            self.refresh()

    def seen(self) -> Hashable:
        return (super().seen(), self._asked)

    # -- plain objects ----------------------------------------------------------------------------
    def snapshot(self) -> StateSnapshot:
        """The state the "state" tab shows (``to_pandas()`` has every matching key)."""
        batch = None if self.batch.value == NOW else int(self.batch.value)
        return StateSnapshot.of(self.job, batch, self.operator.value, self.queue.value, self.key_filter.value,
                                self._page, self.page_size)

    def diff(self) -> StateDiffSnapshot | None:
        """The changes the "changes" tab shows (None before the first batch)."""
        if int(self.diff_to.value) < 0:
            return None
        return StateDiffSnapshot.of(self.job, int(self.diff_to.value), self.diff_from.value, self.operator.value,
                                    self.queue.value, self.key_filter.value, self._page, self.page_size)

    # -- drawing ------------------------------------------------------------------------------------
    def _batches(self) -> None:
        """Keep the sliders' stops equal to the job's committed batches (keeping what is picked)."""
        batches = [p.batch_id for p in self.job.history()]
        options: list[Any] = [*batches, NOW]
        if list(self.batch.options) != options:
            keep = self.batch.value if self.batch.value in options else NOW
            self.batch.options = options
            self.batch.value = keep
        if batches and list(self.diff_to.options) != batches:
            keep_to = self.diff_to.value if self.diff_to.value in batches else batches[-1]
            self.diff_to.options = batches
            self.diff_to.value = keep_to
            keep_from = self.diff_from.value if self.diff_from.value in batches else None
            self.diff_from.options = [("the batch before", None), *[(f"after batch {b}", b) for b in batches]]
            select(self.diff_from, keep_from)

    def draw(self) -> Hashable:
        seen = self.seen()
        self._batches()
        if self.tabs.selected_index == 1:
            diff = self.diff()
            self.diff_table.value = diff._repr_html_() if diff is not None else "<i>no batch has run yet</i>"
            if diff is not None:
                self._page = diff.page
            self.status_line.value = status(diff.status if diff is not None else f"job {self.job.job_id!r}: no batches")
        else:
            snap = self.snapshot()
            self._page = snap.page
            self.state_table.value = snap._repr_html_()
            self.status_line.value = status(snap.status)
        return seen  # a control changed meanwhile: _asked moved on, and the next refresh redraws

    # -- replay -------------------------------------------------------------------------------------
    def replay(self) -> Any:
        """Delete the job's local state and replay it from the state topics, showing each queue as it
        is done; returns ``job.replay_state()``'s rows (None when the job runs)."""
        if self.job.is_running:
            self.replay_status.value = status("the job is running: stop it first (job.stop()), then replay", ALERT)
            return None
        self.job.delete_local_state()
        self.replay_bar.value = 0
        done_rows: list[list[Any]] = []

        def on_queue(row_: dict[str, Any], done: int, total: int) -> None:
            self.replay_bar.max = max(total, 1)
            self.replay_bar.value = done
            done_rows.append([row_[c] for c in REPLAY_COLUMNS])
            self.replay_table.value = table("replayed queues", REPLAY_COLUMNS, done_rows,
                                            highlight={"replayed_keys": BLUE})
            self.replay_status.value = status(f"replaying: {done} of {total} state-topic messages read")

        began = time.perf_counter()
        rows = self.job.replay_state(progress=False, on_queue=on_queue)
        took = time.perf_counter() - began
        self.replay_bar.value = self.replay_bar.max
        self.replay_status.value = status(
            f"replayed {int(rows['replayed_keys'].sum())} keys into {len(rows)} queues from the state topics "
            f"in {took:.2f} s", RUNNING)
        self._ask()
        return rows
