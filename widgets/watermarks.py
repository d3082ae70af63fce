"""``WatermarkSnapshot``: where event time stands in a job's windows and joins, and why each open
window has not fired yet, as a plain object (HTML and DataFrames).

It reads only ``job.progress``: for each queue of each window or join shuffle topic, the latest batch
that ran it says its operator watermark (the minimum over its producers that are not idle), the
producer holding it back, every producer's watermark, and its open windows. Source queues report
their own watermark (``max(data time - allowed lateness)``) through their shuffle sinks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from typing import Any

from rstream import RocketMQStream
from rstream.graph.topology import short_topic_name
from rstream.shuffle.sink import SHUFFLE_SINK

from .html import table as _table

QUEUE_COLUMNS = ["topic", "queue", "operator", "window", "watermark", "held_back_by", "held_back_watermark",
                 "windows_open", "windows_fired", "late", "batch_id"]
PRODUCER_COLUMNS = ["topic", "queue", "producer", "watermark", "idle", "holding_back"]
PENDING_COLUMNS = ["topic", "queue", "operator", "key", "start", "end", "reason"]
SOURCE_COLUMNS = ["topic", "queue", "shuffle_sink", "shuffle_topic", "watermark", "batch_id"]


@dataclass(frozen=True)
class TimeOperator:
    """A window or join operator on one shuffle queue. ``windows_fired`` and ``late`` count every batch
    the job object saw; ``windows_open`` and ``pending`` (the first 20 open windows, earliest end first,
    as ``(key, start, end)``; empty for joins, which do not report them) are the latest batch's."""

    name: str
    window: str
    windows_open: int
    windows_fired: int
    late: int
    pending: list[tuple[str, int, int]]


@dataclass(frozen=True)
class ShuffleQueue:
    """One queue of a window or join shuffle topic, as the latest batch that ran it left it.

    ``watermark`` is the operator watermark (None: no watermark yet, or every producer is idle);
    ``producers`` maps each producer (``<topic>/<queue>/<shuffle sink>``) to its ``watermark`` and
    whether it was ``idle``."""

    topic: str
    queue: int
    batch_id: int
    timestamp_ms: int
    watermark: int | None
    held_back_by: str | None
    producers: dict[str, dict[str, Any]]
    operators: list[TimeOperator]

    @property
    def all_idle(self) -> bool:
        return bool(self.producers) and all(p.get("idle") for p in self.producers.values())

    @property
    def held_back_watermark(self) -> int | None:
        if self.held_back_by is None:
            return None
        return self.producers.get(self.held_back_by, {}).get("watermark")

    def waiting_for(self) -> str:
        """What this queue's watermark waits for, whatever the window."""
        if self.all_idle:
            return "every producer is idle: open windows fire at this queue's next batch"
        if self.watermark is None:
            return (f"no watermark yet: {self.held_back_by or 'a producer'} has sent no data "
                    "(it stops holding windows back once idle)")
        held = "" if self.held_back_by is None else (
            f"; held back by {self.held_back_by} (watermark {_text(self.held_back_watermark)})")
        return f"watermark {self.watermark}{held}"

    def why_not_fired(self, end: int) -> str:
        """Why a window of this queue ending at ``end`` (exclusive, ms) has not fired yet."""
        if self.all_idle or self.watermark is None:
            return self.waiting_for()
        if self.watermark >= end:
            return f"watermark {self.watermark} >= window end {end}: it fires at this queue's next batch"
        reason = f"watermark {self.watermark} < window end {end}"
        if self.held_back_by is not None:
            reason += f"; held back by {self.held_back_by} (watermark {_text(self.held_back_watermark)})"
        others = [f"{p} ({_text(s.get('watermark'))})" for p, s in self.producers.items()
                  if p != self.held_back_by and not s.get("idle") and (s.get("watermark") is None or s["watermark"] < end)]
        if others:
            reason += f"; also below the end: {', '.join(others)}"
        return reason


@dataclass(frozen=True)
class SourceWatermark:
    """A source queue's watermark, as its shuffle sink into a window or join topic sent it."""

    topic: str
    queue: int
    shuffle_sink: str
    shuffle_topic: str
    watermark: int | None
    batch_id: int

    @property
    def producer(self) -> str:
        return f"{self.topic}/{self.queue}/{self.shuffle_sink}"


@dataclass(frozen=True)
class WatermarkSnapshot:
    """Every window and join shuffle queue's watermark and open windows, and every source queue's
    watermark, as the latest batch of each queue left them. Times are data times in milliseconds."""

    job_id: str
    running: bool
    allowed_lateness_ms: int
    idle_timeout_ms: int
    framed_topics: list[str]
    queues: list[ShuffleQueue]
    sources: list[SourceWatermark]
    last_batch_id: int | None
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream) -> WatermarkSnapshot:
        """Take a snapshot of ``job`` (cheap: it reads ``job.progress``, never waits for a batch)."""
        progress = job.progress
        running = job.is_running
        topology = job.topology
        framed = list(topology.framed_topics)
        windows = {n.name: n.params["window"].describe() for n in topology.nodes if n.windowed}
        feeds = {n.name: n.params["topic"] for n in topology.nodes
                 if n.spec is SHUFFLE_SINK and n.params.get("topic") in framed}
        latest: dict[tuple[str, int], tuple[int, int, Any]] = {}
        fired: dict[tuple[str, int, str], int] = {}
        late: dict[tuple[str, int, str], int] = {}
        sources: dict[tuple[str, int, str], SourceWatermark] = {}
        for batch in progress:
            for q in batch.queues:
                if not q.operators:
                    continue  # a range another attempt had already committed: nothing ran
                if q.topic in framed:
                    latest[(q.topic, q.queue)] = (batch.batch_id, batch.timestamp_ms, q)
                    for name, counters in q.operators.items():
                        if name in windows:
                            key = (q.topic, q.queue, name)
                            fired[key] = fired.get(key, 0) + int(counters.get("windows_fired", 0))
                            late[key] = late.get(key, 0) + int(counters.get("late", 0))
                for name, counters in q.operators.items():
                    if name in feeds and "watermark" in counters:
                        sources[(q.topic, q.queue, name)] = SourceWatermark(
                            q.topic, q.queue, name, feeds[name], counters["watermark"], batch.batch_id)
        queues = []
        for (topic, queue), (batch_id, stamp, q) in sorted(latest.items()):
            operators = [
                TimeOperator(
                    name=name, window=windows[name], windows_open=int(counters.get("windows_open", 0)),
                    windows_fired=fired.get((topic, queue, name), 0), late=late.get((topic, queue, name), 0),
                    pending=[(str(k), int(s), int(e)) for k, s, e in counters.get("pending", [])],
                )
                for name, counters in q.operators.items() if name in windows
            ]
            queues.append(ShuffleQueue(topic, queue, batch_id, stamp, q.watermark, q.held_back_by,
                                       dict(q.producers), operators))
        return cls(
            job_id=job.job_id, running=running, allowed_lateness_ms=int(job.properties.allowed_lateness_ms),
            idle_timeout_ms=int(job.properties.idle_timeout_ms), framed_topics=framed, queues=queues,
            sources=[sources[k] for k in sorted(sources)],
            last_batch_id=progress[-1].batch_id if progress else None, taken_at=time.time(),
        )

    # -- data ---------------------------------------------------------------------------------
    @property
    def windows_open(self) -> int:
        return sum(op.windows_open for q in self.queues for op in q.operators)

    @property
    def windows_fired(self) -> int:
        return sum(op.windows_fired for q in self.queues for op in q.operators)

    @property
    def late(self) -> int:
        return sum(op.late for q in self.queues for op in q.operators)

    def queue(self, topic: str, queue: int) -> ShuffleQueue:
        """The shuffle queue ``topic``/``queue``; raises ``KeyError`` naming the queues it knows."""
        for q in self.queues:
            if (q.topic, q.queue) == (topic, queue):
                return q
        known = [f"{q.topic}/{q.queue}" for q in self.queues]
        raise KeyError(f"no batch has run shuffle queue {topic}/{queue} yet; known: {known}")

    @property
    def status(self) -> str:
        """One line: running or stopped, windows open and fired, late records, the lowest watermark."""
        state = "running" if self.running else "stopped"
        if not self.framed_topics:
            return f"job {self.job_id!r}: {state}, no window or join (nothing waits for a watermark)"
        if not self.queues:
            return f"job {self.job_id!r}: {state}, no window or join queue has run yet"
        line = (f"job {self.job_id!r}: {state}, batch {self.last_batch_id}: {self.windows_open} windows open, "
                f"{self.windows_fired} fired, {self.late} late records")
        waiting = [q for q in self.queues if any(op.windows_open for op in q.operators)]
        if waiting:
            low = min(waiting, key=lambda q: -(2**63) if q.watermark is None else q.watermark)
            line += (f"; lowest watermark with open windows: {_text(low.watermark)} on {low.topic}/{low.queue}"
                     + (f", held back by {low.held_back_by}" if low.held_back_by else ""))
        return line

    def to_pandas(self) -> Any:
        """One row per window or join operator on each shuffle queue: the queue's operator watermark,
        the producer holding it back and that producer's watermark, windows open (latest batch),
        windows fired and late records (every batch), and the batch this row comes from."""
        rows = [[q.topic, q.queue, op.name, op.window, q.watermark, q.held_back_by, q.held_back_watermark,
                 op.windows_open, op.windows_fired, op.late, q.batch_id]
                for q in self.queues for op in q.operators]
        return _frame(rows, QUEUE_COLUMNS, ("watermark", "held_back_watermark"))

    def producers_to_pandas(self) -> Any:
        """One row per producer of each shuffle queue: its watermark, whether it is idle, and whether it
        is the one holding the queue's watermark back."""
        rows = [[q.topic, q.queue, p, s.get("watermark"), bool(s.get("idle")), p == q.held_back_by]
                for q in self.queues for p, s in q.producers.items()]
        return _frame(rows, PRODUCER_COLUMNS, ("watermark",))

    def pending_to_pandas(self) -> Any:
        """One row per open window (at most 20 per operator and queue, earliest end first) with the
        reason it has not fired yet."""
        rows = [[q.topic, q.queue, op.name, key, start, end, q.why_not_fired(end)]
                for q in self.queues for op in q.operators for key, start, end in op.pending]
        return _frame(rows, PENDING_COLUMNS)

    def sources_to_pandas(self) -> Any:
        """One row per source queue and shuffle sink feeding a window or join: its watermark,
        ``max(data time - allowed lateness)`` over the records it sent so far."""
        rows = [[s.topic, s.queue, s.shuffle_sink, s.shuffle_topic, s.watermark, s.batch_id] for s in self.sources]
        return _frame(rows, SOURCE_COLUMNS, ("watermark",))

    # -- HTML ---------------------------------------------------------------------------------
    def status_html(self) -> str:
        colour = "#2b8a3e" if self.running else "#495057"
        return f'<div style="color:{colour};font-family:monospace">{escape(self.status)}</div>'

    def queues_html(self) -> str:
        if not self.queues:
            return "<i>no window or join queue has run yet</i>"
        # wrap: its 11 columns are wider than a notebook; they wrap rather than run past its edge
        return _table("shuffle queues (operator watermark = min over producers that are not idle)", QUEUE_COLUMNS,
                      self._shown(self.to_pandas()), highlight={"windows_open": "#fff3bf", "late": "#ffe3e3"},
                      wrap=True)

    def producers_html(self) -> str:
        if not self.queues:
            return ""
        return _table("producers of each shuffle queue", PRODUCER_COLUMNS, self._shown(self.producers_to_pandas()),
                      highlight={"holding_back": "#fff3bf", "idle": "#e7f5ff"}, wrap=True)

    def pending_html(self) -> str:
        title = "open windows: why they have not fired yet"
        rows = self._shown(self.pending_to_pandas())
        unlisted = [f"{op.name} on {q.topic}/{q.queue}: {op.windows_open - len(op.pending)} more open windows "
                    f"not listed; {q.waiting_for()}"
                    for q in self.queues for op in q.operators if op.windows_open > len(op.pending)]
        html = (_table(title, PENDING_COLUMNS, rows, wrap=True) if rows
                else f"<div><b>{escape(title)}</b>: <i>none listed</i></div>")
        if unlisted:
            html += "".join(f'<div style="font-family:monospace;font-size:12px">{escape(u)}</div>' for u in unlisted)
        return html

    def sources_html(self) -> str:
        if not self.sources:
            return ""
        return _table("source queues (watermark = max(data time - allowed lateness))", SOURCE_COLUMNS,
                      self._shown(self.sources_to_pandas()), wrap=True)

    def _shown(self, frame: Any) -> list[list[Any]]:
        """Rows for an HTML table: rstream's long shuffle topic names shortened (``to_pandas()`` keeps them)."""
        for column in ("topic", "shuffle_topic"):
            if column in frame:
                frame = frame.assign(**{column: frame[column].map(lambda t: short_topic_name(t, self.job_id))})
        return _shown(frame)

    def legend_html(self) -> str:
        return (
            '<div style="font-size:12px;color:#495057">'
            f"allowed lateness {self.allowed_lateness_ms} ms; a producer without data for "
            f"{self.idle_timeout_ms} ms is idle and stops holding windows back; a window [start, end) fires "
            "when its queue's watermark reaches its end. As of each queue's latest batch"
            f"{'' if self.last_batch_id is None else f' (job batch {self.last_batch_id})'}.</div>"
        )

    def _repr_html_(self) -> str:
        return (f"<div>{self.status_html()}{self.queues_html()}{self.pending_html()}{self.producers_html()}"
                f"{self.sources_html()}{self.legend_html()}</div>")

    def __repr__(self) -> str:
        return f"WatermarkSnapshot({self.status})"


def _text(watermark: int | None) -> str:
    return "none" if watermark is None else str(watermark)


def _frame(rows: list[list[Any]], columns: list[str], watermarks: tuple[str, ...] = ()) -> Any:
    """A DataFrame whose watermark columns are integers with ``<NA>`` for "no watermark"."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=columns)
    for column in watermarks:
        frame[column] = frame[column].astype("Int64")
    return frame


def _shown(frame: Any) -> list[list[Any]]:
    """Rows for an HTML table: no watermark shows as ``-``."""
    import pandas as pd

    return [["-" if value is None or value is pd.NA else (value.item() if hasattr(value, "item") else value)
             for value in row] for row in frame.astype(object).itertuples(index=False)]

