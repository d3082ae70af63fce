"""One spec per operator, declared next to its processor: its kind, how it is drawn, whether it
shuffles, how it folds, and how its processor is made.

The DSL adds logical nodes by spec (``graph.add(COUNT, ...)``), the second build reads what a node
does from its spec (a key shuffle before it, one topic for both sides of a join, a pipeline of its
own for a source), and graphs take their shapes and colours from it. From a DSL method, "go to
definition" on the spec it passes reaches the module of the processor that runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rstream.processors.base import Processor
    from rstream.processors.fold import Fold
    from rstream.settings import JobProperties


@dataclass(frozen=True)
class NodeStyle:
    """How a node is drawn: a graphviz shape and fill colour, and the category a legend names."""

    shape: str
    fillcolor: str
    category: str


SOURCE_STYLE = NodeStyle("invhouse", "#cfe8ff", "source")
STATELESS_STYLE = NodeStyle("box", "#ffffff", "stateless")
KEY_STYLE = NodeStyle("box", "#fff3c4", "key")
SHUFFLE_STYLE = NodeStyle("cds", "#ffd8a8", "shuffle")
STATEFUL_STYLE = NodeStyle("box3d", "#d3f9d8", "stateful")
WINDOW_STYLE = NodeStyle("box", "#e3fafc", "window")
SINK_STYLE = NodeStyle("house", "#e5dbff", "sink")
SIDE_EFFECT_STYLE = NodeStyle("note", "#f1f3f5", "side effect")


class Role(Enum):
    """Where a node stands in the second build."""

    OPERATOR = "operator"  # a processor in its parent's pipeline
    SOURCE = "source"  # starts the pipeline of a source topic
    SINK = "sink"  # writes to a topic the job creates when missing
    WINDOW = "window"  # no processor: the aggregation after it carries its window
    TABLE = "table"  # no processor: the stream–table join after it keeps the table
    INTERNAL = "internal"  # added by the second build only (shuffle sinks and sources)


class Shuffle(Enum):
    """What the second build puts before a node."""

    NONE = "none"
    BY_KEY = "by key"  # shuffle sink -> shuffle topic -> shuffle source, by the record's key
    JOIN = "join"  # both sides keyed and shuffled into one topic, each record saying its side


#: ``make(name, params, settings, sink_queues)``: the processor of one real node for one queue.
MakeProcessor = Callable[[str, Mapping[str, Any], "JobProperties", Mapping[str, int]], "Processor"]


@dataclass(frozen=True, eq=False)
class OperatorSpec:
    """What rstream knows about one kind of operator, in one place.

    - ``kind``: its name in graphs and real-node names (``COUNT-4``).
    - ``style``: how its nodes are drawn.
    - ``make``: makes its processor (None: no processor of its own, e.g. ``window``).
    - ``role`` and ``shuffle``: what the second build does with it.
    - ``fold``: for aggregations, the fold of a node's params (count, sum, ... share one fold
      between keyed aggregates, windowed aggregates and the combining shuffle sink).
    - ``combines``: an unwindowed aggregation whose fold may combine each key's values before the
      shuffle (``aggregate_emit="batch"``): only folds whose merge is associative and commutative.
    - ``stateful``: keeps state in the state store (so its topic gets a state topic).
    - ``writes``: the kind of topic it writes to (drawn as an edge to it), if any.
    - ``keyed_state``: a stateful operator whose state is one value per key (per key and window when
      windowed), which ``job.query(operator, key)`` answers with; a join's is the records of each side
      waiting for a partner.
    - ``timed``: keeps event-time timers, so it needs the operator watermark: its shuffle topic
      carries frames (each record's source watermark, watermark markers, idle ticks), as a window's.
    - ``side_output``: it takes a side output of its parent (``late``: its late records), not what
      the parent forwards; the edge from the parent is drawn dashed with this label.
    """

    kind: str
    style: NodeStyle
    make: MakeProcessor | None
    role: Role = Role.OPERATOR
    shuffle: Shuffle = Shuffle.NONE
    fold: Callable[[Mapping[str, Any]], Fold] | None = None
    combines: bool = False
    stateful: bool = False
    writes: str | None = None
    keyed_state: bool = True
    timed: bool = False
    side_output: str | None = None

    def __repr__(self) -> str:
        return f"<operator {self.kind}>"

    def __reduce__(self) -> Any:
        # specs are module constants: pickled by name, so a task's copy is the worker's own; with its
        # fields too, for a worker that has not loaded the module that declared it (a newcomer's
        # operator declared in a notebook, whose functions cloudpickle sends by value)
        if self.make is None or (getattr(self.make, "__module__", None) or "").startswith("rstream."):
            return (spec_of, (self.kind,))
        return (_spec_or_declare, (self.kind, tuple(getattr(self, f.name) for f in fields(self))))


_SPECS: dict[str, OperatorSpec] = {}


def register(spec: OperatorSpec) -> OperatorSpec:
    """Make ``spec`` known by its kind (for pickling by name); returns it."""
    if spec.kind in _SPECS and _SPECS[spec.kind] is not spec:
        raise ValueError(f"two operator specs of kind {spec.kind!r}")
    _SPECS[spec.kind] = spec
    return spec


def _spec_or_declare(kind: str, values: tuple[Any, ...]) -> OperatorSpec:
    """The spec of ``kind`` where this process knows it, else the spec of these field values, declared."""
    try:
        return spec_of(kind)
    except ValueError:
        declared = OperatorSpec(*values)
        return register(declared)


def spec_of(kind: str) -> OperatorSpec:
    """The spec of ``kind`` (loads the processor modules the first time)."""
    if kind not in _SPECS:
        import rstream.processors.catalog  # noqa: F401  (declares every built-in operator)
    try:
        return _SPECS[kind]
    except KeyError:
        raise ValueError(f"no operator of kind {kind!r}; known: {sorted(_SPECS)}") from None


def all_specs() -> list[OperatorSpec]:
    """Every known operator spec (a legend draws them)."""
    import rstream.processors.catalog  # noqa: F401

    return list(_SPECS.values())
