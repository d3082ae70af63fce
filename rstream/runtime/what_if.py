"""``job.what_if(...)``: the job's own committed input run again, in scratch storage, with other settings or
another topology built from the same sources, and the two results side by side.

It is exact because a job's results are a function of its input, not of how a run cut it into batches
(``rstream.processors.ordered``): the committed source ranges are copied, queue by queue and in order
(keys, bodies, born times, headers), into an embedded broker in a temporary folder; the job's topology
and the changed one each run over the copy in this process (``InProcessJob``, no Spark), to the end of
input; their sinks and late records are compared key by key and window by window, and each run's
event-time picture is drawn over its batches. Nothing is written to the job's broker.
Processing time is the one thing a re-run cannot give back (``time_type="processing_time"``, or
processing-time timers): a run again is a run now. RIP-58 has nothing of the kind; Beam's interactive
runner records a source and replays it, Spark 4's state data source reads state between batches; none
re-runs the same input with changed settings and shows the difference.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from html import escape
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker
from rstream.broker.embedded import EmbeddedBroker
from rstream.errors import RStreamError
from rstream.graph.topology import Topology, short_topic_name
from rstream.runtime.eventtime import EventTimeSnapshot
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.job_core import JobCore
from rstream.runtime.job_progress import ProgressLog
from rstream.runtime.topics import late_topic_name
from rstream.settings import JobProperties

#: The sink of late records in a result: ``late`` rows keyed by the record's key.
LATE = "late records"
#: Properties a run again cannot honour: where it runs, and idleness (processing time).
NOT_RERUN = frozenset({"idle_timeout_ms", "trigger_interval_ms", "data_dir", "job_dir", "tasks",
                       "shuffle_in_source_job", "consume_from"})
#: What ``WhatIf.diff()`` says of a row: a sink's key and window only in one run, or with other values
#: in each; an input record late in one run only.
ONLY_BEFORE, ONLY_AFTER, DIFFERS = "only before", "only after", "differs"
BECAME_LATE, BECAME_ON_TIME = "became late", "became on time"
CHANGES = (ONLY_BEFORE, ONLY_AFTER, DIFFERS, BECAME_LATE, BECAME_ON_TIME)
#: Columns of ``WhatIf.diff()``.
DIFF_COLUMNS = ["sink", "key", "window", "before", "after", "change", "record"]
#: Row colours of the diff table, by change.
CHANGE_COLOURS = {ONLY_BEFORE: "#fff4e6", ONLY_AFTER: "#e7f5ff", DIFFERS: "#fff3bf", BECAME_LATE: "#ffe3e3",
                  BECAME_ON_TIME: "#d3f9d8"}
#: Rows of the diff table shown in a notebook (``diff()`` has them all).
MAX_ROWS = 60
#: A sink message key that is a window's: ``key@[start,end)`` (``rstream.time.windows.WINDOW_KEY_FORMAT``).
_WINDOW_KEY = re.compile(r"^(.*)@\[(-?\d+),(-?\d+)\)$", re.S)


def _fields(properties: JobProperties) -> dict[str, Any]:
    return {f.name: getattr(properties, f.name) for f in fields(properties)}


class WhatIfError(RStreamError, ValueError):
    """``what_if`` was asked something it cannot run."""


@dataclass(frozen=True)
class LateInRun:
    """A record a run found late: where it is in its source topic (``topic``, ``queue``, ``offset``),
    its key and value as the late-data topic shows them, its data time, the watermark it was judged
    by, the coded ``cause`` and the operator."""

    topic: str
    queue: int
    offset: int
    key: str
    value: str
    data_time: int
    watermark: int
    cause: str
    operator: str

    @property
    def where(self) -> tuple[str, int, int]:
        return (self.topic, self.queue, self.offset)

    def __str__(self) -> str:
        return f"{self.value} at {self.data_time}: {self.cause} ({self.operator})"


@dataclass(frozen=True)
class WhatIfRun:
    """One run of the job's committed input in scratch storage: ``sinks`` (per sink topic, per message
    key, the values written as text; a window's result is keyed ``key@[start,end)``), the records it
    found ``late``, the ``batches`` it took, and its event-time ``picture`` over those batches."""

    label: str
    topology: Topology = field(repr=False)
    sinks: dict[str, dict[str, list[str]]]
    late: list[LateInRun]
    batches: int
    picture: EventTimeSnapshot = field(repr=False)

    @property
    def per_key(self) -> dict[str, dict[str, list[str]]]:
        """``sinks`` and, under ``LATE``, the late records per key (as text)."""
        late: dict[str, list[str]] = {}
        for r in self.late:
            late.setdefault(_unquoted(r.key), []).append(str(r))
        return {**self.sinks, LATE: late}

    def windows_of(self, operator: str, data_time: int) -> list[tuple[int, int] | None]:
        """The fixed windows of ``operator`` that hold ``data_time`` ([None] for an operator without
        fixed windows: a session, a join, a process function)."""
        node = next((n for n in self.topology.nodes if n.name == operator), None)
        window = node.params.get("window") if node is not None else None
        try:
            found: list[tuple[int, int] | None] = list(window.assign(data_time)) if window is not None else []
        except TypeError:  # a session window assigns nothing
            found = []
        return found or [None]


@dataclass(frozen=True)
class WhatIf:
    """Two runs of the same input: ``before`` (the job as it is) and ``after`` (with the changes), each
    ``{sink topic: {key: [value, ...]}}`` (values as the sink wrote them, text; late records under
    ``LATE``). ``diff()`` (and ``to_pandas()``) lists what differs, key by key and window by window;
    ``before_run`` and ``after_run`` hold each run's late records, batches and event-time picture. In a
    notebook it shows the two pictures one above the other and the differences as a table."""

    changes: dict[str, Any]
    records: int
    before_run: WhatIfRun
    after_run: WhatIfRun

    @property
    def before(self) -> dict[str, dict[str, list[str]]]:
        return self.before_run.per_key

    @property
    def after(self) -> dict[str, dict[str, list[str]]]:
        return self.after_run.per_key

    def diff(self) -> Any:
        """A DataFrame, one row per difference, ``DIFF_COLUMNS``: per sink, key and window (a window's
        result: ``(start, end)``; None for a sink without windows) the values in each run, sorted, and
        ``change``: ``only before``, ``only after`` or ``differs``; per input record late in one run
        only (``record``: ``topic/queue/offset``, ``sink``: ``LATE``), each of its windows, ``became
        late`` or ``became on time``. Rows are sorted by key and window, a window's late records
        after its values."""
        import pandas as pd

        rows = []
        x, y = self.before_run, self.after_run
        for sink in sorted(set(x.sinks) | set(y.sinks)):
            a_sink, b_sink = x.sinks.get(sink, {}), y.sinks.get(sink, {})
            for message_key in set(a_sink) | set(b_sink):
                a, b = sorted(a_sink.get(message_key, [])), sorted(b_sink.get(message_key, []))
                if a != b:
                    key, window = split_window(message_key)
                    change = ONLY_AFTER if not a else ONLY_BEFORE if not b else DIFFERS
                    rows.append({"sink": sink, "key": key, "window": window, "before": a, "after": b,
                                 "change": change, "record": None})
        late_x = {r.where: r for r in x.late}
        late_y = {r.where: r for r in y.late}
        for run, found, other, change in ((y, late_y, late_x, BECAME_LATE), (x, late_x, late_y, BECAME_ON_TIME)):
            for where in set(found) - set(other):
                r = found[where]
                for window in run.windows_of(r.operator, r.data_time):
                    text = [str(r)]
                    rows.append({"sink": LATE, "key": _unquoted(r.key), "window": window,
                                 "before": text if change == BECAME_ON_TIME else [],
                                 "after": text if change == BECAME_LATE else [], "change": change,
                                 "record": f"{where[0]}/{where[1]}/{where[2]}"})

        def order(row: dict[str, Any]) -> tuple[Any, ...]:
            window = row["window"] or (-(2**63), -(2**63))
            return (str(row["key"]), window, row["sink"] == LATE, row["sink"], row["record"] or "")

        return pd.DataFrame(sorted(rows, key=order), columns=DIFF_COLUMNS)

    def to_pandas(self) -> Any:
        """``diff()``."""
        return self.diff()

    @property
    def same(self) -> bool:
        """Whether the changes changed nothing."""
        return self.diff().empty

    def counts(self) -> dict[str, int]:
        """How many rows of ``diff()`` say each change (only those that occur)."""
        diff = self.diff()
        return {c: int((diff["change"] == c).sum()) for c in CHANGES if (diff["change"] == c).any()}

    @property
    def summary(self) -> str:
        counts = self.counts()
        said = ", ".join(f"{n} {c}" for c, n in counts.items()) if counts else "the same results"
        return (f"what if {_changes_text(self.changes)}: {self.records} input records run again "
                f"({self.before_run.batches} and {self.after_run.batches} batches); {said}")

    # -- in a notebook ------------------------------------------------------------------------------
    def pictures_html(self) -> str:
        """The two runs' event-time pictures one above the other, on the same axes."""
        a, b = self.before_run.picture, self.after_run.picture
        spans = [t for t in (a.event_times, b.event_times) if t is not None]
        shared: dict[str, Any] = {"size": (9.6, 3.6), "right": max(a.right, b.right)}
        if spans:
            shared["event_times"] = (min(s[0] for s in spans), max(s[1] for s in spans))
        titles = [f"before: the job as it is ({self.before_run.batches} batches)",
                  f"after: {_changes_text(self.changes)} ({self.after_run.batches} batches)"]
        return "".join(f'<div style="max-width:100%">{p.html(title=t, **shared)}</div>'
                       for p, t in zip((a, b), titles))

    def table_html(self, changes: Iterable[str] | None = None, key: str | None = None, max_rows: int = MAX_ROWS) -> str:
        """The differences as an HTML table that fits the notebook's width: long values wrap; the
        records of one key and window that became late (or on time) share a row; at most ``max_rows``
        rows. Only those whose change is in ``changes`` and whose key holds ``key``, if given."""
        diff = self.diff()
        if changes is not None:
            diff = diff[diff["change"].isin(list(changes))]
        if key:
            diff = diff[diff["key"].astype(str).str.contains(key, regex=False)]
        if diff.empty:
            return '<div style="font-family:monospace;margin:4px 0"><i>no differences</i></div>'
        job_id = self.before_run.topology.job_id
        nowrap = "padding:1px 6px;border-bottom:1px solid #e9ecef;white-space:nowrap;text-align:left;vertical-align:top"
        wrap = ("padding:1px 6px;border-bottom:1px solid #e9ecef;white-space:normal;overflow-wrap:anywhere;"
                "text-align:left;vertical-align:top;min-width:6em")
        style = {c: wrap if c in ("before", "after") else nowrap for c in ("sink", "key", "window", "change", "before",
                                                                            "after")}
        sinks = len(set(diff["sink"]) - {LATE}) > 1  # (a record that became late or on time says so itself)
        columns = [*(["sink"] if sinks else []), "key", "window", "change", "before", "after"]
        late = {f"{r.topic}/{r.queue}/{r.offset}": r for run in (self.before_run, self.after_run) for r in run.late}
        grouped: dict[tuple[Any, ...], list[Any]] = {}
        for row in diff.itertuples(index=False):  # a window's late records in one row
            ident = (row.sink, row.key, row.window, row.change, None if row.sink == LATE else row.record)
            grouped.setdefault(ident, []).append(row)
        body = []
        for (sink, key, window, change, _record), rows in list(grouped.items())[:max_rows]:
            cells = {"sink": escape(sink if sink == LATE else short_topic_name(sink, job_id)),
                     "key": escape(_cut(key, 30)), "window": escape(_window_text(window)), "change": escape(change)}
            for side in ("before", "after"):
                if sink == LATE:
                    texts = [_late_text(late[r.record]) for r in rows if getattr(r, side)]
                    if len(texts) > 1:
                        texts.insert(0, f"{len(texts)} records:")
                else:
                    texts = [_cut(_shown(key, window, v), 120) for v in getattr(rows[0], side)]
                cells[side] = "<br>".join(escape(t) for t in texts) or "&ndash;"
            tds = "".join(f'<td style="{style[c]}">{cells[c]}</td>' for c in columns)
            body.append(f'<tr style="background:{CHANGE_COLOURS.get(change, "white")}">{tds}</tr>')
        more = (f'<div style="font-size:12px;color:#495057">… and {len(grouped) - max_rows} more rows '
                "(<code>diff()</code> has every difference)</div>" if len(grouped) > max_rows else "")
        head = "".join(f'<th style="{nowrap}">{c}</th>' for c in columns)
        return ('<div style="max-width:100%;overflow-x:auto"><table style="border-collapse:collapse;'
                f'font-family:monospace;font-size:12px;max-width:100%"><thead><tr>{head}</tr></thead>'
                f"<tbody>{''.join(body)}</tbody></table></div>{more}")

    def _repr_html_(self) -> str:
        return (f'<div class="rstream-what-if" style="max-width:100%"><div style="font-family:monospace;margin:4px 0;'
                f'overflow-wrap:anywhere"><b>what if</b> {escape(self.summary[len("what if "):])}</div>'
                f"{self.pictures_html()}{self.table_html()}</div>")

    def __repr__(self) -> str:
        return f"WhatIf({self.changes}, {self.records} records, {len(self.diff())} difference(s))"


def split_window(message_key: str) -> tuple[str, tuple[int, int] | None]:
    """A sink message key as ``(key, (start, end))`` when it is a window's result, else ``(key, None)``."""
    m = _WINDOW_KEY.match(message_key)
    return (m.group(1), (int(m.group(2)), int(m.group(3)))) if m else (message_key, None)


def _unquoted(text: str) -> str:
    """A key as the late-data topic writes it (its ``repr``) as a sink's message key has it."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
        return value if isinstance(value, str) else text
    return text


def _changes_text(changes: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" if k != "topology" else f"topology {v}" for k, v in changes.items()) or "no change"


def _clock(ms: int) -> str:
    """Epoch milliseconds as a time of day (local, as the event-time picture shows it); small numbers as they are."""
    if abs(ms) < 10**11:
        return str(ms)
    text = time.strftime("%H:%M:%S", time.localtime(ms / 1000))
    return text + (f".{ms % 1000:03d}" if ms % 1000 else "")


def _window_text(window: Any) -> str:
    return "" if window is None else f"[{_clock(window[0])}, {_clock(window[1])})"


def _late_text(r: LateInRun) -> str:
    """A late record in a table cell: where it is, its data time and why (its value is in ``diff()``)."""
    return f"{r.topic}/{r.queue}/{r.offset} t={_clock(r.data_time)} {r.cause} {_clock(r.watermark)}"


def _cut(text: Any, limit: int) -> str:
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(key: str, window: Any, value: str) -> str:
    """A sink's value without what the row already says: the ``key@[start,end):`` a text sink writes
    before it, or the ``key`` of a JSON sink's ``{"key": ..., "value": ...}``."""
    prefix = f"{key}@[{window[0]},{window[1]}):" if window is not None else f"{key}:"
    if value.startswith(prefix):
        return value[len(prefix):]
    try:
        doc = json.loads(value)
    except ValueError:
        return value
    if isinstance(doc, dict) and set(doc) == {"key", "value"}:
        return json.dumps(doc["value"])
    return value


def what_if(topology: Topology, broker: Broker, properties: JobProperties, changes: Mapping[str, Any],
            changed: Any = None, work: Path | None = None) -> WhatIf:
    """Run ``topology``'s committed source input again with ``changes`` to its properties (and
    ``changed`` instead of the topology: a ``Topology`` or ``StreamBuilder`` built from the same source
    topics), and the job as it is, both in scratch storage under ``work`` (a temporary folder by
    default). See the module docstring."""
    if changed is not None and not isinstance(changed, Topology):
        if not hasattr(changed, "build"):
            raise WhatIfError(f"what_if takes another topology as a StreamBuilder or Topology, not "
                              f"{type(changed).__name__}")
        changed = changed.build()
    new_topology = changed if changed is not None else topology
    missing = sorted(set(new_topology.source_topics) - set(topology.source_topics))
    if missing:
        raise WhatIfError(f"the changed topology reads {missing}, which job {topology.job_id!r} does not read: "
                          f"what_if runs the job's own input again ({topology.source_topics}); build the changed "
                          "job from the same source topics")
    fixed = sorted(set(changes) & NOT_RERUN)
    if fixed:
        raise WhatIfError(f"what_if cannot change {fixed}: a run again reads the committed input to its end, in "
                          "one process, with no idleness (processing time is the one thing it cannot give back); "
                          "change what decides results: allowed_lateness_ms, time_type, aggregate_emit, "
                          "max_records_per_queue, or the topology")
    new_props = JobProperties.of({**_fields(properties), **dict(changes)})  # JobError for an unknown property
    if work is not None:
        work.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="rstream-what-if-", dir=work))
    try:
        queues, rows, places = _committed_input(topology, broker)
        before = _run("before", topology, properties, queues, rows, places, folder / "before")
        after = _run("after", new_topology, new_props, queues, rows, places, folder / "after")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    shown = dict(changes)
    if changed is not None:
        shown["topology"] = changed.job_id
    return WhatIf(shown, sum(map(len, rows.values())), before, after)


def _committed_input(topology: Topology, broker: Broker) -> tuple[
        dict[str, int], dict[tuple[str, int], list[Any]], dict[tuple[str, int], list[int]]]:
    """The job's source topics' queue counts, the committed records of each source queue, in order,
    as the source read them (keys, bodies, born times, headers), ready to append, and each record's
    offset in the job's topic (the copy's offsets start at 0)."""
    queues: dict[str, int] = {}
    rows: dict[tuple[str, int], list[Any]] = {}
    places: dict[tuple[str, int], list[int]] = {}
    for topic in topology.source_topics:
        queues[topic] = broker.topic(topic).queues
        for queue in range(queues[topic]):
            last = broker.last_commit(topology.job_id, topic, queue)
            if last is None:
                continue
            read = list(broker.read_records(topic, queue, 0, last.end_offset))
            if read:
                rows[(topic, queue)] = [(key, body, born, dict(headers) if headers else None, None)
                                        for _offset, key, body, born, _store, headers in read]
                places[(topic, queue)] = [r[0] for r in read]
    return queues, rows, places


def _run(label: str, topology: Topology, properties: JobProperties, queues: Mapping[str, int],
         rows: Mapping[tuple[str, int], list[Any]], places: Mapping[tuple[str, int], list[int]],
         folder: Path) -> WhatIfRun:
    """``topology`` over a copy of the input in a broker of its own, to its end (the idle flush): its
    sinks per key, its late records (at their offsets in the job's topics) and its picture."""
    broker = EmbeddedBroker(folder / "broker")
    for topic, n in queues.items():
        broker.create_topic(topic, queues=n)
    if rows:
        broker.append(dict(rows))
    settings = JobProperties.of({**_fields(properties), "data_dir": str(folder), "job_dir": None,
                                 "idle_timeout_ms": 2**40})  # no idleness: the input's end is its only end
    batches = InProcessJob(topology, broker, folder / "job", settings).run_until_idle()
    sinks: dict[str, dict[str, list[str]]] = {}
    for topic in topology.sink_topics:
        per_key: dict[str, list[str]] = {}
        for m in broker.read(topic) if broker.has_topic(topic) else []:
            key = m.key if isinstance(m.key, str) else repr(m.key)
            per_key.setdefault(key, []).append(m.body.decode("utf-8", "replace"))
        sinks[topic] = per_key
    late = []
    late_topic = late_topic_name(topology.job_id)
    for m in broker.read(late_topic) if broker.has_topic(late_topic) else []:
        row = json.loads(m.body)
        topic, queue, offset = str(row["topic"]), int(row["queue"]), int(row["offset"])
        at = places.get((topic, queue))
        late.append(LateInRun(topic, queue, at[offset] if at is not None and 0 <= offset < len(at) else offset,
                              str(row["key"]), str(row["value"]), int(row["data_time"]), int(row["watermark"]),
                              str(row["cause"]), str(row["operator"])))
    core = JobCore(topology, settings, broker, folder / "job")
    history = ProgressLog(core).history()
    picture = EventTimeSnapshot.over_batches(core, history)
    return WhatIfRun(label, topology, sinks, late, batches, picture)
