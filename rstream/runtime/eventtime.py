"""``EventTimeSnapshot``: the classic picture of event time against processing time, as data.

Processing time runs left to right, event time bottom to top. Grey dots are records as they crossed
a window or join shuffle (when, and the data time they carried); a step line per source queue is its
watermark; the dashed line is the operator watermark (the minimum over producers that are not idle);
each window span is a band from when it opened to when it fired (amber while open, green once
fired); red crosses are late records, drawn when they were found, at their data time.

Everything is read from a job's committed batches and its topics (so also after a restart), and
drawn with matplotlib (its object API, no pyplot: safe from a renderer thread) as a PNG: the same
picture live in JupyterLab (``rstream.widgets.EventTimeChart`` redraws it) and in a static notebook.
A run again (``job.what_if``) draws the same picture over its batches instead of processing time
(``over_batches``): a re-run's wall clock says nothing of the job, its batches do.
"""

from __future__ import annotations

import base64
import io
import json
import time
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from rstream.runtime.topic_decoder import decode_message, topic_role
from rstream.shuffle.sink import SHUFFLE_SINK
from rstream.state.store import DELETE_HEADER, is_timer, split_state_key

#: Dots drawn at most (records are sampled evenly beyond that).
MAX_EVENTS = 5000
OPEN, FIRED, LATE, EVENT = "#fcc419", "#69db7c", "#e03131", "#868e96"
#: The horizontal axis of a picture over processing time, and of one over a run's batches.
PROCESSING_AXIS = "processing time (s since the first record shown)"
BATCH_AXIS = "batches run (what a batch did is drawn at its end)"
#: Width and height (inches at 100 dpi) of a picture.
SIZE = (9.6, 4.8)


class BatchClock:
    """Where a picture over batches draws what happened: at the end of the batch that did it (batch
    ``i`` at ``(i + 1) * 1000``, so the axis counts batches). A record is placed by the commit tag whose
    outputs hold it (exactly, not by when it was stored: two batches can commit within a millisecond);
    a queue's progress by its batch."""

    def __init__(self, tags: Iterable[Any]) -> None:
        self._ranges: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        self.batches = 0
        for tag in tags:
            if tag.batch_id is None:
                continue
            self.batches = max(self.batches, tag.batch_id + 1)
            for name, (first, end) in tag.outputs.items():
                topic, _, queue = name.rpartition("/")
                self._ranges.setdefault((topic, int(queue)), []).append((int(first), int(end), tag.batch_id))
        for ranges in self._ranges.values():
            ranges.sort()

    def record(self, topic: str, queue: int, offset: int, store_ms: int) -> int:
        ranges = self._ranges.get((topic, queue), [])
        i = bisect_right(ranges, (offset, 2**62)) - 1
        if i >= 0 and ranges[i][0] <= offset < ranges[i][1]:
            return (ranges[i][2] + 1) * 1000
        return self.batches * 1000  # (written by no batch: a tick, drawn at the end)

    def commit(self, q: Any) -> int:
        return (q.batch_id + 1) * 1000


@dataclass(frozen=True)
class Span:
    """One window span of one operator: opened when first seen open, fired when no queue held it any
    more (None: still open). Times in milliseconds."""

    operator: str
    start: int
    end: int
    opened_ms: int
    fired_ms: int | None


@dataclass(frozen=True)
class EventTimeSnapshot:
    """What the picture draws, as data (``to_pandas()`` and friends), taken from a job's committed
    batches (so also after a restart) and its topics.

    ``origin``: processing time zero of the picture (default: the first moment it shows); ``axis``:
    what its horizontal axis is (``PROCESSING_AXIS``, or ``BATCH_AXIS``: ``over_batches``)."""

    job_id: str
    watermarks: dict[str, list[tuple[int, int]]]  # series -> (processing ms, watermark ms)
    operator_watermarks: dict[str, list[tuple[int, int]]]  # shuffle topic -> (processing ms, min watermark)
    spans: list[Span]
    late: list[tuple[int, int, int, str]]  # (found ms, data time, watermark, operator)
    events: list[tuple[int, int]]  # (processing ms, data time)
    now_ms: int
    taken_at: float = field(default_factory=time.time)
    origin: int | None = None
    axis: str = PROCESSING_AXIS

    @classmethod
    def of(cls, job: Any, history: Sequence[Any] | None = None, clock: BatchClock | None = None) -> EventTimeSnapshot:
        """The picture of ``job``: a ``RocketMQStream``, or anything with its ``job_id``, ``topology``,
        ``broker`` and ``late_topic`` (a ``JobCore``); ``history``: its batches (``BatchProgress``,
        oldest first; default ``job.history()``). With ``clock``, over batches instead of processing
        time (``over_batches``)."""
        record = clock.record if clock is not None else _stored
        commit = clock.commit if clock is not None else _committed
        topology = job.topology
        framed = set(topology.framed_topics)
        feeds = {n.name: n.params["topic"] for n in topology.nodes
                 if n.spec is SHUFFLE_SINK and n.params.get("topic") in framed}
        windowed = {n.name for n in topology.nodes if n.windowed}
        sinks_per_queue: dict[tuple[str, int], set[str]] = {}
        commits = sorted((q for b in (job.history() if history is None else history) for q in b.queues), key=lambda q: q.committed_ms)
        for q in commits:
            for name in q.operators:
                if name in feeds:
                    sinks_per_queue.setdefault((q.topic, q.queue), set()).add(name)
        watermarks: dict[str, list[tuple[int, int]]] = {}
        operator_wm: dict[str, list[tuple[int, int]]] = {}
        latest_wm: dict[tuple[str, int], int | None] = {}
        for q in commits:
            for name, counters in q.operators.items():
                wm = counters.get("watermark")
                if name in feeds and wm is not None:
                    series = f"{q.topic}/{q.queue}"
                    if len(sinks_per_queue.get((q.topic, q.queue), ())) > 1:
                        series += f" ({name})"
                    watermarks.setdefault(series, []).append((commit(q), int(wm)))
            if q.topic in framed:
                latest_wm[(q.topic, q.queue)] = q.watermark
                known = [w for (t, _), w in latest_wm.items() if t == q.topic and w is not None]
                if known:
                    operator_wm.setdefault(q.topic, []).append((commit(q), min(known)))
        if clock is None:
            return cls(job.job_id, watermarks, operator_wm, _spans(job, windowed, record), _late(job, record),
                       _events(job, framed, record), time.time_ns() // 1_000_000)
        return cls(job.job_id, watermarks, operator_wm, _spans(job, windowed, record), _late(job, record),
                   _events(job, framed, record), clock.batches * 1000, origin=0, axis=BATCH_AXIS)

    @classmethod
    def over_batches(cls, job: Any, history: Sequence[Any]) -> EventTimeSnapshot:
        """The picture of ``job`` (see ``of``) over its batches instead of processing time: what happened
        during batch ``i`` is drawn at ``i + 1``, the end of that batch, so two runs of the same input
        cut into the same batches draw the same picture, however long each batch took (``BatchClock``)."""
        return cls.of(job, history, BatchClock(job.broker.commits(job.job_id, 0)))

    # -- data -----------------------------------------------------------------------------------
    @property
    def origin_ms(self) -> int | None:
        """Processing time zero of the picture: the first moment it shows (None: it shows nothing)."""
        times = [t for pts in self.watermarks.values() for t, _ in pts] + [t for t, _ in self.events] \
            + [sp.opened_ms for sp in self.spans] + [f for f, *_ in self.late]
        if not times:
            return None
        return self.origin if self.origin is not None else min(times)

    @property
    def event_times(self) -> tuple[int, int] | None:
        """The lowest and highest data time the picture shows (ms), None when it shows nothing."""
        times = [v for pts in self.watermarks.values() for _, v in pts] + [d for _, d in self.events] \
            + [t for s in self.spans for t in (s.start, s.end)] + [d for _, d, *_ in self.late]
        return (min(times), max(times)) if times else None

    def to_pandas(self) -> Any:
        """Every watermark point: series (a source queue, or ``operator <shuffle topic>``),
        processing time and watermark (ms)."""
        import pandas as pd

        rows = [(name, t, wm) for name, pts in self.watermarks.items() for t, wm in pts]
        rows += [(f"operator {topic}", t, wm) for topic, pts in self.operator_watermarks.items() for t, wm in pts]
        return pd.DataFrame(rows, columns=["series", "processing_ms", "watermark"])

    def spans_to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame([(s.operator, s.start, s.end, s.opened_ms, s.fired_ms) for s in self.spans],
                            columns=["operator", "start", "end", "opened_ms", "fired_ms"])

    def late_to_pandas(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.late, columns=["found_ms", "data_time", "watermark", "operator"])

    @property
    def status(self) -> str:
        if self.origin_ms is None:
            return f"job {self.job_id!r}: no window or join has seen a record yet"
        fired = sum(1 for s in self.spans if s.fired_ms is not None)
        return (f"job {self.job_id!r}: {len(self.watermarks)} source queue watermarks, {fired} window spans fired, "
                f"{len(self.spans) - fired} open, {len(self.late)} late records, {len(self.events)} records drawn")

    # -- picture ----------------------------------------------------------------------------------
    def figure(self, size: tuple[float, float] = SIZE, title: str | None = None,
               event_times: tuple[int, int] | None = None, right: float | None = None) -> Any:
        """The picture as a matplotlib ``Figure`` (not attached to pyplot), ``size`` inches at 100 dpi.
        Two pictures drawn with the same ``event_times`` (ms) and ``right`` end (the axis' unit) share
        their axes."""
        from matplotlib.figure import Figure
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, MaxNLocator

        fig = Figure(figsize=size, dpi=100, layout="constrained")
        ax = fig.add_subplot()
        if title:
            ax.set_title(title, fontsize=10, loc="left")
        origin = self.origin_ms
        if origin is None:
            ax.text(0.5, 0.5, "no window or join has seen a record yet", ha="center", va="center", transform=ax.transAxes)
            ax.set_axis_off()
            return fig
        def x(ms: int) -> float:  # processing seconds since the picture's start (batches on a batch axis)
            return (ms - origin) / 1000

        def y(ms: int) -> float:  # event time in seconds (epoch seconds for real clocks)
            return ms / 1000

        now = x(self.now_ms)
        epoch = any(v > 10**11 for pts in self.watermarks.values() for _, v in pts) or any(
            d > 10**11 for _, d in self.events)
        for span in self.spans:
            end = x(span.fired_ms) if span.fired_ms is not None else now
            colour = FIRED if span.fired_ms is not None else OPEN
            ax.fill_between([x(span.opened_ms), end], y(span.start), y(span.end), color=colour, alpha=0.28, lw=0)
            ax.plot([end, end], [y(span.start), y(span.end)], color=colour, lw=1.5)
        if self.events:
            ax.scatter([x(t) for t, _ in self.events], [y(v) for _, v in self.events], s=9, color=EVENT, zorder=2)
        palette = ["#1971c2", "#9c36b5", "#0c8599", "#e8590c", "#2f9e44", "#c2255c", "#5c940d", "#1864ab"]
        for i, (name, pts) in enumerate(sorted(self.watermarks.items())):
            xs, ys = _steps([(x(t), y(v)) for t, v in pts], now)
            ax.plot(xs, ys, color=palette[i % len(palette)], lw=1.8, label=f"watermark {name}", zorder=3)
        for name, pts in sorted(self.operator_watermarks.items()):
            xs, ys = _steps([(x(t), y(v)) for t, v in pts], now)
            ax.plot(xs, ys, color="black", lw=1.2, ls="--", zorder=3, label="operator watermark (min)"
                    if len(self.operator_watermarks) == 1 else f"operator watermark {name[-30:]}")
        if self.late:
            ax.scatter([x(f) for f, *_ in self.late], [y(d) for _, d, _, _ in self.late], marker="x", s=50,
                       color=LATE, zorder=4, lw=2)
        ax.set_xlim(left=0, right=(right if right is not None else max(now, 1.0)) * 1.02)
        if event_times is not None:
            low, high = y(event_times[0]), y(event_times[1])
            pad = max((high - low) * 0.03, 0.5)
            ax.set_ylim(low - pad, high + pad)
        ax.set_xlabel(self.axis)
        if self.axis == BATCH_AXIS:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("event time" + (" (clock)" if epoch else " (s)"))
        if epoch:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: time.strftime("%H:%M:%S", time.localtime(v))))
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        handles += [Line2D([], [], marker="o", ls="", color=EVENT, label="record"),
                    Line2D([], [], marker="x", ls="", color=LATE, mew=2, label="late record"),
                    Patch(color=OPEN, alpha=0.5, label="window open"), Patch(color=FIRED, alpha=0.5, label="window fired")]
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=10, frameon=False)
        return fig

    @property
    def right(self) -> float:
        """Where the picture's horizontal axis ends (seconds, or batches), before its margin."""
        origin = self.origin_ms
        return 1.0 if origin is None else max((self.now_ms - origin) / 1000, 1.0)

    def png(self, **figure: Any) -> bytes:
        """The picture as PNG bytes (``figure``: what ``figure()`` takes)."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig = self.figure(**figure)
        FigureCanvasAgg(fig)
        out = io.BytesIO()
        fig.savefig(out, format="png")
        return out.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png()

    def html(self, **figure: Any) -> str:
        """An ``<img>`` of the picture that is never wider than the output area."""
        data = base64.b64encode(self.png(**figure)).decode()
        alt = f'event time against {"batches" if self.axis == BATCH_AXIS else "processing time"}'
        if figure.get("title"):
            alt = f"{figure['title']}: {alt}"
        return (f'<img alt="{escape(alt)}" style="max-width:100%;height:auto" '
                f'src="data:image/png;base64,{data}">')

    def _repr_html_(self) -> str:
        return (f'<div><div style="color:#495057;font-family:monospace;overflow-wrap:anywhere">{escape(self.status)}'
                f"</div>{self.html()}</div>")


def _steps(points: list[tuple[float, float]], right: float) -> tuple[list[float], list[float]]:
    """A watermark as a step line: it holds its value until the next point, and until ``right``."""
    xs: list[float] = []
    ys: list[float] = []
    for i, (px, py) in enumerate(points):
        if i:
            xs.append(px)
            ys.append(ys[-1])
        xs.append(px)
        ys.append(py)
    if points:
        xs.append(max(right, points[-1][0]))
        ys.append(ys[-1])
    return xs, ys


def _stored(topic: str, queue: int, offset: int, store_ms: int) -> int:
    return store_ms


def _committed(q: Any) -> int:
    return int(q.committed_ms)


def _spans(job: Any, windowed: set[str], at: Any = _stored) -> list[Span]:
    """Every window span, read from the state topics: a window's state is put when it opens and deleted
    (a tombstone) when it fires, both stamped with the broker time of their batch's commit; a window
    that opened and fired in one batch leaves only its tombstone. A span is open while any key holds it.
    (Compaction drops tombstones: fired windows before a compaction are not drawn.)"""
    opened: dict[tuple[str, int, int, Any], int] = {}
    fired: dict[tuple[str, int, int, Any], int] = {}
    for shuffle in job.topology.framed_topics:
        state_topic = job.topology.state_topics[shuffle]
        if not job.broker.has_topic(state_topic):
            continue
        for m in job.broker.read(state_topic):
            if not isinstance(m.key, str):
                continue
            kb = bytes.fromhex(m.key)
            if is_timer(kb):
                continue
            operator, key = split_state_key(kb)
            window = _window_of(key) if operator in windowed else None
            if window is None:
                continue
            ident = (operator, window[0], window[1], key)
            when = at(state_topic, m.queue_id, m.offset, m.store_timestamp)
            if m.body and DELETE_HEADER not in m.headers:
                opened.setdefault(ident, when)
            else:
                fired[ident] = when
    spans: dict[tuple[str, int, int], list[tuple[int, int | None]]] = {}
    for ident in opened.keys() | fired.keys():
        at = opened.get(ident, fired.get(ident, 0))
        spans.setdefault(ident[:3], []).append((at, fired.get(ident)))
    out = []
    for (operator, start, end), keys in spans.items():
        done = [f for _, f in keys if f is not None]
        out.append(Span(operator, start, end, min(a for a, _ in keys), max(done) if len(done) == len(keys) else None))
    return sorted(out, key=lambda sp: (sp.operator, sp.end, sp.start))


def _window_of(key: Any) -> tuple[int, int] | None:
    """The ``(start, end)`` of a window operator's state key: ``(key, start, end)`` for a windowed
    aggregate, ``(side, key, start, end)`` for a windowed join; None for anything else it keeps."""
    if isinstance(key, tuple) and len(key) in (3, 4) and isinstance(key[-1], int) and isinstance(key[-2], int) \
            and not (len(key) == 3 and key[0] == "sessions"):
        return int(key[-2]), int(key[-1])
    return None


def _late(job: Any, at: Any = _stored) -> list[tuple[int, int, int, str]]:
    if not job.broker.has_topic(job.late_topic):
        return []
    out = []
    for m in job.broker.read(job.late_topic):
        row = json.loads(m.body)
        out.append((at(job.late_topic, m.queue_id, m.offset, m.store_timestamp), int(row["data_time"]),
                    int(row["watermark"]), str(row["operator"])))
    return out


def _events(job: Any, framed: set[str], at: Any = _stored) -> list[tuple[int, int]]:
    """(broker time, data time) of the records on window and join shuffle topics: each data record,
    and each record a window count's partial holds (counted before the shuffle, its time kept)."""
    points = []
    for topic in sorted(framed):
        if not job.broker.has_topic(topic):
            continue
        role = topic_role(topic, job.topology)
        for m in job.broker.read(topic):
            when = at(topic, m.queue_id, m.offset, m.store_timestamp)
            if not m.headers:
                points.append((when, m.born_timestamp))
                continue
            decoded = decode_message(role, m.key, m.body, m.headers)
            if decoded.kind == "partial":
                points += [(when, t) for t in decoded.detail.get("times", ())]
    step = max(1, len(points) // MAX_EVENTS)
    return points[::step]
