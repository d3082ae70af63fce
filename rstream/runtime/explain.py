"""``job.explain(topic, queue, offset)``: the backward lineage of one sink record.

A trace (``rstream.runtime.trace``) follows one input record forward; an explanation goes the other
way, from a record a sink wrote to the input records that made it, and does so the same way: by
re-executing committed ranges, exactly as their tasks ran them, writing nothing.

1. The commit tag whose outputs hold the sink record names the range that wrote it; that range is
   re-executed and the operator result that became the sink record is found (which operator, which
   key, while processing which record, or at which watermark).
2. The operator's input queue is read for the records of that key (by their key bytes, and for a
   window by their data times), and only the ranges that hold them are re-executed, each record
   watched: the state it changed at the operator (before and after), whether it was late or a dead
   letter. What the operator kind says then picks the contributing records: for an aggregation every
   record of the key up to the result, for a window those of the window (a session: those of the
   sessions merged into it), for a join or an interval join the records of both sides that met, for
   a stream–table join the stream record and the table update whose value it met (the last one the
   join took before it, found in the order the re-executed ranges took them), for a keyed process
   function those of its key taken up to the forward and the timer that fired.
3. Each contributing shuffle record is followed back to the source records it stands for: a framed
   record says its source offset; a partial of a combine node or a plain shuffle record is found by
   re-executing the source range that wrote it (a window count's partial: its source range run again,
   as the window operator itself does for late records).
4. An operator after another stage's shuffle reads records that stage wrote: each such input is
   explained in turn, as a result of the stage before (``Explanation.upstream``), down to the source
   records (``Explanation.sources``).

RIP-58 has nothing of the kind; the nearest relatives elsewhere are data-provenance tools for batch
jobs, not stream processors' APIs.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rstream.broker.base import CommitTag, read_blocks
from rstream.errors import RStreamError
from rstream.graph.topology import short_topic_name
from rstream.processors.aggregate import AggregateProcessor
from rstream.processors.base import DLQ_ERROR, DLQ_OFFSET, DLQ_QUEUE, DLQ_TOPIC, END_OF_BATCH
from rstream.processors.interval_join import IntervalJoinProcessor, describe_interval
from rstream.processors.join import JoinProcessor
from rstream.processors.process import ProcessProcessor
from rstream.processors.table import TABLE_SIDE, TableJoinProcessor
from rstream.processors.timed import LEFT, SIDE_NAMES
from rstream.processors.watermarks import FIRE_ALL, finite
from rstream.processors.window import WindowAggregateProcessor
from rstream.runtime.config import TaskConfig
from rstream.runtime.topic_decoder import decode_message, topic_role
from rstream.runtime.trace import Emit, Replay, Tracer, check_place, taken_in
from rstream.serde.codec import decode, encode
from rstream.settings import Guarantee
from rstream.shuffle import wire
from rstream.state.store import StateError, split_state_key
from rstream.time.windows import SessionWindow, WindowKey, WindowResult

if TYPE_CHECKING:
    from rstream.graph.topology import Topology


class ExplainError(RStreamError, LookupError):
    """A record cannot be explained: it is no sink record of the job, or the history it needs is gone."""


#: Columns of ``Explanation.to_pandas()``.
COLUMNS = ["kind", "topic", "queue", "offset", "data_time", "value", "via", "side", "batch_id", "before", "after",
           "note"]
#: Columns of the HTML table whose text wraps: the rest are short.
WRAPPED = frozenset({"topic", "value", "via", "before", "after", "note"})


@dataclass(frozen=True)
class Contribution:
    """One record an explanation names: an input record that went into the result (``kind``
    ``"input"``), one of the same key and window that was late or a dead letter instead, or the
    timer that made a process function forward (``"timer"``). ``topic``/``queue``/``offset``: where
    it is in its source topic; ``via``: the shuffle record the operator read it in; ``before`` and
    ``after``: the operator's state of the key around it."""

    kind: str
    topic: str
    queue: int
    offset: int | None
    data_time: Any
    value: Any
    via: str = ""
    side: str = ""
    batch_id: int | None = None
    before: Any = None
    after: Any = None
    note: str = ""

    @property
    def where(self) -> tuple[str, int, int | None]:
        return (self.topic, self.queue, self.offset)


@dataclass(frozen=True)
class WatermarkDecision:
    """Why a window fired when it did: the operator watermark then (None: every producer idle), the
    producer whose watermark was the minimum, every producer's watermark and idleness, and what the
    operator was reading (a watermark marker, an idle or flush tick, a record, or the end of a batch)."""

    window_end: int
    watermark: int | None
    held_by: str | None
    producers: dict[str, dict[str, Any]]
    at: str
    batch_id: int | None

    def __str__(self) -> str:
        if self.watermark is None:
            why = "every producer was idle (or the input ended), so every open window fired"
        else:
            why = f"the operator watermark reached {self.watermark} ≥ the window's end {self.window_end}"
            if self.held_by is not None:
                why += f"; the minimum was {self.held_by}'s"
        return f"fired in batch {self.batch_id} at {self.at}: {why}"


@dataclass(frozen=True)
class Explanation:
    """The backward lineage of one sink record (``job.explain``): ``inputs`` (the records that went
    into it, each where it is in its source topic), ``late`` (records of the same key and window that
    were late or dead letters instead, with their causes; for a window's final result also those that
    came after it), ``watermark`` (a window's firing), and the
    operator that made it. ``records``: the inputs as ``(topic, queue, offset)``. ``exact``: every
    re-executed range gave the committed outputs."""

    job_id: str
    topology: Topology = field(repr=False)
    sink: tuple[str, int, int]
    key: Any
    value: Any
    operator: str | None
    kind: str
    batch_id: int | None
    inputs: list[Contribution]
    late: list[Contribution]
    watermark: WatermarkDecision | None
    exact: bool
    replayed: int
    notes: list[str] = field(default_factory=list)
    #: Where an input is a record of a shuffle topic (the operator is a stage after another stage's
    #: shuffle), the explanation of the record the stage before wrote, by the input's ``via``.
    upstream: dict[str, Explanation] = field(default_factory=dict)

    @property
    def records(self) -> set[tuple[str, int, int | None]]:
        """This operator's inputs, as ``(topic, queue, offset)``: in a source topic, or in the shuffle
        topic of the stage before (``upstream`` explains those; ``sources`` follows them)."""
        return {c.where for c in self.inputs if c.kind == "input"}

    @property
    def sources(self) -> set[tuple[str, int, int | None]]:
        """The source records the result came from, through every stage before: ``records``, each one
        of a shuffle topic replaced by what its stage's result came from (one a note says was not
        followed stays as it is)."""
        out: set[tuple[str, int, int | None]] = set()
        for c in self.inputs:
            if c.kind != "input":
                continue
            up = self.upstream.get(c.via)
            out |= up.sources if up is not None else {c.where}
        return out

    def to_pandas(self) -> Any:
        import pandas as pd

        rows = [[getattr(c, name) for name in COLUMNS] for c in [*self.inputs, *self.late]]
        return pd.DataFrame(rows, columns=COLUMNS, dtype=object)

    def graph(self) -> Any:
        """The real topology with the explained path highlighted, through every stage before (a
        ``graphviz.Digraph``)."""
        return self.topology.real_graph(highlight=sorted(self._path()))

    def _path(self) -> set[str]:
        """The operators and topics of the explained path."""
        path = {self.sink[0], *(c.topic for c in self.inputs), *([self.operator] if self.operator else [])}
        path |= {c.via.rsplit("/", 2)[0] for c in self.inputs if c.via}
        for up in self.upstream.values():
            path |= up._path()
        return path

    @property
    def summary(self) -> str:
        topic, queue, offset = self.sink
        inputs = sum(1 for c in self.inputs if c.kind == "input")
        parts = [f"{topic}/{queue} offset {offset} ({self.key!r} → {self.value!r}): {self.kind}"
                 + (f" {self.operator}" if self.operator else "")
                 + (f" in batch {self.batch_id}" if self.batch_id is not None else ""),
                 f"{inputs} input record{'' if inputs == 1 else 's'}"]
        timers = sum(1 for c in self.inputs if c.kind == "timer")
        if timers:
            parts.append(f"{timers} timer{'' if timers == 1 else 's'}")
        if self.late:
            parts.append(f"{len(self.late)} late or dead letter")
        if self.watermark is not None:
            parts.append(str(self.watermark))
        if self.upstream:
            sources = self.sources
            parts.append(f"through {len(self.upstream)} record{'' if len(self.upstream) == 1 else 's'} of the stage "
                         f"before, from {len(sources)} source record{'' if len(sources) == 1 else 's'}")
        if not self.exact:
            parts.append("NOT exact: re-executing gave other outputs than the committed ones")
        return "; ".join(parts)

    def __repr__(self) -> str:
        lines = [f"Explanation({self.summary})"]
        for c in [*self.inputs, *self.late]:
            state = f" state {c.before!r} → {c.after!r}" if c.before is not None or c.after is not None else ""
            lines.append(f"  {c.kind:<11} {c.topic}/{c.queue}@{c.offset} t={c.data_time} {c.value!r}{state}"
                         + (f" ({c.note})" if c.note else ""))
        lines += [f"  note: {n}" for n in self.notes]
        for via, up in self.upstream.items():
            lines += [f"  {via} came from:", *("    " + line for line in repr(up).splitlines())]
        return "\n".join(lines)

    def table_html(self) -> str:
        """The contributions as an HTML table that fits the notebook's width: values, states and notes
        wrap (what is still too wide scrolls sideways inside its box)."""
        cell = "padding:1px 6px;border-bottom:1px solid #e9ecef;white-space:nowrap;text-align:left;vertical-align:top"
        wrap = ("padding:1px 6px;border-bottom:1px solid #e9ecef;white-space:normal;overflow-wrap:anywhere;"
                "text-align:left;vertical-align:top;min-width:5em")
        colours = {"input": "#ebfbee", "timer": "#e7f5ff", "late": "#ffe3e3", "dead letter": "#ffe3e3"}
        head = "".join(f'<th style="{cell}">{c}</th>' for c in COLUMNS)
        rows = []
        for c in [*self.inputs, *self.late]:
            values = [c.kind, short_topic_name(c.topic, self.job_id), c.queue, c.offset, c.data_time, c.value,
                      short_topic_name(c.via, self.job_id) if c.via else "", c.side, c.batch_id, c.before, c.after,
                      c.note]
            tds = "".join(f'<td style="{wrap if name in WRAPPED else cell}">{escape(_text(v))}</td>'
                          for name, v in zip(COLUMNS, values))
            rows.append(f'<tr style="background:{colours.get(c.kind, "white")}">{tds}</tr>')
        return ('<div style="max-width:100%;overflow-x:auto"><table style="border-collapse:collapse;'
                f'font-family:monospace;font-size:12px"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
                "</tbody></table></div>")

    def _repr_html_(self) -> str:
        from rstream.graph.style import fitted_svg

        notes = "".join(f"<div>{escape(n)}</div>" for n in self.notes)
        return (f'<div class="rstream-explain" style="max-width:100%"><div style="font-family:monospace;margin:4px 0;'
                f'overflow-wrap:anywhere">'
                f"<b>explain</b> {escape(self.summary)}</div>{notes}{self.table_html()}{self._upstream_html()}"
                f"<div>{fitted_svg(self.graph())}</div></div>")

    def _upstream_html(self) -> str:
        """Each record of the stage before, folded: what its result came from (its own table, and so on)."""
        return "".join(
            f'<details style="margin:2px 0 2px 12px"><summary style="font-family:monospace;overflow-wrap:anywhere">'
            f"{escape(short_topic_name(via, self.job_id))} came from: {escape(up.summary)}</summary>"
            f"{up.table_html()}{up._upstream_html()}</details>" for via, up in self.upstream.items())


def _text(value: Any, limit: int = 60) -> str:
    if value is None:
        return ""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Watched(Replay):
    """A trace's re-execution that also notes, at each result an operator forwards, what a window
    firing or a process function's forward needs: the operator watermark and its producers, the
    record or marker being read, and a process function's key, time and timer domain."""

    def __init__(self, job: Tracer, cfg: TaskConfig, tag: CommitTag, targets: Iterable[int], work: Path) -> None:
        self.at_emit: dict[int, dict[str, Any]] = {}
        #: The offsets of the records an operator that holds its records took, in the order it took
        #: them (``rstream.processors.ordered``: a stream–table join's updates and stream records).
        self.takes: list[int] = []
        super().__init__(job, cfg, tag, targets, work)

    @contextmanager
    def resumed(self, offset: int) -> Iterator[None]:
        self.takes.append(offset)
        with super().resumed(offset):
            yield

    def _emitting(self, name: str, forward: Any) -> Any:
        emit = super()._emitting(name, forward)

        def noted(key: Any, value: Any, ts: int) -> None:
            emit(key, value, ts)
            self.at_emit[len(self.emits) - 1] = {**self._moment(name), "ts": ts}
        return noted

    def _moment(self, name: str) -> dict[str, Any]:
        ctx = self.run.ctx
        moment: dict[str, Any] = {"offset": ctx.at.offset, "takes": len(self.takes)}
        proc = self.kinds.get(name)
        context = getattr(proc, "context", None)
        if context is not None:  # a keyed process function: the call that forwarded
            moment.update(key=context.key, timestamp=context.timestamp, domain=context.time_domain)
        ow = ctx.time.watermarks
        if ow is not None and getattr(proc, "fires_windows", False):
            now = ctx.idle_clock(at_end=ctx.at.offset == END_OF_BATCH)
            table = ow.describe(now, ctx.time.flushed)
            active = {p: s["watermark"] for p, s in table.items() if not s["idle"]}
            floor = min((w if w is not None else -(2**62) for w in active.values()), default=FIRE_ALL)
            moment.update(producers=table, held_by=ow.holding_back(now, ctx.time.flushed), watermark=finite(floor))
        return moment


@dataclass
class _Candidate:
    """A record of the explained key in the operator's input queue: where, as read, and what it did."""

    offset: int
    key: bytes
    body: bytes
    born: int
    headers: Any
    record: wire.ShuffleRecord
    tag: CommitTag | None = None
    replay: Replay | None = None

    @property
    def effect(self) -> Any:
        assert self.replay is not None
        return self.replay.effects.get(self.offset)


class _Explainer:
    """One explanation's work: its scratch folder, the job's commit tags indexed by what they wrote,
    and the ranges it re-executed (each once)."""

    def __init__(self, job: Tracer, work: Path) -> None:
        self.job, self.work = job, work
        self.topology = job.topology
        self.cfg = job.task_config()
        self.replays: dict[tuple[str, int, int, frozenset[int]], Replay] = {}
        self.all_exact = True
        self._writers: dict[tuple[str, int], list[tuple[int, int, CommitTag]]] | None = None
        self._inverse: dict[tuple[str, int, int], dict[tuple[str, int, int], list[tuple[int, list[int] | None]]]] = {}

    # -- committed ranges ---------------------------------------------------------------------------
    def writers(self) -> dict[tuple[str, int], list[tuple[int, int, CommitTag]]]:
        """Per topic and queue written: the ``(first, end, tag)`` of every committed range that wrote
        to it, by first offset."""
        if self._writers is None:
            found: dict[tuple[str, int], list[tuple[int, int, CommitTag]]] = {}
            broker = self.job.broker
            for topic in self.topology.input_topics:
                for queue in range(broker.topic(topic).queues):
                    for tag in self.job.queue_tags(topic, queue):
                        for name, (first, end) in tag.outputs.items():
                            t, _, q = name.rpartition("/")
                            found.setdefault((t, int(q)), []).append((int(first), int(end), tag))
            for ranges in found.values():
                ranges.sort(key=lambda r: r[0])
            self._writers = found
        return self._writers

    def writer(self, topic: str, queue: int, offset: int) -> CommitTag | None:
        """The committed range whose outputs hold ``topic``/``queue``/``offset``."""
        ranges = self.writers().get((topic, queue), [])
        i = bisect.bisect_right([r[0] for r in ranges], offset) - 1
        if i >= 0 and ranges[i][0] <= offset < ranges[i][1]:
            return ranges[i][2]
        return None

    def replay(self, tag: CommitTag, targets: Iterable[int] = ()) -> Replay:
        targets = frozenset(targets)
        key = (tag.topic, tag.queue, tag.start_offset, targets)
        found = self.replays.get(key)
        if found is None:
            try:
                found = _Watched(self.job, self.cfg, tag, targets, self.work)
            except StateError as err:
                raise ExplainError(f"cannot explain this record: the history it needs was compacted away ({err}); "
                                   "compaction keeps only each key's latest state, and a re-execution needs the "
                                   "state its range started from") from err
            self.replays[key] = found
            self.all_exact = self.all_exact and found.exact
        return found

    # -- from a shuffle record back to the source records ---------------------------------------------
    def origins(self, topic: str, queue: int, c: _Candidate, places: int | None = None,
                window: tuple[int, int] | None = None, key: Any = None) -> list[tuple[str, int, int, Any, Any]]:
        """The records ``c`` (read from ``topic``/``queue``) stands for where the job read them,
        ``(topic, queue, offset, data time, value as shuffled)``: itself on a source topic; a partial's
        records only up to ``places`` (a count's update) or in ``window`` (a window count's)."""
        record = c.record
        if topic in self.topology.source_topics:
            return [(topic, queue, c.offset, c.born, getattr(record, "value", None))]
        origin = record.origin()
        if origin is not None:
            src, src_queue = _producer_queue(origin[0])
            return [(src, src_queue, origin[1], c.born, origin[2])]
        partial = record.counts_by_window()
        if partial is not None:
            assert c.replay is not None
            src, src_queue = _producer_queue(partial.producer)
            found = c.replay.run.source_records(partial).get(key, [])
            return [(src, src_queue, off, ts, value) for off, value, ts, _wm in found
                    if window is None or window[0] <= ts < window[1]]
        tag = self.writer(topic, queue, c.offset)
        if tag is None:
            return []
        inverse = self._inverse.get((tag.topic, tag.queue, tag.start_offset))
        if inverse is None:
            end = min(tag.end_offset, self.job.broker.end_offsets(tag.topic)[tag.queue])
            made = self.replay(tag, range(tag.start_offset, end))
            inverse = {}
            for o, effect in made.effects.items():
                for made_out in effect.outputs:
                    inverse.setdefault(made_out, []).append((o, effect.places.get(made_out)))
            self._inverse[(tag.topic, tag.queue, tag.start_offset)] = inverse
        rng = tag.output_range(topic, queue)
        assert rng is not None
        times = getattr(record, "times", None) or []
        out = []
        for o, at in inverse.get((topic, queue, c.offset - rng[0]), []):
            if at is None:
                out.append((tag.topic, tag.queue, o, c.born, getattr(record, "value", None)))
                continue
            for place in at:
                if places is None or place <= places:
                    out.append((tag.topic, tag.queue, o, times[place] if place < len(times) else c.born, None))
        return out

    def source_values(self, where: Iterable[tuple[str, int, int]]) -> dict[tuple[str, int, int], Any]:
        """The values of source records as their topic holds them, decoded for display."""
        by_queue: dict[tuple[str, int], list[int]] = {}
        for t, q, o in where:
            by_queue.setdefault((t, q), []).append(o)
        out: dict[tuple[str, int, int], Any] = {}
        for (t, q), offsets in by_queue.items():
            role = topic_role(t, self.topology)
            wanted = set(offsets)
            lo, hi = min(offsets), max(offsets) + 1
            spans = [(lo, hi)] if hi - lo <= 4 * len(offsets) + 1000 else [(o, o + 1) for o in sorted(wanted)]
            for start, end in spans:
                for m in self.job.broker.read(t, q, start, end):
                    if m.offset in wanted:
                        out[(t, q, m.offset)] = decode_message(role, m.key, m.body, m.headers).value
        return out

    # -- the operator's input ------------------------------------------------------------------------
    def candidates(self, topic: str, queue: int, end: int | None, key: Any,
                   times: tuple[int, int] | None = None, start: int = 0) -> list[_Candidate]:
        """The records of ``key`` in ``topic``/``queue`` from ``start`` below ``end`` (None: the
        queue's end; a window's: with a data time in ``times``, or a partial holding one), each in the
        committed range that read it."""
        kb = encode(key)
        framed = topic in self.topology.framed_topics
        found = []
        if end is None:
            end = self.job.broker.end_offsets(topic)[queue]
        for block in read_blocks(self.job.broker, topic, queue, start, end):
            for offset, k, body, born, _store, headers in block.rows():
                if k != kb:
                    continue
                if times is not None and not headers and not times[0] <= born < times[1]:
                    continue
                record = wire.decode(k, body, headers, framed)
                if times is not None and headers:
                    held = getattr(record, "times", None) or []
                    if not any(times[0] <= t < times[1] for t in held):
                        continue
                found.append(_Candidate(offset, k, body, born, headers, record))
        by_tag: dict[int, list[_Candidate]] = {}
        tags = self.job.queue_tags(topic, queue)
        starts = [t.start_offset for t in tags]
        for c in found:
            i = bisect.bisect_right(starts, c.offset) - 1
            if i >= 0 and c.offset < tags[i].end_offset:
                c.tag = tags[i]
                by_tag.setdefault(i, []).append(c)
        for i, group in by_tag.items():
            replay = self.replay(tags[i], [c.offset for c in group])
            for c in group:
                c.replay = replay
        return [c for c in found if c.replay is not None]

    def taking(self, tag: CommitTag, offsets: Iterable[int]) -> Replay:
        """``tag``'s range re-executed, tracing what it did when it took the records at ``offsets``
        that an earlier range held (``rstream.processors.ordered``)."""
        held = frozenset(offsets)
        key = (tag.topic, tag.queue, tag.start_offset, frozenset(-1 - o for o in held))  # (apart from targets)
        found = self.replays.get(key)
        if found is None:
            found = self.replays[key] = Replay(self.job, self.cfg, tag, [], self.work, held=held)
            self.all_exact = self.all_exact and found.exact
        return found

    def state_of(self, c: _Candidate, operator: str, match: Any) -> tuple[bool, Any, Any]:
        """Whether ``c`` changed ``operator``'s state of a key ``match`` accepts, and the first such
        change's value before and the last's after."""
        effect = c.effect
        changes = [(old, new) for kb, old, new in (effect.state if effect is not None else [])
                   if (lambda op_key: op_key[0] == operator and match(op_key[1]))(split_state_key(kb))]
        if not changes:
            return False, None, None
        old, new = changes[0][0], changes[-1][1]
        return True, None if old is None else decode(old), None if new is None else decode(new)


def _producer_queue(producer: str) -> tuple[str, int]:
    rest = producer.rpartition("/")[0]
    topic, _, queue = rest.rpartition("/")
    return topic, int(queue)


def explain(job: Tracer, topic: str, queue: int, offset: int) -> Explanation:
    """Explain the record at ``topic``/``queue``/``offset`` of a sink topic of ``job`` (see the module)."""
    if job.guarantee is Guarantee.AT_LEAST_ONCE:
        raise ExplainError(f"job {job.job_id!r} runs at least once: its sink records are written apart from their "
                           "commit tag, which is where an explanation finds the range that wrote them; explain a "
                           "job run with processing_guarantee='exactly_once' (the default)")
    topology = job.topology
    if topic not in topology.sink_topics:
        raise ExplainError(f"{topic!r} is no sink topic of job {job.job_id!r}; it writes {topology.sink_topics} "
                           "(to follow an input record forward, use job.trace)")
    check_place(job.broker, topic, queue, offset, ExplainError)
    job.job_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="explain-", dir=job.job_dir))
    try:
        ex = _Explainer(job, work)
        return _through_stages(ex, _explain(ex, topic, queue, offset))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _through_stages(ex: _Explainer, explained: Explanation) -> Explanation:
    """``explained`` with each input that is a record of a shuffle topic (a stage after another stage)
    followed back: the record the stage before wrote is explained in turn, down to the sources."""
    upstream: dict[str, Explanation] = {}
    combined: list[str] = []
    for c in explained.inputs:
        if c.kind == "input" and c.topic in ex.topology.shuffle_topics and c.via and c.via not in upstream:
            topic, queue, offset = c.via.rsplit("/", 2)
            written = ex.job.broker.read(topic, int(queue), int(offset), int(offset) + 1)[0]
            if wire.partial_kind(written.headers) is not None:  # the stage before's COMBINE made it
                combined.append(c.via)
                continue
            upstream[c.via] = _through_stages(ex, _explain(ex, topic, int(queue), int(offset)))
    notes = [*explained.notes] + ([
        f"not followed into the stage before: {', '.join(combined)} (a COMBINE node's partial of that stage's "
        "results; build the job without the \"combine\" rewrite to follow it, build(optimize=...))"]
        if combined else [])
    if not upstream and not combined:
        return explained
    return dataclasses.replace(explained, upstream=upstream, notes=notes, exact=explained.exact and ex.all_exact,
                               replayed=len(ex.replays))


def _explain(ex: _Explainer, topic: str, queue: int, offset: int) -> Explanation:
    job = ex.job
    tag = ex.writer(topic, queue, offset)
    if tag is None or tag.topic not in ex.topology.input_topics:
        raise ExplainError(f"{topic}/{queue} offset {offset} is no sink record of job {job.job_id!r}: no committed "
                           "range of the job wrote it (another job or a producer did)")
    rng = tag.output_range(topic, queue)
    assert rng is not None
    out = (topic, queue, offset - rng[0])
    message = job.broker.read(topic, queue, offset, offset + 1)[0]
    shown = decode_message(topic_role(topic, ex.topology), message.key, message.body, message.headers)
    result = ex.replay(tag)
    at = next((i for i, e in enumerate(result.emits) if out in e.outputs), None)
    parts = _Parts(ex, tag, shown.key, shown.value)
    if at is None:
        parts.stateless(result, out)
    else:
        emit = result.emits[at]
        moment = result.at_emit.get(at, {}) if isinstance(result, _Watched) else {}
        proc = result.kinds[emit.operator]
        parts.operator = emit.operator
        if isinstance(proc, WindowAggregateProcessor):
            parts.window(result, emit, moment, proc)
        elif isinstance(proc, IntervalJoinProcessor):
            parts.interval_join(result, emit, at, moment, proc)
        elif isinstance(proc, TableJoinProcessor):
            parts.table_join(result, emit, moment)
        elif isinstance(proc, JoinProcessor):
            parts.join(result, emit, at, moment, proc)
        elif isinstance(proc, ProcessProcessor):
            parts.process(result, emit, moment)
        elif isinstance(proc, AggregateProcessor):
            if proc.ordered:
                parts.taken_in_order(result, emit, moment)
            else:
                parts.aggregation(result, emit, at)
        else:
            parts.kind = type(proc).__name__
            parts.notes.append(f"{emit.operator} is an operator an explanation does not know: shown is the record "
                               "it was processing when it forwarded the result")
            parts.stateless(ex.replay(tag, _data_offsets(result)), out)
    return Explanation(job.job_id, ex.topology, (topic, queue, offset), shown.key, shown.value, parts.operator,
                       parts.kind, tag.batch_id, parts.contributions(), parts.late, parts.decision, ex.all_exact,
                       len(ex.replays), parts.notes)


def _data_offsets(replay: Replay) -> list[int]:
    end = min(replay.tag.end_offset, replay.broker.end_offsets(replay.tag.topic)[replay.tag.queue])
    return [o for o in range(replay.tag.start_offset, end) if o not in replay.control]


@dataclass
class _Input:
    """A contribution before its source value is read."""

    kind: str
    where: tuple[str, int, int]
    data_time: Any
    via: str
    side: str = ""
    batch_id: int | None = None
    before: Any = None
    after: Any = None
    note: str = ""


class _Parts:
    """What one explanation gathers, by operator kind."""

    def __init__(self, ex: _Explainer, tag: CommitTag, key: Any, value: Any) -> None:
        self.ex, self.tag = ex, tag
        self.topic, self.queue = tag.topic, tag.queue
        self.key, self.value = key, value
        self.operator: str | None = None
        self.kind = "stateless"
        self.inputs: list[_Input] = []
        self.late: list[Contribution] = []
        self.decision: WatermarkDecision | None = None
        self.notes: list[str] = []

    def contributions(self) -> list[Contribution]:
        values = self.ex.source_values(i.where for i in self.inputs if i.kind == "input")
        shuffles = self.ex.topology.shuffle_topics
        seen: set[Any] = set()
        out = []
        for i in self.inputs:
            if i.kind == "input":
                # a source record once; a record of the stage before once per result of that stage it
                # stands for (a combined partial of that stage's input stands for several, each followed)
                seen_as = (i.where, i.via) if i.where[0] in shuffles else i.where
                if seen_as in seen:
                    continue
                seen.add(seen_as)
            out.append(Contribution(i.kind, *i.where, i.data_time, values.get(i.where), i.via, i.side, i.batch_id,
                                    i.before, i.after, i.note))
        return out

    def _via(self, c: _Candidate) -> str:
        return f"{self.topic}/{self.queue}/{c.offset}"

    def _add(self, c: _Candidate, before: Any = None, after: Any = None, places: int | None = None,
             window: tuple[int, int] | None = None, key: Any = None, side: str = "") -> None:
        origins = self.ex.origins(self.topic, self.queue, c, places, window, key)
        if not origins:
            self.notes.append(f"the shuffle record at {self._via(c)} could not be followed back to its source records")
        note = f"one of {len(origins)} records in one shuffle record (a combine node's partial)" if len(origins) > 1 else ""
        for t, q, o, ts, _value in origins:  # (a partial's records changed the state together)
            self.inputs.append(_Input("input", (t, q, o), ts, self._via(c), side, c.tag.batch_id if c.tag else None,
                                      before, after, note))

    def _late_and_dead(self, candidates: list[_Candidate], window: tuple[int, int] | None = None) -> None:
        """The late records and dead letters among ``candidates`` (those of ``window``, if given)."""
        ex = self.ex
        late_topic, dlq = ex.cfg.late_topic, ex.cfg.dlq_topic
        for c in candidates:
            effect = c.effect
            if effect is None or c.replay is None:
                continue
            for t, q, i in effect.outputs:
                if t == late_topic:
                    row = json.loads(c.replay.record(t, q, i)[1])
                    if window is not None and not window[0] <= row["data_time"] < window[1]:
                        continue
                    self.late.append(Contribution(
                        "late", row["topic"], row["queue"], row["offset"], row["data_time"], row["value"],
                        self._via(c), batch_id=c.tag.batch_id if c.tag else None,
                        note=f"{row['cause']}: {row['reason']} (watermark {row['watermark']}, {row['late_ms']} ms late)"))
                elif t == dlq:
                    headers = c.replay.record(t, q, i)[3] or {}
                    self.late.append(Contribution(
                        "dead letter", headers.get(DLQ_TOPIC, self.topic), int(headers.get(DLQ_QUEUE, self.queue)),
                        int(headers.get(DLQ_OFFSET, c.offset)), c.born, getattr(c.record, "value", None),
                        self._via(c), batch_id=c.tag.batch_id if c.tag else None, note=headers.get(DLQ_ERROR, "")))

    # -- by operator kind -----------------------------------------------------------------------------
    def stateless(self, result: Replay, out: tuple[str, int, int]) -> None:
        """No operator result: the sink record came from one record of the range, through stateless
        operators (a late side output's records too)."""
        replay = self.ex.replay(self.tag, _data_offsets(result))
        for o, effect in replay.effects.items():
            if out in effect.outputs:
                rec = next(iter(replay.broker.read_records(self.topic, self.queue, o, o + 1)))
                c = _Candidate(o, rec[1], rec[2], rec[3], rec[5],  # type: ignore[arg-type]
                               wire.decode(rec[1] if isinstance(rec[1], bytes) else None, rec[2], rec[5],
                                           self.topic in self.ex.topology.framed_topics)
                               if self.topic not in self.ex.topology.source_topics else wire.source_record(),
                               self.tag, replay)
                self._add(c)
                return

    def aggregation(self, result: Replay, emit: Emit, at: int) -> None:
        """A keyed aggregation: every record of the key up to the one it was processing (per batch:
        every record of the key up to the end of the batch)."""
        self.kind = "aggregation"
        key = emit.key
        end = self.tag.end_offset if emit.during is None else emit.during + 1
        candidates = self.ex.candidates(self.topic, self.queue, end, key)
        # the emitted result is the n-th update made while reading its record (a partial of records
        # gets one update per record it holds)
        place = sum(1 for e in result.emits[:at] if e.during == emit.during and e.operator == emit.operator
                    and e.key == key) if emit.during is not None else None
        for c in candidates:
            changed, before, after = self.ex.state_of(c, emit.operator, lambda k: k == key)
            if not changed:
                continue
            last = emit.during is not None and c.offset == emit.during
            self._add(c, before, after if not last or c.record.folded else emit.value,
                      places=place if last else None)
        self._late_and_dead(candidates)

    def taken_in_order(self, result: Replay, emit: Emit, moment: dict[str, Any]) -> None:
        """A keyed aggregation that takes its records in data-time order (``rstream.processors.ordered``):
        every record of the key it had taken by then: in an earlier range, or in this one before the
        result, whichever range read it. A record still held is not in it, whenever it was read."""
        self.kind = "aggregation"
        key = emit.key
        candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key)
        taken_here = set(cast(_Watched, result).takes[: moment.get("takes", 0)])
        taken: list[_Candidate] = []
        later: dict[int, tuple[CommitTag, list[_Candidate]]] = {}
        for c in candidates:
            assert c.replay is not None and c.tag is not None
            tag = c.tag if c.offset not in c.replay.held else taken_in(self.ex.job, c.replay, c.replay.held[c.offset])
            if tag is None or tag.start_offset > self.tag.start_offset:
                continue  # not taken yet when the result was made
            if tag.start_offset == self.tag.start_offset and c.offset not in taken_here:
                continue
            taken.append(c)
            if tag is not c.tag:
                later.setdefault(tag.start_offset, (tag, []))[1].append(c)
        for tag, group in later.values():  # what each did when it was taken, in the range that took it
            replay = self.ex.taking(tag, [c.offset for c in group])
            for c in group:
                c.replay = replay
        for c in taken:
            _changed, before, after = self.ex.state_of(c, emit.operator, lambda k: k == key)
            self._add(c, before, emit.value if c.offset == emit.during else after)
        self._late_and_dead(candidates)

    def window(self, result: Replay, emit: Emit, moment: dict[str, Any], proc: WindowAggregateProcessor) -> None:
        """A window's result: the records of its key and window, and the watermark that fired it."""
        self.kind = "window"
        wk = emit.key
        assert isinstance(wk, WindowKey)
        key, start, end = wk.key, wk.start, wk.end
        if isinstance(emit.value, WindowResult) and not emit.value.final:
            self.kind = "window (early result)"
        candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key, (start, end))
        session = isinstance(proc.window, SessionWindow)

        def mine(k: Any) -> bool:
            return (isinstance(k, tuple) and len(k) == 3 and k[0] == key
                    and (k[1] == start and k[2] == end if not session else start <= k[1] and k[2] <= end))

        for c in candidates:
            changed, before, after = self.ex.state_of(c, emit.operator, mine)
            if changed:
                self._add(c, before, after, window=(start, end), key=key)
        if self.kind == "window":  # a final result: records of its window that came after it were late too
            candidates += self.ex.candidates(self.topic, self.queue, None, key, (start, end), self.tag.end_offset)
        self._late_and_dead(candidates, (start, end))
        if "producers" in moment or emit.during is None or emit.during in result.control:
            self.decision = _decision(result, emit, moment, end)

    def join(self, result: Replay, emit: Emit, at: int, moment: dict[str, Any], proc: JoinProcessor) -> None:
        """A join's result: the record it was processing and the record of the other side it met (a
        left join's unmatched left record alone)."""
        self.kind = "join" if proc.window is None else "window join"
        key = emit.key
        window = proc.window
        during = emit.during if emit.during is not None and emit.during not in result.control else None
        if during is None:  # a left join's unmatched left record, emitted when its window closed
            assert window is not None
            w_end = moment.get("ts", END_OF_BATCH) + 1  # (a left join's unmatched record: at its window's end - 1)
            nth = sum(1 for e in result.emits[:at] if e.operator == emit.operator and e.during == emit.during
                      and e.key == key)
            candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key)
            lefts = [c for c in candidates if _side(c) == LEFT and self.ex.state_of(
                c, emit.operator, lambda k: isinstance(k, tuple) and len(k) == 4 and k[:2] == (LEFT, key)
                and k[3] == w_end)[0]]
            if nth < len(lefts):
                self._add(lefts[nth], side="left")
            self.notes.append("a left join's left record that met no right record in its window")
            self._late_and_dead(candidates)
            return
        candidates = self.ex.candidates(self.topic, self.queue, during + 1, key)
        arriving = next(c for c in candidates if c.offset == during)
        side = _side(arriving)
        nth = sum(1 for e in result.emits[:at] if e.operator == emit.operator and e.during == during and e.key == key)
        others: list[_Candidate] = []
        if window is None:  # the other side's latest value of the key
            latest = [c for c in candidates if c.offset < during and _side(c) == 1 - side]
            others = latest[-1:]
        else:
            for start, end in window.assign(arriving.born):
                others += [c for c in candidates if c.offset < during and _side(c) == 1 - side and self.ex.state_of(
                    c, emit.operator, lambda k, s=start, e=end: k == (1 - side, key, s, e))[0]]
        self._add(arriving, side=SIDE_NAMES[side])
        if nth < len(others):
            self._add(others[nth], side=SIDE_NAMES[1 - side])
        elif others or side == LEFT:
            self.notes.append("a left join's left record that found no right record")
        self._late_and_dead(candidates)

    def interval_join(self, result: Replay, emit: Emit, at: int, moment: dict[str, Any],
                      proc: IntervalJoinProcessor) -> None:
        """An interval join's pair: the record it was processing and the one of the other side it met
        (its waiting records of the key in ``[lower, upper]``, by data time then arrival, one pair
        each); a left join's unmatched left record, emitted once the watermark passed its interval."""
        self.kind = "interval join"
        key, name = emit.key, emit.operator

        def waited(c: _Candidate) -> bool:  # taken into the waiting records: neither late nor a dead letter
            return self.ex.state_of(c, name, lambda k: k == (_side(c), key))[0]

        def nth_like(same: Any) -> int:
            return sum(1 for i, e in enumerate(result.emits[:at]) if e.operator == name and e.during == emit.during
                       and e.key == key and same(i))

        during = emit.during if emit.during is not None and emit.during not in result.control else None
        if during is None:  # a left join's left record that met nobody, once the watermark passed it
            ts = moment.get("ts", 0)
            left_ts = ts - max(0, proc.upper)
            candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key)
            rights = [c for c in candidates if _side(c) != LEFT and waited(c)]
            lefts = [c for c in candidates if _side(c) == LEFT and c.born == left_ts and waited(c)
                     and not any(proc.lower <= r.born - c.born <= proc.upper for r in rights)]
            nth = nth_like(lambda i: cast(_Watched, result).at_emit.get(i, {}).get("ts") == ts)
            if nth < len(lefts):
                self._add(lefts[nth], side="left")
            self.notes.append(f"a left join's left record that met no right record {describe_interval(proc.lower, proc.upper)}, emitted once "
                              f"the watermark passed its data time + {proc.upper} ms")
            self._late_and_dead(candidates)
            if "producers" in moment:
                self.decision = _decision(result, emit, moment, left_ts + proc.upper + 1)
            return
        candidates = self.ex.candidates(self.topic, self.queue, during + 1, key)
        arriving = next(c for c in candidates if c.offset == during)
        side = _side(arriving)
        t = arriving.born
        lo, hi = (t + proc.lower, t + proc.upper) if side == LEFT else (t - proc.upper, t - proc.lower)
        others = sorted((c for c in candidates if c.offset < during and _side(c) == 1 - side and lo <= c.born <= hi
                         and waited(c)), key=lambda c: (c.born, c.offset))
        nth = nth_like(lambda _i: True)
        self._add(arriving, side=SIDE_NAMES[side])
        if nth < len(others):
            self._add(others[nth], side=SIDE_NAMES[1 - side])
        self._late_and_dead(candidates)

    def table_join(self, result: Replay, emit: Emit, moment: dict[str, Any]) -> None:
        """A stream–table join's result: the stream record, and the table update whose value it met:
        of the key's updates, the last one the join took before it (``rstream.processors.ordered``: in
        data-time order, whatever batch brought them), found in the order the re-executed ranges took
        their records, from the result's range back."""
        self.kind = "stream-table join"
        key = emit.key
        assert emit.during is not None  # (a held record taken: its own offset)
        candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key)
        stream = next(c for c in candidates if c.offset == emit.during)
        self._add(stream, side="stream")
        updates = {c.offset: c for c in candidates if _side(c) == TABLE_SIDE}
        update = self._last_taken(updates, cast(_Watched, result).takes[: moment.get("takes", 1) - 1])
        if update is None:
            self.notes.append(f"the table had no value for {key!r} when the join took the stream record")
        else:
            self._add(update, side="table")
            deleted = getattr(update.record, "value", None) is None
            self.inputs[-1].note = ("the update that deleted the key: the table had no value then" if deleted else
                                    "the table's value of the key then: its last update the join took before")
        self._late_and_dead(candidates)

    def _last_taken(self, updates: dict[int, _Candidate], taken_before: list[int]) -> _Candidate | None:
        """Of ``updates`` (by offset), the last one taken: in ``taken_before`` (what the result's range
        took before it), else in the ranges before, each re-executed, latest first."""
        for offset in reversed(taken_before):
            if offset in updates:
                return updates[offset]
        if not updates:
            return None
        first = min(updates)
        for tag in reversed([t for t in self.ex.job.queue_tags(self.topic, self.queue)
                             if t.start_offset < self.tag.start_offset]):
            if tag.end_offset <= first:  # no update was read yet, so none was taken
                return None
            replay = self.ex.replay(tag)
            for offset in reversed(cast(_Watched, replay).takes):
                if offset in updates:
                    return updates[offset]
        return None

    def process(self, result: Replay, emit: Emit, moment: dict[str, Any]) -> None:
        """A keyed process function's forward: the records of its key it had taken by then (in data-time
        order) and, when it forwarded from ``on_timer``, the timer."""
        self.kind = "process"
        key = moment.get("key", emit.key)
        time_of = moment.get("timestamp")
        domain = moment.get("domain")
        candidates = self.ex.candidates(self.topic, self.queue, self.tag.end_offset, key)
        taken = emit.during if domain is None else None
        for c in candidates:
            if time_of is None or c.born < time_of or (c.born == time_of and domain is None
                                                        and taken is not None and c.offset <= taken):
                self._add(c)
        if domain is not None:
            self.inputs.append(_Input("timer", (self.topic, self.queue, -1), time_of, "", batch_id=self.tag.batch_id,
                                      note=f"{domain} timer of key {key!r} at {time_of} fired in batch "
                                           f"{self.tag.batch_id}"))
        self._late_and_dead(candidates)


def _side(c: _Candidate) -> int:
    return int(getattr(c.record, "side", 0) or 0)


def _decision(result: Replay, emit: Emit, moment: dict[str, Any], window_end: int) -> WatermarkDecision:
    """What made a window fire, from the moment it was forwarded in the re-executed range."""
    offset = moment.get("offset", END_OF_BATCH)
    tag = result.tag
    if offset == END_OF_BATCH or offset is None:
        at = f"the end of the batch ({tag.topic}/{tag.queue} offsets {tag.start_offset}..{tag.end_offset})"
    else:
        rec = next(iter(result.broker.read_records(tag.topic, tag.queue, offset, offset + 1)))
        record = wire.decode(rec[1] if isinstance(rec[1], bytes) and rec[1] else None, rec[2], rec[5], True)
        at = f"{tag.topic}/{tag.queue} offset {offset}: {record.describe()}"
    return WatermarkDecision(window_end, moment.get("watermark"), moment.get("held_by"), moment.get("producers", {}),
                             at, tag.batch_id)
