"""``TopicBrowser``: every topic of a broker, decoded, with offsets, broker times, seek by time, per-queue
end offsets and a job's lag, and a record's trace one click away. A view over ``TopicPage`` and
``TopicOffsets``."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from html import escape
from itertools import islice
from typing import Any

import ipywidgets

from rstream import Broker, RocketMQStream
from rstream.runtime.topic_decoder import Decoded, TopicRole, decode_message, topic_role

from .html import ALERT, BLUE, RED, box, cell_text, counted, note, row, select, status, table
from .live import LiveView

MESSAGE_COLUMNS = ["queue", "offset", "kind", "key", "value", "born", "stored", "detail"]
OFFSET_COLUMNS = ["queue", "end_offset", "committed_offset", "lag", "compacted_below"]
#: The column a broker that names its queues itself adds (RocketMQ: ``broker-b:1``, broker name and queue id).
NAMED_COLUMN = "broker_queue"
#: Messages per page.
PAGE_SIZE = 20


def queue_names(broker: Broker, topic: str) -> list[str] | None:
    """What the broker calls each of the topic's queues (RocketMQ: ``broker-b:1``); None if it has no names."""
    named = getattr(broker, "queue_label", None)
    return None if named is None else [named(topic, q) for q in range(broker.topic(topic).queues)]


def clock(ms: int | None) -> str:
    """Epoch milliseconds as local ``HH:MM:SS.mmm`` (date too when it is not today)."""
    if ms is None:
        return "-"
    when = dt.datetime.fromtimestamp(ms / 1000)
    text = when.strftime("%H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    return text if when.date() == dt.date.today() else when.strftime("%Y-%m-%d ") + text


def parse_time(text: str, now_ms: int | None = None) -> int:
    """A time to seek to, as epoch ms: ``1700000000000`` (ms), ``-30s`` / ``-5m`` / ``-1h`` (ago),
    ``HH:MM[:SS]`` (today) or an ISO date-time. Raises ``ValueError`` naming what it accepts."""
    text = text.strip()
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if re.fullmatch(r"\d{10,}", text):
        return int(text)
    ago = re.fullmatch(r"-(\d+(?:\.\d+)?)\s*(ms|s|m|h)", text)
    if ago:
        scale = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}[ago.group(2)]
        return now_ms - int(float(ago.group(1)) * scale)
    try:
        if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
            clock_time = dt.time.fromisoformat(text if text.count(":") == 2 or "." in text else text + ":00")
            return int(dt.datetime.combine(dt.date.today(), clock_time).timestamp() * 1000)
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise ValueError(f"cannot read {text!r} as a time: use ms since the epoch, -30s / -5m / -1h, "
                         "HH:MM:SS (today) or an ISO date-time") from None


@dataclass(frozen=True)
class TopicMessage:
    """One decoded message of a page."""

    queue: int
    offset: int
    decoded: Decoded
    born_ms: int
    store_ms: int
    headers: Mapping[str, str]
    raw_key: Any
    body: bytes

    def row(self) -> list[Any]:
        detail = ", ".join(f"{k}={v}" for k, v in self.decoded.detail.items())
        return [self.queue, self.offset, self.decoded.kind, self.decoded.key, self.decoded.value,
                clock(self.born_ms), clock(self.store_ms), detail]

    def line(self) -> str:
        """A one-line summary (what the browser's list shows)."""
        kind = "" if self.decoded.kind == "data" else f"[{self.decoded.kind}] "
        key = "" if self.decoded.key is None else f"{cell_text(self.decoded.key)} → "
        return f"{self.queue}/{self.offset}  {kind}{key}{cell_text(self.decoded.value)}"

    def html(self) -> str:
        """Every field, untruncated: key, value, the decoded detail, headers, broker and born times."""
        value = self.decoded.value
        shown = json.dumps(value, indent=1, default=str) if isinstance(value, (dict, list)) else repr(value)
        fields = [("queue / offset", f"{self.queue} / {self.offset}"), ("kind", self.decoded.kind),
                  ("key", repr(self.decoded.key)), ("value", shown),
                  *[(k, repr(v)) for k, v in self.decoded.detail.items()],
                  ("born (producer)", f"{clock(self.born_ms)} ({self.born_ms})"),
                  ("stored (broker)", f"{clock(self.store_ms)} ({self.store_ms})"),
                  ("message key", repr(self.raw_key)), ("body", f"{len(self.body)} bytes"),
                  *[(f"header {k}", v) for k, v in self.headers.items()]]
        cells = "".join(f'<tr><th style="text-align:left;padding:1px 8px;white-space:nowrap">{escape(k)}</th>'
                        f'<td style="padding:1px 8px;white-space:pre-wrap;overflow-wrap:anywhere">{escape(v)}</td></tr>'
                        for k, v in fields)
        return f'<table style="font-family:monospace;font-size:12px;border-collapse:collapse">{cells}</table>'


@dataclass(frozen=True)
class TopicPage:
    """Up to ``limit`` messages of a topic (one queue, or all of them in broker-time order), decoded
    for the topic's role. ``next_starts`` is where the next page begins, per queue."""

    topic: str
    role: TopicRole
    queue: int | None
    starts: dict[int, int]
    messages: list[TopicMessage]
    next_starts: dict[int, int]
    end_offsets: list[int]
    taken_at: float = field(default_factory=time.time)

    @classmethod
    def of(cls, broker: Broker, topic: str, queue: int | None = None, start: int | Mapping[int, int] = 0,
           limit: int = PAGE_SIZE, job: RocketMQStream | None = None) -> TopicPage:
        """Read a page from ``start`` (one offset for every queue, or one per queue)."""
        info = broker.topic(topic)
        if queue is not None and not 0 <= queue < info.queues:
            raise ValueError(f"topic {topic!r} has queues 0..{info.queues - 1}, not {queue!r}")
        role = topic_role(topic, job.topology if job is not None else None)
        queues = [queue] if queue is not None else list(range(info.queues))
        starts = {q: max(int(start.get(q, 0) if isinstance(start, Mapping) else start), 0) for q in queues}
        found: list[TopicMessage] = []
        ends = broker.end_offsets(topic)
        for q in queues:
            rows: Iterable[tuple[int, Any, bytes, int, int, Mapping[str, str] | None]]
            if getattr(broker, "gapless", True):  # offsets dense: the page's offsets are known
                rows = ((m.offset, m.key, m.body, m.born_timestamp, m.store_timestamp, m.headers)
                        for m in broker.read(topic, q, starts[q], starts[q] + limit))
            else:  # offsets may skip (RocketMQ: a lost attempt's, a packed shuffle topic's): the next ``limit``
                rows = islice(broker.read_records(topic, q, starts[q], ends[q]), limit)
            for offset, key, body, born, store, headers in rows:
                found.append(TopicMessage(q, offset, decode_message(role, key, body, headers), born, store,
                                          dict(headers or {}), key, body))
        found.sort(key=lambda m: (m.store_ms, m.offset, m.queue))  # one send stores many queues in the same ms
        shown = found[:limit]
        next_starts = dict(starts)
        for shown_message in shown:
            q = shown_message.queue
            next_starts[q] = max(next_starts[q], shown_message.offset + 1)
        return cls(topic, role, queue, starts, shown, next_starts, ends)

    @classmethod
    def at_time(cls, broker: Broker, topic: str, timestamp_ms: int, queue: int | None = None,
                limit: int = PAGE_SIZE, job: RocketMQStream | None = None) -> TopicPage:
        """The page starting, in every queue, at the first message the broker stored at or after
        ``timestamp_ms`` (PIP-70's search by broker time)."""
        queues = [queue] if queue is not None else list(range(broker.topic(topic).queues))
        search = broker.search_offset
        return cls.of(broker, topic, queue, {q: search(topic, q, timestamp_ms) for q in queues}, limit, job)

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([m.row() for m in self.messages], columns=MESSAGE_COLUMNS)

    @property
    def status(self) -> str:
        where = f"queue {self.queue}" if self.queue is not None else counted(len(self.end_offsets), "queue")
        frm = ", ".join(f"{q}:{o}" for q, o in self.starts.items())
        return (f"topic {self.topic!r} ({self.role.role}{', feeds windows/joins' if self.role.framed else ''}), "
                f"{where}: {counted(len(self.messages), 'message')} from offsets (queue:offset) {frm}; "
                f"{sum(self.end_offsets)} in all")

    def _repr_html_(self) -> str:
        colours = [BLUE if m.decoded.kind not in ("data", "state") else None for m in self.messages]
        rows = [m.row() for m in self.messages]
        body = table("messages", MESSAGE_COLUMNS, rows, row_colours=colours) if rows else "<i>no messages here</i>"
        return f"<div>{status(self.status)}{body}</div>"


@dataclass(frozen=True)
class TopicOffsets:
    """Per queue of a topic: its end offset, how far it was compacted, and for a job that reads it,
    the offset the job committed and its lag (records left)."""

    topic: str
    rows: list[list[Any]]
    #: ``OFFSET_COLUMNS``, and ``NAMED_COLUMN`` when the broker names its queues.
    columns: list[str] = field(default_factory=lambda: list(OFFSET_COLUMNS))

    @classmethod
    def of(cls, broker: Broker, topic: str, job: RocketMQStream | None = None) -> TopicOffsets:
        ends = broker.end_offsets(topic)
        compact = broker.topic(topic).compact
        backlog = job._backlog() if job is not None and topic in job.topology.input_topics else {}
        rows = []
        for q, end in enumerate(ends):
            done = backlog.get((topic, q), (end, None))[1]
            rows.append([q, end, done, None if done is None else end - done,
                         broker.compacted_below(topic, q) if compact else None])
        names = queue_names(broker, topic)
        if names is None:
            return cls(topic, rows)
        return cls(topic, [r + [name] for r, name in zip(rows, names)], [*OFFSET_COLUMNS, NAMED_COLUMN])

    def to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns)

    def _repr_html_(self) -> str:
        return table(f"queues of {self.topic}", self.columns, self.rows, highlight={"lag": RED})


class TopicBrowser(LiveView):
    """Browse every topic of ``broker``: the job's sources and sinks, shuffle topics (decoded from
    rstream's codec; watermark markers and idle ticks shown as such), state topics (operator, key,
    value; deletes), the late-data and dead-letter topics. Pick a topic and a queue, page through it,
    or seek to a broker time; click a message to see every field. Given the ``job``, it also shows
    the job's committed offset and lag per queue, and traces a selected input record through the
    real topology (``job.trace``).

    ``start()`` follows new messages (one renderer thread, as every live view)."""

    kind = "topics"
    needs_job = False
    job: RocketMQStream | None  # type: ignore[assignment]

    def __init__(self, broker: Broker, job: RocketMQStream | None = None, interval: float = 0.5,
                 page_size: int = PAGE_SIZE, **kwargs: Any) -> None:
        self.broker = broker
        self.topic = ipywidgets.Dropdown(description="topic", layout=ipywidgets.Layout(width="420px"))
        self.queue = ipywidgets.Dropdown(options=[("all", None)], description="queue",
                                         layout=ipywidgets.Layout(width="160px"))
        select(self.queue, None)
        self.start_offset = ipywidgets.BoundedIntText(value=0, min=0, max=2**62, description="from offset",
                                                      layout=ipywidgets.Layout(width="200px"))
        self.previous = ipywidgets.Button(description="◀", layout=ipywidgets.Layout(width="36px"), tooltip="previous page")
        self.next = ipywidgets.Button(description="▶", layout=ipywidgets.Layout(width="36px"), tooltip="next page")
        self.seek_time = ipywidgets.Text(placeholder="-30s, HH:MM:SS, ISO time or epoch ms", description="seek",
                                         layout=ipywidgets.Layout(width="330px"))
        self.seek_button = ipywidgets.Button(description="seek to broker time", layout=ipywidgets.Layout(width="170px"))
        self.messages = ipywidgets.Select(options=[], rows=12, layout=ipywidgets.Layout(width="100%"))
        self.detail = box()
        self.trace_button = ipywidgets.Button(description="trace this record", icon="route", disabled=True,
                                              layout=ipywidgets.Layout(width="200px"))
        self.trace_view = box()
        self.offsets = box()
        status_line = box()
        children = [
            status_line,
            row([self.topic, self.queue, self.start_offset, self.previous, self.next]),
            row([self.seek_time, self.seek_button]),
            self.messages, self.detail, self.trace_button, self.trace_view, self.offsets,
        ]
        super().__init__(job, children, status_line, interval, **kwargs)
        self.page_size = int(page_size)
        self._starts: dict[int, int] = {}
        self._history: list[dict[int, int]] = []
        self._page: TopicPage | None = None
        self._asked = 0
        self.topic.observe(self._topic_changed, names="value")
        self.queue.observe(self._from_offset, names="value")
        self.start_offset.observe(self._from_offset, names="value")
        self.next.on_click(lambda _b: self._turn(1))
        self.previous.on_click(lambda _b: self._turn(-1))
        self.seek_button.on_click(lambda _b: self.seek(self.seek_time.value))
        self.messages.observe(lambda _c: self._show_selected(), names="value")
        self.trace_button.on_click(lambda _b: self.trace_selected())
        self._topics()
        self.refresh()

    @property
    def label(self) -> str:
        return str(getattr(self.broker, "path", self.broker))

    def seen(self) -> Hashable:
        topic = self.topic.value
        ends = tuple(self.broker.end_offsets(topic)) if topic and self.broker.has_topic(topic) else ()
        return (len(self.broker.topics()), topic, ends, self._asked)

    # -- plain objects --------------------------------------------------------------------------
    def snapshot(self) -> TopicPage:
        """The page shown (``to_pandas()``, ``messages``)."""
        if not self.topic.value:
            raise ValueError("the broker has no topic yet")
        return TopicPage.of(self.broker, self.topic.value, self.queue.value, self._starts or self.start_offset.value,
                            self.page_size, self.job)

    def offsets_snapshot(self) -> TopicOffsets:
        return TopicOffsets.of(self.broker, self.topic.value, self.job)

    # -- controls -------------------------------------------------------------------------------
    def _ask(self) -> None:
        self._asked += 1
        if not self.is_monitoring:
            self.refresh()

    def _topics(self) -> None:
        topology = self.job.topology if self.job is not None else None
        options = []
        for info in self.broker.topics():
            role = topic_role(info.name, topology, None)
            options.append((f"{info.name}  ({role.role}, {counted(info.queues, 'queue')})", info.name))
        if [o[1] for o in options] != [o[1] for o in self.topic.options]:
            keep = self.topic.value if self.topic.value in [o[1] for o in options] else None
            self.topic.options = options
            if keep is None and options:
                inputs = self.job.topology.source_topics if self.job is not None else []
                keep = next((name for _label, name in options if name in inputs), options[0][1])
            self.topic.value = keep

    def _topic_changed(self, _change: Any) -> None:
        queues = self.broker.topic(self.topic.value).queues if self.topic.value else 0
        names = queue_names(self.broker, self.topic.value) if self.topic.value else None
        self.queue.options = [("all", None), *[(str(q) if names is None else f"{q}  {names[q]}", q)
                                               for q in range(queues)]]
        select(self.queue, None)
        self._starts, self._history = {}, []
        self.trace_view.value = ""
        self._ask()

    def _from_offset(self, _change: Any) -> None:
        self._starts, self._history = {}, []
        self._ask()

    def _turn(self, step: int) -> None:
        if step > 0 and self._page is not None and self._page.messages:
            self._history.append(dict(self._page.starts))
            self._starts = dict(self._page.next_starts)
        elif step < 0 and self._history:
            self._starts = self._history.pop()
        self._ask()

    def seek(self, when: str | int) -> TopicPage | None:
        """Show the topic from the first message stored at or after ``when`` (see ``parse_time``)."""
        try:
            ms = when if isinstance(when, int) else parse_time(when)
        except ValueError as exc:
            self.status_line.value = status(str(exc), ALERT)
            return None
        page = TopicPage.at_time(self.broker, self.topic.value, ms, self.queue.value, self.page_size, self.job)
        self._starts, self._history = dict(page.starts), []
        self._ask()
        return page

    # -- drawing --------------------------------------------------------------------------------
    def draw(self) -> Hashable:
        seen = self.seen()
        self._topics()
        if not self.topic.value:
            self.status_line.value = status("the broker has no topic yet")
            return seen
        page = self._page = self.snapshot()
        picked = self.messages.value
        self.messages.options = [(m.line(), i) for i, m in enumerate(page.messages)]
        self.messages.value = picked if picked is not None and picked < len(page.messages) else None
        self.status_line.value = status(page.status)
        reads = self.job is not None and self.topic.value in self.job.topology.input_topics
        self.offsets.value = self.offsets_snapshot()._repr_html_() + note(
            "end_offset: the offset the next message of a queue will get"
            + ("; lag: records of it the job has not committed yet" if reads else ""))
        self._show_selected()
        return seen

    def selected(self) -> TopicMessage | None:
        """The message picked in the list, if any."""
        page, index = self._page, self.messages.value
        return None if page is None or index is None or index >= len(page.messages) else page.messages[index]

    def _show_selected(self) -> None:
        message = self.selected()
        self.detail.value = message.html() if message is not None else note(
            "click a message to see all of it" + (" and trace it through the job" if self.job is not None else ""))
        traceable = message is not None and self.job is not None and self.topic.value in self.job.topology.input_topics
        self.trace_button.disabled = not traceable

    def trace_selected(self) -> Any:
        """Trace the selected input record through the job (``job.trace``); shows and returns it."""
        message = self.selected()
        if message is None or self.job is None:
            return None
        try:
            trace = self.job.trace(self.topic.value, message.queue, message.offset)
        except Exception as exc:  # a view must not raise into the kernel: say what went wrong
            self.trace_view.value = status(f"cannot trace {self.topic.value}/{message.queue}/{message.offset}: {exc}", ALERT)
            return None
        self.trace_view.value = trace._repr_html_()
        return trace


