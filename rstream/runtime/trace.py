"""``job.trace(topic, queue, offset)``: where one input record went through the real topology.

Nothing on the hot path records where records came from. A trace re-executes, queue by queue, the
committed range that held the record, exactly as its task ran it: the same processor chain (the
third build), the state as the previous batch left it (replayed from the state topic into a
scratch store), the same source watermarks, the batch's own processing time, and no writes. It
then compares every re-executed output with what the broker holds for that range: when they are
equal (``RecordTrace.exact``) every offset in the trace is the committed one. Records a shuffle
sink wrote are traced on in their shuffle topic's pipeline the same way; a window the record
entered is followed to the batch where it fired.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rstream.broker.base import CommitTag
from rstream.errors import RStreamError
from rstream.graph.topology import short_topic_name
from rstream.processors.base import Forward, Processor
from rstream.runtime.config import TaskConfig
from rstream.runtime.queue_run import QueueRun
from rstream.runtime.topic_decoder import DLQ, LATE, SHUFFLE, SINK, SOURCE, decode_message, topic_role
from rstream.serde.codec import decode, encode
from rstream.settings import Guarantee
from rstream.shuffle import wire
from rstream.state.store import (
    StateError,
    StateStore,
    is_bookkeeping,
    is_timer,
    split_state_key,
    state_key,
    timer_key,
)
from rstream.time.windows import WindowResult

if TYPE_CHECKING:
    from rstream.graph.topology import Topology
    from rstream.runtime.job_core import JobCore
    from rstream.runtime.job_progress import ProgressLog


class TraceError(RStreamError, LookupError):
    """A record cannot be traced: there is no such record, or the job is not a reader of its topic."""


#: Row colours of the hop table, by kind of hop.
HOP_COLOURS = {"source": "#e7f5ff", "shuffle": "#fff4e6", "state": "#ebfbee", "sink": "#f3f0ff", "fired": "#d3f9d8",
               "emitted": "#d3f9d8", "late": "#ffe3e3", "dead letter": "#ffe3e3"}


def _text(value: Any, limit: int | None = 60) -> str:
    """A hop's value as table text: nothing for None, long values cut (the whole in the title)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else repr(value)
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


HOP_COLUMNS = ["step", "kind", "topic", "queue", "offset", "operator", "key", "value", "before", "after",
               "batch_id", "note"]


@dataclass(frozen=True)
class Hop:
    """One place the record (or what it became) reached: a message in a topic (the input record,
    a shuffle record, a sink message, a late record, a dead letter) or a state change."""

    kind: str
    topic: str
    queue: int
    offset: int | None
    operator: str | None
    key: Any
    value: Any
    before: Any = None
    after: Any = None
    batch_id: int | None = None
    note: str = ""


#: ``_Effect.received`` of a record whose hop shows it as read (a partial of records forwards no value).
_AS_READ = (None, None)


@dataclass
class _Effect:
    """What one input record did in a re-executed range."""

    received: tuple[Any, Any] | None = None
    operators: list[str] = field(default_factory=list)
    outputs: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, queue, index in the range's output)
    state: list[tuple[bytes, bytes | None, bytes | None]] = field(default_factory=list)  # (key, before, after)
    #: Per output that is a window count's partial it went into: its data times (its windows there).
    times: dict[tuple[str, int, int], list[Any]] = field(default_factory=dict)
    #: Per output that is a partial of records it went into (a count of every update): its places there.
    places: dict[tuple[str, int, int], list[int]] = field(default_factory=dict)


@dataclass
class Emit:
    """A stateful operator forwarded a result: while processing ``during`` (an input offset; None at
    the end of the batch), producing ``outputs``."""

    operator: str
    key: Any
    value: Any
    during: int | None
    outputs: list[tuple[str, int, int]]


class Replay:
    """One committed range of one input queue, re-executed with a scratch state store."""

    def __init__(self, job: Tracer, cfg: TaskConfig, tag: CommitTag, targets: Iterable[int],
                 work: Path, held: Iterable[int] = ()) -> None:
        """Re-execute ``tag``'s range; ``targets``: the offsets of its records to trace; ``held``: the
        offsets of records an earlier range of the queue held that this one takes (``resumed``)."""
        self.tag = tag
        self.broker = broker = job.broker
        topology = cfg.topology
        self.on_commit = set(topology.on_commit_topics)
        topic, queue = tag.topic, tag.queue
        earlier = [t for t in job.queue_tags(topic, queue) if t.start_offset < tag.start_offset]
        previous = next((t for t in reversed(earlier) if t.end_offset == tag.start_offset), None)
        self.store: StateStore | None = None
        self.state_topic = topology.state_topics.get(topic)
        if self.state_topic is not None:
            end = max((r[1] for t in earlier if (r := t.output_range(self.state_topic, queue))), default=0)
            compacted = broker.compacted_below(self.state_topic, queue)
            if 0 < end < compacted:
                raise StateError(
                    f"cannot re-execute {topic}/{queue} offsets {tag.start_offset}..{tag.end_offset}: "
                    f"{self.state_topic} queue {queue} was compacted past the state that batch started from")
            self.store = StateStore(work / f"{topic}-{queue}-{tag.start_offset}", self.state_topic, queue).open()
            self.store.replay(broker, None, state_end=end)
            if 0 < end < broker.compacted_below(self.state_topic, queue):  # compacted while it replayed
                self.store.close()
                raise StateError(
                    f"cannot re-execute {topic}/{queue} offsets {tag.start_offset}..{tag.end_offset}: "
                    f"{self.state_topic} queue {queue} was compacted past the state that batch started from")
        info = json.loads(tag.info) if tag.info else {}
        batch = -1 if tag.batch_id is None else tag.batch_id
        self.log: list[tuple[str, int, int]] = []  # every output record, in the order it was made
        self.current: int | None = None
        self.control: set[int] = set()
        self.emits: list[Emit] = []
        self.effects: dict[int, _Effect] = {offset: _Effect() for offset in held}
        self._receiving: _Effect | None = None
        # offset -> (topic, key, data time or None, place or None) of each partial it went into (the time:
        # before a window count; the place: before a count of every update, how many of the key's records
        # the partial held before it)
        self.partials_of: dict[int, list[tuple[str, bytes, Any, int | None]]] = {}
        self._roots = {node.name for node in topology.pipelines.get(topic, [])}
        # the processors report what they forward and combine to this replay (``watch``, ``combined``)
        self.run = run = QueueRun(cfg, topic, queue, tag.start_offset, tag.end_offset, batch, self.store,
                                  previous, now_ms=info.get("now_ms"), make_output=self._logged,
                                  caught_up=bool(info.get("caught_up", True)), chunked=False, observer=self)
        self.kinds = {p.name: p for p in run.procs}
        targets = set(targets)
        for rec in broker.read_records(topic, queue, tag.start_offset, tag.end_offset):
            offset = self.current = rec[0]
            if rec[5] and topic in topology.framed_topics:
                self.control.add(offset)
            if offset not in targets:
                run.feed([rec])
                continue
            effect = self.effects[offset] = _Effect()
            if wire.partial_kind(rec[5]) == wire.RECORDS:  # its records have no value: the
                effect.received = _AS_READ  # hop shows the partial as read, not what it forwards
            with self._noting(effect):
                run.feed([rec])
        self.current = None
        made = len(self.log)
        records, _info = run.finish()
        self._combined_outputs(self.log[made:])
        self.changelog = [r[0] for r in records.get((self.state_topic, queue), [])] if self.state_topic else []
        #: Per traced offset, the state key under which an operator still held it when the range ended
        #: (it is taken in a later range: ``held_until``).
        self.held = self._still_held(targets) if self.store is not None else {}
        self.exact = self._matches(records)
        if self.store is not None:
            self.store.close()

    def _still_held(self, targets: set[int]) -> dict[int, bytes]:
        """The traced records an operator holds at the end of the range (``rstream.processors.ordered``):
        the state key of each, by its offset."""
        assert self.store is not None
        out = {}
        for proc in self.run.procs:
            order = getattr(proc, "order", None)
            if order is None:
                continue
            for held in order.heap:
                if held.offset in targets:
                    out[held.offset] = timer_key(order.where, held.at, tuple(held[1:4]))
        return out

    # -- what the processors report (``rstream.processors.base.Observer``) -------------------------
    def watch(self, proc: Processor, forward: Forward) -> Forward:
        """A root's first forward of the traced record is what it received; what an aggregation, a
        window or a join forwards is a result, followed to what it caused."""
        if proc.name in self._roots:
            return self._receive(forward)
        if proc.emits_results:
            return self._emitting(proc.name, forward)
        return forward

    def combined(self, topic: str, kind: str, key: Any, ts: Any, place: int) -> None:
        """A combine node put the traced record into its key's partial (sent at the end of the range)."""
        if self._receiving is None or self.current is None:
            return
        self.partials_of.setdefault(self.current, []).append(
            (topic, encode(key), ts if kind == wire.WINDOWS else None, place if kind == wire.RECORDS else None))

    @contextmanager
    def resumed(self, offset: int) -> Iterator[None]:
        """A processor takes the record at ``offset`` that it held (a stream–table join, at the end of
        the batch): what happens meanwhile is added to that record's effect, if it is traced."""
        before = self.current
        self.current = offset  # not traced or traced, what it emits is its own (no result of the batch's end)
        effect = self.effects.get(offset)
        try:
            if effect is None:
                yield
            else:
                with self._noting(effect):
                    yield
        finally:
            self.current = before

    @contextmanager
    def _noting(self, effect: _Effect) -> Iterator[None]:
        """Add to ``effect`` what happens while it is open: the processors a record went through, the
        outputs made and the state changed."""
        procs = self.run.procs
        staged, made, seen = self._staged(), len(self.log), {p.name: p.records_in for p in procs}
        before, self._receiving = self._receiving, effect
        try:
            yield
        finally:
            self._receiving = before
            on_path = set(effect.operators) | {p.name for p in procs if p.records_in > seen[p.name]}
            effect.operators = [p.name for p in procs if p.name in on_path]
            effect.outputs.extend(self.log[made:])
            effect.state.extend(self._changed(staged, self._staged()))

    def _combined_outputs(self, made_at_end: list[tuple[str, int, int]]) -> None:
        """A combining shuffle sink writes one partial per key at the end of the batch (before a
        window count: per key and range, counted per window): it belongs to every record whose key
        went into it."""
        for offset, entries in self.partials_of.items():
            effect = self.effects[offset]
            times: dict[tuple[str, bytes], list[Any]] = {}
            places: dict[tuple[str, bytes], list[int]] = {}
            for topic, kb, ts, place in entries:
                times.setdefault((topic, kb), []).append(ts)
                if place is not None:
                    places.setdefault((topic, kb), []).append(place)
            for t, q, i in made_at_end:
                into = (t, self.record(t, q, i)[0])  # the partial's topic and key
                at = times.get(into)
                if at is not None:
                    effect.outputs.append((t, q, i))
                    # the shuffle sink that wrote the partial is on the record's path (it ran at the end)
                    on_path = set(effect.operators) | {p.name for p in self.run.procs if t in p.written()}
                    effect.operators = [p.name for p in self.run.procs if p.name in on_path]
                    if at[0] is not None:
                        effect.times[(t, q, i)] = at
                    if into in places:
                        effect.places[(t, q, i)] = places[into]

    def _receive(self, forward: Any) -> Any:
        def receive(key: Any, value: Any, ts: int) -> None:
            if self._receiving is not None and self._receiving.received is None:
                self._receiving.received = (key, value)
            forward(key, value, ts)
        return receive

    def _emitting(self, name: str, forward: Any) -> Any:
        def emit(key: Any, value: Any, ts: int) -> None:
            made = len(self.log)
            forward(key, value, ts)
            self.emits.append(Emit(name, key, value, self.current, self.log[made:]))
        return emit

    def _logged(self, topic: str, queue: int) -> list[Any]:
        return _LoggedList(self.log, topic, queue)

    def _staged(self) -> dict[bytes, bytes | None]:
        if self.store is None:
            return {}
        out = self.store.staged_changes()
        for proc in self.run.procs:
            staged = getattr(proc, "staged", None)
            if staged is not None:
                for key, value in staged():
                    out[state_key(proc.name, key)] = encode(value)
        return out

    def _changed(self, before: dict[bytes, bytes | None], after: dict[bytes, bytes | None]) -> list[tuple[bytes, bytes | None, bytes | None]]:
        if not after:
            return []
        store = self.store
        assert store is not None  # (only a stateful range stages changes)
        out = []
        for kb in after:
            old = before[kb] if kb in before else store.committed_raw(kb)
            new = after[kb]
            if old == new or is_timer(kb):
                continue
            operator, key = split_state_key(kb)
            if not is_bookkeeping(operator, key):
                out.append((kb, old, new))
        return out

    def _matches(self, records: dict[tuple[str, int], list[Any]]) -> bool:
        """Whether the re-executed outputs are the committed ones (keys and bodies, in order)."""
        for name, (first, end) in self.tag.outputs.items():
            topic, _, q = name.rpartition("/")
            stored = [(m.key, m.body) for m in self.broker.read(topic, int(q), first, end)]
            # checked after the read: compaction only moves forward, and may run while this reads
            if topic == self.state_topic and self.broker.compacted_below(topic, int(q)) > first:
                continue  # compaction removed superseded changelog records: nothing left to compare
            mine = [(r[0], r[1]) for r in records.get((topic, int(q)), [])]
            if stored != mine:
                return False
        # an on-commit sink's records got their offsets when RocketMQ committed them, after the tag: not in it
        produced = {f"{t}/{q}" for (t, q), recs in records.items()
                    if recs and (t not in self.on_commit or f"{t}/{q}" in self.tag.outputs)}
        return produced <= set(self.tag.outputs)

    # -- answers ------------------------------------------------------------------------------------
    def offset(self, topic: str, queue: int, index: int) -> int | None:
        rng = self.tag.output_range(topic, queue)
        return None if rng is None else rng[0] + index

    def record(self, topic: str, queue: int, index: int) -> Any:
        return self.run.ctx.out.collected[(topic, queue)][index]

    def changelog_offset(self, kb: bytes) -> int | None:
        if self.state_topic is None:
            return None
        try:
            index = self.changelog.index(kb.hex())
        except ValueError:
            return None
        return self.offset(self.state_topic, self.tag.queue, index)

    def own_outputs(self, offset: int, places: list[int]) -> list[tuple[str, int, int]]:
        """What the records at ``places`` of the partial of records at ``offset`` made: the count
        emitted one result per record it holds, in order."""
        emits = [emit for emit in self.emits if emit.during == offset]
        return [out for place in places if place < len(emits) for out in emits[place].outputs]

    def deferred(self, operator: str, state_key_value: Any) -> list[Emit]:
        """Results ``operator`` forwarded outside any data record (a window firing at a watermark, a
        per-batch result) for ``state_key_value``."""
        proc = self.kinds.get(operator)
        if proc is None:
            return []
        return [emit for emit in self.emits
                if emit.operator == operator and (emit.during is None or emit.during in self.control)
                and proc.result_of(emit.key, state_key_value)]


class _LoggedList(list[Any]):
    """An output list that also notes, in one shared log, the order in which records were made."""

    def __init__(self, log: list[tuple[str, int, int]], topic: str, queue: int) -> None:
        super().__init__()
        self._log, self._where = log, (topic, queue)

    def append(self, record: Any) -> None:
        self._log.append((*self._where, len(self)))
        super().append(record)


class RecordTrace:
    """Where one input record went: ``to_pandas()`` has one row per hop (``HOP_COLUMNS``); in a
    notebook it shows as that table beside the real topology with the path highlighted.

    ``exact`` is True when every re-executed range produced exactly the committed outputs, so every
    offset shown is the committed one (a user function that is not deterministic makes it False)."""

    def __init__(self, job_id: str, topology: Topology, origin: tuple[str, int, int], hops: list[Hop],
                 operators: list[str], exact: bool) -> None:
        self.job_id = job_id
        self.topology = topology
        self.origin = origin
        self.hops = hops
        self.operators = operators
        self.exact = exact

    @property
    def topics(self) -> list[str]:
        """Every topic the trace reached, in order."""
        return list(dict.fromkeys(h.topic for h in self.hops))

    def to_pandas(self) -> Any:
        import pandas as pd

        rows = [[i, h.kind, h.topic, h.queue, h.offset, h.operator, h.key, h.value, h.before, h.after, h.batch_id,
                 h.note] for i, h in enumerate(self.hops, start=1)]
        return pd.DataFrame(rows, columns=HOP_COLUMNS, dtype=object)

    def graph(self) -> Any:
        """The real topology with this record's path highlighted (a ``graphviz.Digraph``)."""
        return self.topology.real_graph(highlight=[*self.operators, *self.topics])

    @property
    def summary(self) -> str:
        topic, queue, offset = self.origin
        sinks = [h for h in self.hops if h.kind in ("sink", "fired", "emitted")]
        states = [h for h in self.hops if h.kind == "state"]
        parts = [f"{topic}/{queue} offset {offset}: {len(self.hops)} hops"]
        if states:
            parts.append(f"{len(states)} state change{'s' if len(states) != 1 else ''}")
        parts.append(f"{len(sinks)} sink message{'s' if len(sinks) != 1 else ''}")
        late = sum(1 for h in self.hops if h.kind == "late")
        if late:
            parts.append(f"{late} late")
        dead = sum(1 for h in self.hops if h.kind == "dead letter")
        if dead:
            parts.append(f"{dead} dead letter{'s' if dead != 1 else ''}")
        if not self.exact:
            parts.append("NOT exact: re-executing gave other outputs than the committed ones")
        return ", ".join(parts)

    def _repr_html_(self) -> str:
        from rstream.graph.style import fitted_svg

        svg = fitted_svg(self.graph())
        return (f'<div style="max-width:100%"><div style="font-family:monospace;margin:4px 0;overflow-wrap:anywhere">'
                f"<b>trace</b> {escape(self.summary)}</div>{self.hops_html()}<div>{svg}</div></div>")

    def hops_html(self) -> str:
        """The hops as an HTML table that scrolls sideways when wider than the notebook."""
        cell = "padding:1px 6px;border-bottom:1px solid #e9ecef;white-space:nowrap;text-align:left"
        head = "".join(f'<th style="{cell}">{c}</th>' for c in ("kind", "topic", "queue", "offset", "operator", "key",
                                                                "value (state: before → after)", "batch", "note"))
        rows = []
        for hop in self.hops:
            value = hop.value if hop.kind != "state" else f"{_text(hop.before) or '∅'} → {_text(hop.after) or '∅'}"
            values = [(hop.kind, None), (short_topic_name(hop.topic, self.job_id), hop.topic), (hop.queue, None), (hop.offset, None),
                      (hop.operator, None), (hop.key, None), (value, None), (hop.batch_id, None), (hop.note, None)]
            tds = "".join(f'<td style="{cell}" title="{escape(_text(full if full is not None else v, None))}">'
                          f"{escape(_text(v))}</td>" for v, full in values)
            rows.append(f'<tr style="background:{HOP_COLOURS.get(hop.kind, "white")}">{tds}</tr>')
        return ('<div style="max-width:100%;overflow-x:auto"><table style="border-collapse:collapse;'
                f'font-family:monospace;font-size:12px"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
                "</tbody></table></div>")

    def __repr__(self) -> str:
        return f"RecordTrace({self.summary})"


#: One record to trace: topic, queue, offset, its hop's index, and in a partial its data times or places.
_Level = tuple[str, int, int, int, "list[Any] | None", "list[int] | None"]


class Tracer:
    """What a trace reads of its job (the functions below call it ``job``): the job's parts and
    its commit tags. Keeps nothing between traces."""

    def __init__(self, core: JobCore, progress_log: ProgressLog) -> None:
        self.topology, self.job_id, self.broker, self.job_dir = core.topology, core.job_id, core.broker, core.job_dir
        self.task_config = core.task_config
        self.guarantee = core.properties.processing_guarantee
        self.queue_tags = progress_log.queue_tags

    def trace(self, topic: str, queue: int, offset: int) -> RecordTrace:
        """Trace the record at ``topic``/``queue``/``offset`` (a source or shuffle topic of the job)."""
        if self.guarantee is Guarantee.AT_LEAST_ONCE:
            raise TraceError(f"job {self.job_id!r} runs at least once: its sink records are written apart from "
                             "their commit tag, which is where a trace finds them; trace a job run with "
                             "processing_guarantee='exactly_once' (the default)")
        return trace(self, topic, queue, offset)


def check_place(broker: Any, topic: str, queue: int, offset: int, error: type[Exception]) -> None:
    """Raise ``error`` naming the valid range unless ``topic`` has ``queue`` and it holds ``offset``."""
    info = broker.topic(topic)
    if not 0 <= queue < info.queues:
        raise error(f"topic {topic!r} has queues 0..{info.queues - 1}, not {queue!r}")
    end = broker.end_offsets(topic)[queue]
    if not 0 <= offset < end:
        raise error(f"{topic}/{queue} has offsets 0..{end - 1}, not {offset!r}")


def trace(job: Tracer, topic: str, queue: int, offset: int) -> RecordTrace:
    """Trace the record at ``topic``/``queue``/``offset`` (a source or shuffle topic of ``job``)."""
    topology = job.topology
    if topic not in topology.input_topics:
        raise TraceError(f"job {job.job_id!r} does not read topic {topic!r}; it reads {topology.input_topics}")
    check_place(job.broker, topic, queue, offset, TraceError)
    cfg = job.task_config()
    hops: list[Hop] = []
    operators: list[str] = []
    exact = True
    job.job_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="trace-", dir=job.job_dir))
    try:
        hops.append(_first_hop(job, topic, queue, offset))
        children: dict[int, list[int]] = {}  # hop index -> the hops it led to, in order

        def add(parent: int, hop: Hop) -> int:
            hops.append(hop)
            children.setdefault(parent, []).append(len(hops) - 1)
            return len(hops) - 1

        def effects(replay: Replay, o: int, parent: int, times: list[Any] | None, places: list[int] | None,
                    next_level: list[_Level]) -> None:
            """The hops of what the record at ``o`` did in ``replay``, under hop ``parent``; the shuffle
            records it made, to trace next, onto ``next_level``."""
            effect = replay.effects[o]
            operators.extend(op for op in effect.operators if op not in operators)
            # a window count's partial changed the windows of its key: the record is in those holding its time
            state = effect.state if times is None else [c for c in effect.state if _holds(c[0], times)]
            for kb, old, new in state:  # the state it changed, then what it emitted
                add(parent, _state_hop(replay, kb, old, new))
            # a count emitted one result per record a partial of records holds: the record's own
            for out in effect.outputs if places is None else replay.own_outputs(o, places):
                hop = _output_hop(job, replay, *out)
                index = add(parent, hop)
                if hop.kind == "shuffle" and hop.offset is not None:
                    next_level.append((hop.topic, hop.queue, hop.offset, index, effect.times.get(out),
                                       effect.places.get(out)))
            for kb, _old, new in state:  # results of that state outside the record
                for hop in _followed(job, cfg, replay, kb, new, work, operators):
                    add(parent, hop)
            if o in replay.held:  # held until the watermark passed it: what it did when it was taken
                taken = taken_in(job, replay, replay.held[o])
                if taken is None:
                    hops[parent] = _with_note(hops[parent], "held until the watermark passes its data time")
                    return
                hops[parent] = _with_note(hops[parent], "held until the watermark passed its data time: "
                                                        f"taken in batch {taken.batch_id}")
                effects(Replay(job, cfg, taken, [], work, held=[o]), o, parent, None, None, next_level)

        # what to trace, its hop, and in a partial: the data times of the record in it (a window count's)
        # or its places there (a count's of every update)
        level: list[_Level] = [(topic, queue, offset, 0, None, None)]
        while level:  # one pipeline after the other: a range is re-executed once for all its records
            next_level: list[_Level] = []
            for tag, items in _by_tag(job, level, hops):
                replay = Replay(job, cfg, tag, [item[2] for item in items], work)
                exact = exact and replay.exact
                for _topic, _queue, o, parent, times, places in items:
                    hops[parent] = _processed(hops[parent], replay.effects[o], tag, job)
                    effects(replay, o, parent, times, places, next_level)
            level = next_level
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ordered: list[Hop] = []
    stack = [0]
    while stack:  # depth first: each shuffle record is followed by what it did downstream
        index = stack.pop()
        ordered.append(hops[index])
        stack.extend(reversed(children.get(index, [])))
    return RecordTrace(job.job_id, topology, (topic, queue, offset), ordered, operators, exact)


def _first_hop(job: Tracer, topic: str, queue: int, offset: int) -> Hop:
    message = job.broker.read(topic, queue, offset, offset + 1)[0]
    kind = SOURCE if topic in job.topology.source_topics else SHUFFLE
    decoded = decode_message(topic_role(topic, job.topology), message.key, message.body, message.headers)
    return Hop(kind, topic, queue, offset, None, decoded.key, decoded.value)


def _holds(kb: bytes, times: list[Any]) -> bool:
    """Whether state key ``kb`` is a window ``(key, start, end)`` holding one of ``times``."""
    window = split_state_key(kb)[1]
    return type(window) is tuple and len(window) == 3 and any(window[1] <= t < window[2] for t in times)


def _by_tag(job: Tracer, level: list[_Level], hops: list[Hop]) -> list[tuple[CommitTag, list[_Level]]]:
    groups: dict[tuple[str, int, int], tuple[CommitTag, list[_Level]]] = {}
    for item in level:
        t, q, o, hop_index = item[:4]
        tag = job.broker.commit_covering(job.job_id, t, q, o)
        if tag is None:
            hops[hop_index] = _with_note(hops[hop_index], "not processed yet: the job has not read this offset")
            continue
        groups.setdefault((t, q, tag.start_offset), (tag, []))[1].append(item)
    return list(groups.values())


def _with_note(hop: Hop, note: str) -> Hop:
    return Hop(hop.kind, hop.topic, hop.queue, hop.offset, hop.operator, hop.key, hop.value, hop.before, hop.after,
               hop.batch_id, "; ".join(n for n in (hop.note, note) if n))


def _processed(hop: Hop, effect: _Effect, tag: CommitTag, job: Tracer) -> Hop:
    """The input hop, with what its pipeline made of it and the batch that processed it."""
    key, value = (hop.key, hop.value) if effect.received is None or effect.received is _AS_READ else effect.received
    path = " → ".join(effect.operators)
    note = f"read in batch {tag.batch_id}" + (f": {path}" if path else "")
    merged = Hop(hop.kind, hop.topic, hop.queue, hop.offset, hop.operator, key, value, None, None, tag.batch_id,
                 hop.note)
    return _with_note(merged, note)


def _operator_of_output(job: Tracer, replay: Replay, topic: str) -> str | None:
    """The node that wrote to ``topic`` in ``replay``'s range (a join's or a union's shuffle topic has
    a writer per side: the one in this range's pipeline)."""
    writers = [node.name for node in job.topology.nodes if node.spec.writes and node.params.get("topic") == topic]
    return next((name for name in writers if name in replay.kinds), writers[0] if writers else None)


def _output_hop(job: Tracer, replay: Replay, topic: str, queue: int, index: int, kind: str | None = None,
                note: str = "") -> Hop:
    key, body, _born, headers, _tags = replay.record(topic, queue, index)
    role = topic_role(topic, job.topology)
    decoded = decode_message(role, key, body, headers)
    operator = decoded.detail.get("operator") if role.role in (LATE, DLQ) else _operator_of_output(job, replay, topic)
    if kind is None:
        kind = {SHUFFLE: "shuffle", LATE: "late", DLQ: "dead letter", SINK: "sink"}.get(role.role, "sink")
    if role.role == LATE:
        note = "; ".join(n for n in (note, str(decoded.detail.get("reason", ""))) if n)
    if role.role == DLQ:
        note = "; ".join(n for n in (note, str(decoded.detail.get("error", ""))) if n)
    if decoded.kind == "partial" and "counts" in decoded.detail:  # a window count's: on-time records per window
        note = "; ".join(n for n in (note, "sent by the combine node instead of those records; per window start: "
                                     f"{decoded.detail['counts']}") if n)
    elif decoded.kind == "partial" and "times" in decoded.detail:  # a count's: it emits an update for each
        note = "; ".join(n for n in (note, "sent by the combine node instead of those records; the count "
                                     "emits an update for each") if n)
    offset = replay.offset(topic, queue, index)
    if offset is None and topic in replay.on_commit:
        note = "; ".join(n for n in (note, "visible on commit: RocketMQ gave it its offset when it committed it, "
                                     "after the commit tag, which so cannot say it") if n)
    return Hop(kind, topic, queue, offset, operator, decoded.key, decoded.value, batch_id=replay.tag.batch_id,
               note=note)


def _state_hop(replay: Replay, kb: bytes, old: bytes | None, new: bytes | None) -> Hop:
    operator, key = split_state_key(kb)
    assert replay.state_topic is not None
    change = "added" if old is None else "deleted" if new is None else "changed"
    return Hop("state", replay.state_topic, replay.tag.queue, replay.changelog_offset(kb), operator, key, None,
               None if old is None else decode(old), None if new is None else decode(new),
               replay.tag.batch_id, f"{change} in the state store")


def _followed(job: Tracer, cfg: TaskConfig, replay: Replay, kb: bytes, new: bytes | None, work: Path,
              operators: list[str]) -> list[Hop]:
    """The results a state change led to outside its record: a per-batch result at the end of the
    same batch, or a window's result when it fired, or what a timer emitted when it cleared the entry
    (in this batch or a later one)."""
    operator, key = split_state_key(kb)
    emits = replay.deferred(operator, key)
    # a window that emits early (``emit="early"``) gave its current value at the end of this batch;
    # its final result is followed on as that of any window
    early = [emit for emit in emits if isinstance(emit.value, WindowResult) and not emit.value.final]
    hops = [_output_hop(job, replay, *out, kind="emitted", note=f"{operator} emitted an early result (its "
                        "window is open) at the end of the same batch") for emit in early for out in emit.outputs]
    if early:
        if operator not in operators:
            operators.append(operator)
        emits = [emit for emit in emits if emit not in early]
    fire_replay = replay
    proc = replay.kinds.get(operator)
    if not emits and new is not None and proc is not None and proc.results_later:
        fired_at = taken_in(job, replay, kb)
        if fired_at is not None:
            fire_replay = Replay(job, cfg, fired_at, [], work)
            emits = fire_replay.deferred(operator, key)
            emits = [emit for emit in emits if not (isinstance(emit.value, WindowResult) and not emit.value.final)]
        else:
            return hops
    for emit in emits:
        if operator not in operators:
            operators.append(operator)
        proc = replay.kinds.get(operator)
        what = "fired" if proc is not None and proc.fires_windows else "emitted"
        when = "in the same batch" if fire_replay is replay else f"in batch {fire_replay.tag.batch_id}"
        for out in emit.outputs:
            hops.append(_output_hop(job, fire_replay, *out, kind=what, note=f"{operator} {what} {when}"))
    return hops


def taken_in(job: Tracer, replay: Replay, kb: bytes) -> CommitTag | None:
    """The later committed range of the same queue that deleted state key ``kb`` (a window that fired,
    a held record taken: ``Replay.held``); None: none has yet."""
    state_topic, queue = replay.state_topic, replay.tag.queue
    assert state_topic is not None
    rng = replay.tag.output_range(state_topic, queue)
    start = rng[1] if rng is not None else 0
    hex_key = kb.hex()
    for message in job.broker.read(state_topic, queue, start):
        if message.key == hex_key and not message.body:
            for tag in job.queue_tags(replay.tag.topic, queue):
                found = tag.output_range(state_topic, queue)
                if found is not None and found[0] <= message.offset < found[1]:
                    return tag
    return None
