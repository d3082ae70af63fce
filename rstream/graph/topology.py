"""The second build: logical nodes become real nodes, grouped by the topic they consume.

``key_by(...).count()`` becomes shuffle sink -> ``<job>-ROCKETMQ-COUNT-<n>-shuffleTopic`` -> shuffle
source -> count, with the state topic ``<shuffle topic>-stateTopic`` (same queue count). Source
topics and shuffle topics are consumed alike (RIP-58 "unify source topic and shuffle topic"): a
topic's *pipeline* is the real nodes that process its records. Real nodes are factories; the
processors themselves are made per queue (third build) by ``Topology.build_processors``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rstream.errors import RStreamError
from rstream.graph.logical import LogicalGraph, LogicalNode, describe_callable
from rstream.graph.style import HIGHLIGHT, TOPIC_STYLES, DrawEdge, DrawNode, fitted_svg, to_digraph
from rstream.processors import rewrites
from rstream.processors.base import Processor
from rstream.processors.spec import OperatorSpec, Role, Shuffle
from rstream.processors.stateless import KEY_BY
from rstream.settings import DEFAULTS, JobProperties
from rstream.shuffle.combine import COMBINE
from rstream.shuffle.sink import SHUFFLE_SINK
from rstream.shuffle.source import SHUFFLE_SOURCE
from rstream.time.windows import SessionWindow

STATE_TOPIC_SUFFIX = "-stateTopic"


def shuffle_topic_name(job_id: str, node: LogicalNode) -> str:
    return f"{job_id}-ROCKETMQ-{node.kind.upper()}-{node.number}-shuffleTopic"


def state_topic_name(input_topic: str) -> str:
    return f"{input_topic}{STATE_TOPIC_SUFFIX}"


def short_topic_name(topic: str, job_id: str) -> str:
    """``COUNT-4 shuffle topic`` for ``<job>-ROCKETMQ-COUNT-4-shuffleTopic`` (``... state topic`` for its
    state topic); any other name as it is. For tables that must fit a notebook."""
    prefix = f"{job_id}-ROCKETMQ-"
    if not topic.startswith(prefix):
        return topic
    short = topic[len(prefix):]
    return short.replace(f"-shuffleTopic{STATE_TOPIC_SUFFIX}", " state topic").replace("-shuffleTopic", " shuffle topic")


@dataclass(eq=False)
class RealNode:
    """A real node: a processor factory (its operator's spec and params) in the pipeline of the
    topic it consumes."""

    spec: OperatorSpec
    name: str
    pipeline: str
    params: dict[str, Any] = field(default_factory=dict)
    children: list[RealNode] = field(default_factory=list)
    logical: int | None = None

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def stateful(self) -> bool:
        return self.spec.stateful

    @property
    def windowed(self) -> bool:
        return self.params.get("window") is not None

    @property
    def label(self) -> str:
        detail = self.params.get("detail")
        if self.windowed:
            emit = f" emit {self.params['emit']}" if "emit" in self.params else ""
            detail = f"{detail + ' ' if detail else ''}{self.params['window'].describe()}{emit}"
        return f"{self.name}\n{detail}" if detail else self.name

    def create(self, sink_queues: Mapping[str, int], settings: JobProperties = DEFAULTS) -> Processor:
        """Make this node's processor for one queue (the third build), as its spec says."""
        if self.spec.make is None:
            raise ValueError(f"{self.name}: operator {self.kind!r} has no processor")
        return self.spec.make(self.name, self.params, settings, sink_queues)


class Topology:
    """The real topology of a job: pipelines by input topic, and every topic the job uses."""

    def __init__(self, graph: LogicalGraph, shuffle_queues: int, combine: bool = False,
                 optimizations: frozenset[str] | None = None) -> None:
        self.job_id = graph.job_id
        self.graph = graph
        self.shuffle_queues = shuffle_queues
        #: The rewrites the second build applied (``build(optimize=...)``, ``rstream.processors.rewrites``).
        self.optimizations = (rewrites.chosen(None, combine) if optimizations is None else optimizations)
        #: Whether the second build inserted combine nodes where they apply (``build(combine=...)``).
        self.combine = rewrites.COMBINE.name in self.optimizations
        self.nodes: list[RealNode] = []
        self.pipelines: dict[str, list[RealNode]] = {}
        self.source_topics: list[str] = []
        self.shuffle_topics: dict[str, int] = {}
        self.state_topics: dict[str, str] = {}
        self.sink_topics: list[str] = []
        #: Sink topics whose records consumers outside rstream see only once committed (``visible="on_commit"``).
        self.on_commit_topics: list[str] = []
        self._visible: dict[str, Any] = {}
        #: Shuffle topics that feed windows or joins: their records carry time, side and producer.
        self.framed_topics: list[str] = []

    def note_visible(self, topic: str, visible: Any) -> None:
        """Note a sink's ``visible`` choice for ``topic``; every sink of one topic must make the same."""
        if self._visible.setdefault(topic, visible) != visible:
            raise RStreamError(f"two sinks of job {self.job_id!r} write topic {topic!r}, one with "
                                f"visible={self._visible[topic].value!r} and one with visible={visible.value!r}: "
                                "its consumers see the topic one way; give both the same")
        if str(visible) == "on_commit" and topic not in self.on_commit_topics:
            self.on_commit_topics.append(topic)

    def producers(self, topic: str, queue_counts: Mapping[str, int]) -> list[str]:
        """The producers of a framed shuffle topic: ``<input topic>/<queue>/<shuffle sink>`` for every
        queue of every pipeline that has a shuffle sink writing to it."""
        out = []
        for node in self.nodes:
            if node.spec is SHUFFLE_SINK and node.params["topic"] == topic:
                out += [f"{node.pipeline}/{q}/{node.name}" for q in range(queue_counts[node.pipeline])]
        return out

    @property
    def framed_by_sources(self) -> bool:
        """Whether every window and join topic is written by source pipelines only (none by a pipeline
        of another shuffle topic): then once the sources are read, every record those topics will get
        is in them."""
        return all(node.pipeline in self.source_topics for node in self.nodes
                   if node.spec is SHUFFLE_SINK and node.params["topic"] in self.framed_topics)

    @property
    def shuffles_after_sources(self) -> list[str]:
        """The shuffle topics written by source pipelines only and carrying no frames (no window, no
        join): once a batch's source ranges are committed, such a topic holds all the batch gives it,
        and no tick ever goes there. A batch's source tasks may then run its queues themselves."""
        return [topic for topic in self._written_by_sources() if topic not in self.framed_topics]

    @property
    def framed_after_sources(self) -> list[str]:
        """The window and join topics written by source pipelines only. Once a batch's source ranges
        are committed such a topic holds all the batch gives it, but for the idle ticks the driver
        sends: a batch's source tasks may run its queues too, while the driver sends none (see
        ``QueryDriver.tick``) and no idle flush is due after the batch (the driver sends it first)."""
        return [topic for topic in self._written_by_sources() if topic in self.framed_topics]

    def _written_by_sources(self) -> list[str]:
        writers: dict[str, list[str]] = {}
        for node in self.nodes:
            if node.spec is SHUFFLE_SINK:
                writers.setdefault(node.params["topic"], []).append(node.pipeline)
        return [topic for topic in self.shuffle_topics
                if all(pipeline in self.source_topics for pipeline in writers.get(topic, []))]

    # -- queries ----------------------------------------------------------------------------------
    @property
    def input_topics(self) -> list[str]:
        """Every topic the job consumes: its sources, then its shuffle topics."""
        return self.source_topics + list(self.shuffle_topics)

    def pipeline_nodes(self, topic: str) -> list[RealNode]:
        """The real nodes of ``topic``'s pipeline, parents first."""
        out: list[RealNode] = []
        seen: set[int] = set()
        queue = list(self.pipelines.get(topic, []))
        while queue:
            node = queue.pop(0)
            if id(node) in seen:
                continue
            seen.add(id(node))
            out.append(node)
            queue.extend(node.children)
        return out

    def table_keeper(self, table: str) -> RealNode | None:
        """The stream–table join that keeps the table ``table`` (a ``to_table()`` node's name, e.g.
        ``TABLE-4``, which has no real node of its own), or None when ``table`` names no table or no
        join reads it. Several joins on one table each keep a copy: the first is given."""
        numbers = {n.number for n in self.graph if n.name == table and n.spec.role is Role.TABLE}
        if not numbers:
            return None
        readers = {n.number for n in self.graph if any(p.number in numbers for p in n.parents)}
        return next((n for n in self.nodes if n.logical in readers and n.stateful), None)

    def is_stateful(self, topic: str) -> bool:
        return topic in self.state_topics

    def build_processors(self, topic: str, sink_queues: Mapping[str, int],
                         settings: JobProperties = DEFAULTS) -> list[Processor]:
        """The third build for one queue of ``topic``: its processor chain, wired; returns the roots."""
        made: dict[int, Processor] = {}
        for node in self.pipeline_nodes(topic):
            made[id(node)] = node.create(sink_queues, settings)
        for node in self.pipeline_nodes(topic):
            proc = made[id(node)]
            proc.children = [made[id(c)] for c in node.children]
        for proc in made.values():
            proc.wire()
        return [made[id(root)] for root in self.pipelines[topic]]

    # -- views ------------------------------------------------------------------------------------
    def describe(self) -> str:
        """The topology as text, like Kafka Streams' ``describe()``."""
        lines = [f"Topology of job {self.job_id!r} ({rewrites.describe(self.optimizations)})"]
        for i, topic in enumerate(self.pipelines, start=1):
            role = "shuffle topic" if topic in self.shuffle_topics else "source topic"
            lines.append(f"  Pipeline {i}: consumes {role} {topic}")
            for node in self.pipeline_nodes(topic):
                extra = ""
                if node.spec.writes:
                    extra = f" -> topic {node.params['topic']}"
                if node.stateful:
                    extra = f" (state topic {self.state_topics[topic]})"
                if node.windowed:
                    emit = f" emit {node.params['emit']}" if "emit" in node.params else ""
                    extra = f" [{node.params['window'].describe()}{emit}]{extra}"
                lines.append(f"    {node.kind:<16} {node.name}{extra}")
                if node.children:
                    kids = (c.name + (f" ({c.spec.side_output})" if c.spec.side_output else "") for c in node.children)
                    lines.append(f"      --> {', '.join(kids)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.describe()

    def logical_dot(self) -> str:
        """The logical graph (first build) as DOT text."""
        return self.graph.to_dot()

    def logical_graph(self) -> Any:
        """The logical graph as a ``graphviz.Digraph``."""
        return self.graph.to_digraph()

    def real_graph(self, counters: Mapping[str, Mapping[str, Any]] | None = None,
                   highlight: Iterable[str] | None = None, rankdir: str = "LR") -> Any:
        """The real topology as a ``graphviz.Digraph``: one cluster per pipeline, topics as cylinders.
        With ``counters`` (per operator name, e.g. ``job.operator_totals()``) each node also shows
        its records in, and windows/joins their open and fired windows and late records: the live
        view of a running job. ``highlight`` (operator and topic names) draws a path in colour: a
        record's trace. ``rankdir`` ``"TB"`` lays it out top to bottom."""
        marked = set(highlight or ())
        ids = {id(n): f"r{i}" for i, n in enumerate(self.nodes)}
        lit: set[str] = set()
        draw: list[DrawNode] = []
        edges: list[DrawEdge] = []
        topic_ids: dict[str, str] = {}

        def topic_node(name: str, kind: str) -> str:
            if name not in topic_ids:
                topic_ids[name] = f"t{len(topic_ids)}"
                draw.append(DrawNode(topic_ids[name], TOPIC_STYLES[kind], name, _lit(name in marked)))
                if name in marked:
                    lit.add(topic_ids[name])
            return topic_ids[name]

        def edge(tail: str, head: str, label: str = "", style: str = "solid") -> None:
            on = tail in lit and head in lit
            edges.append(DrawEdge(tail, head, label, style, (("color", HIGHLIGHT), ("penwidth", "2.5")) if on else ()))

        for node in self.nodes:
            if node.name in marked:
                lit.add(ids[id(node)])
        for topic in self.pipelines:
            topic_node(topic, "shuffle_topic" if topic in self.shuffle_topics else "topic")
        for node in self.nodes:
            label = node.label + _counter_line((counters or {}).get(node.name))
            attrs = (("tooltip", node.name), *_lit(node.name in marked))
            draw.append(DrawNode(ids[id(node)], node.spec.style, label, attrs, node.pipeline))
        for topic in self.pipelines:
            for root in self.pipelines[topic]:
                edge(topic_ids[topic], ids[id(root)])
        for node in self.nodes:
            for child in node.children:
                side = child.spec.side_output
                edge(ids[id(node)], ids[id(child)], side or "", "dashed" if side else "solid")
            if node.spec.writes:
                edge(ids[id(node)], topic_node(node.params["topic"], node.spec.writes))
            if node.stateful:
                edge(ids[id(node)], topic_node(self.state_topics[node.pipeline], "state_topic"), "changelog", "dashed")
        return to_digraph(f"{self.job_id}: real topology ({rewrites.describe(self.optimizations)})", draw, edges,
                          rankdir)

    def real_dot(self) -> str:
        """The real topology (second build) as DOT text."""
        return str(self.real_graph().source)

    def real_svg(self, counters: Mapping[str, Mapping[str, Any]] | None = None,
                 highlight: Iterable[str] | None = None) -> str:
        """The real topology as SVG that fits a notebook: laid out top to bottom when left to right
        would be wider than the output area, and scaled to its width when still too wide."""
        return fitted_svg(self.real_graph(counters, highlight))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/html": self.real_svg(), "text/plain": self.describe()}


def copy_name(name: str, pipeline: str, job_id: str, many: bool) -> str:
    """The name of one of several real nodes standing for one logical node (after a union of streams
    of different pipelines, one copy per pipeline up to the next shuffle): ``UNION-5@orders`` in the
    pipeline of source topic ``orders``, ``MAP-8@COUNT-4`` in that of COUNT-4's shuffle topic, so each
    copy has its own counters, dead letters and place on a trace. A single node keeps its name."""
    if not many:
        return name
    prefix = f"{job_id}-ROCKETMQ-"
    where = pipeline[len(prefix):].removesuffix("-shuffleTopic") if pipeline.startswith(prefix) else pipeline
    return f"{name}@{where}"


def _lit(on: bool) -> tuple[tuple[str, str], ...]:
    return (("color", HIGHLIGHT), ("penwidth", "3")) if on else ()


def _counter_line(counters: Mapping[str, Any] | None) -> str:
    if not counters:
        return ""
    parts = [f"{int(counters.get('records_in', 0)):,} in"]
    for key, word in (("windows_open", "open"), ("windows_fired", "fired"), ("late", "late"),
                      ("timers_pending", "timers"), ("timers_fired", "timers fired")):
        if counters.get(key):
            parts.append(f"{int(counters[key]):,} {word}")
    return "\n" + " · ".join(parts)


def _combinable(spec: OperatorSpec, params: Mapping[str, Any], window: Any) -> Any:
    """The fold a combine node before ``spec``'s shuffle would use, or None where none can: an
    unwindowed aggregation whose fold merges (associative and commutative), or a count over
    tumbling or sliding windows (sessions merge: no combine)."""
    if not spec.combines or spec.fold is None:
        return None
    fold = spec.fold(params)
    if window is None:
        return fold
    return fold if fold.counts and not isinstance(window, SessionWindow) else None


def _combine_detail(lnode: LogicalNode, fold: Any, window: Any) -> str:
    """A combine node's label: what it sends instead of records."""
    if window is not None:
        return "counts per key and window,\nper source range"
    if fold.counts:
        return "counts per key,\nper source range"
    return f"{lnode.kind} per key, per batch\n(aggregate_emit='batch')"


class TopologyBuilder:
    """Turns a logical graph into a ``Topology`` (the second build), reading what each node needs
    from its operator's spec: a pipeline of its own (a source), a key shuffle before it (an
    aggregation), one shuffle topic for both sides (a join, a stream–table join: the table's side keeps
    its key), nothing of its own (a window, a table)."""

    def __init__(self, graph: LogicalGraph, shuffle_queues: int = 8, combine: bool = True,
                 optimizations: frozenset[str] | None = None) -> None:
        self.graph = graph
        self.shuffle_queues = shuffle_queues
        self.optimizations = rewrites.chosen(None, combine) if optimizations is None else optimizations
        self.combine = rewrites.COMBINE.name in self.optimizations

    def build(self) -> Topology:
        topo = Topology(self.graph, self.shuffle_queues, self.combine, self.optimizations)
        # logical node number -> the real nodes its children attach to: one per pipeline it runs in
        # (more than one after a union of streams from different pipelines, up to the next shuffle)
        out: dict[int, list[RealNode]] = {}

        def add(node: RealNode, parents: list[RealNode]) -> RealNode:
            topo.nodes.append(node)
            if not parents:
                topo.pipelines.setdefault(node.pipeline, []).append(node)
            for parent in parents:
                parent.children.append(node)
            return node

        windows: dict[int, Any] = {}  # logical number of a window node (or of a map/filter after it) -> its window
        emits: dict[int, Any] = {}  # the same nodes -> their ``WindowEmit`` (where not the default)

        def shuffle_into(lnode: LogicalNode, sides: list[tuple[RealNode, str, Any, int]], framed: bool,
                         combine: Any = None, window: Any = None) -> RealNode:
            """Shuffle sink(s) in the parents' pipelines -> shuffle topic -> shuffle source. Each side is
            (parent, name suffix, key function or None, join side). ``combine``: the fold of the
            aggregation after the shuffle where it may combine before it (and ``window`` its window)."""
            shuffle = shuffle_topic_name(self.graph.job_id, lnode)
            copies = Counter(suffix for _, suffix, _, _ in sides)
            for parent, suffix, key_fn, side in sides:
                def name(kind: str, parent: RealNode = parent, suffix: str = suffix) -> str:
                    return copy_name(f"{kind}{suffix}-{lnode.number}", parent.pipeline, self.graph.job_id,
                                     copies[suffix] > 1)

                if key_fn is not None:
                    parent = add(RealNode(KEY_BY, name("KEY_BY"), parent.pipeline,
                                          {"fn": key_fn, "detail": describe_callable(key_fn)},
                                          logical=lnode.number), [parent])
                if combine is not None and self.combine:  # the rewrite: partials instead of records
                    parent = add(RealNode(COMBINE, name("COMBINE"), parent.pipeline,
                                          {"fold": combine, "combine_window": window,
                                           "detail": _combine_detail(lnode, combine, window)},
                                          logical=lnode.number), [parent])
                add(RealNode(SHUFFLE_SINK, name("SHUFFLE_SINK"), parent.pipeline,
                             {"topic": shuffle, "queues": self.shuffle_queues, "detail": shuffle,
                              "framed": framed, "side": side},
                             logical=lnode.number), [parent])
            topo.shuffle_topics[shuffle] = self.shuffle_queues
            topo.state_topics[shuffle] = state_topic_name(shuffle)
            if framed:
                topo.framed_topics.append(shuffle)
            return add(RealNode(SHUFFLE_SOURCE, f"SHUFFLE_SOURCE-{lnode.number}", shuffle,
                                {"detail": shuffle, "framed": framed}, logical=lnode.number), [])

        for lnode in self.graph:
            spec, params = lnode.spec, dict(lnode.params)
            if spec.role is Role.SOURCE:
                topic = params["topic"]
                if topic not in topo.source_topics:
                    topo.source_topics.append(topic)
                out[lnode.number] = [add(RealNode(spec, lnode.name, topic, params, logical=lnode.number), [])]
                continue
            first = lnode.parents[0].number
            if spec.role is Role.WINDOW:
                windows[lnode.number] = params["window"]
                if "emit" in params:
                    emits[lnode.number] = params["emit"]
                out[lnode.number] = out[first]  # no real node: the windowed aggregate after it carries the window
                continue
            if spec.role is Role.TABLE:
                out[lnode.number] = out[first]  # no real node: a stream–table join after it keeps the table
                continue
            if spec.shuffle is Shuffle.BY_KEY:
                window = windows.get(first)
                params["window"] = window
                if first in emits:
                    params["emit"] = emits[first]
                combine = _combinable(spec, params, window)
                framed = window is not None or spec.timed or params.get("order") is not None
                parents = [shuffle_into(lnode, [(p, "", None, 0) for p in out[first]],
                                        framed=framed, combine=combine, window=window)]
            elif spec.shuffle is Shuffle.JOIN:
                left, right = out[first], out[lnode.parents[1].number]
                parents = [shuffle_into(lnode, [(p, "_LEFT", params["left_key"], 0) for p in left]
                                        + [(p, "_RIGHT", params["right_key"], 1) for p in right], framed=True)]
            else:
                if first in windows:  # a map or filter between a window and its aggregation
                    windows[lnode.number] = windows[first]
                    if first in emits:
                        emits[lnode.number] = emits[first]
                parents = [p for parent in lnode.parents for p in out[parent.number]]
            if spec.role is Role.SINK and params["topic"] not in topo.sink_topics:
                topo.sink_topics.append(params["topic"])
            if spec.role is Role.SINK and "visible" in params:
                topo.note_visible(params["topic"], params["visible"])
            by_pipeline: dict[str, list[RealNode]] = {}
            for p in parents:
                by_pipeline.setdefault(p.pipeline, []).append(p)
            many = len(by_pipeline) > 1
            out[lnode.number] = [add(RealNode(spec, copy_name(lnode.name, pipeline, self.graph.job_id, many), pipeline,
                                              dict(params), logical=lnode.number), ps)
                                 for pipeline, ps in by_pipeline.items()]
        return topo
