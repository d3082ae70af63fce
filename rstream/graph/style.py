"""How each kind of node is drawn: every node knows its own shape and colour (after streamz), and
one function turns nodes and edges into a ``graphviz.Digraph``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import graphviz


@dataclass(frozen=True)
class NodeStyle:
    shape: str
    fillcolor: str
    category: str


_SOURCE = NodeStyle("invhouse", "#cfe8ff", "source")
_STATELESS = NodeStyle("box", "#ffffff", "stateless")
_KEY = NodeStyle("box", "#fff3c4", "key")
_SHUFFLE = NodeStyle("cds", "#ffd8a8", "shuffle")
_STATEFUL = NodeStyle("box3d", "#d3f9d8", "stateful")
_SINK = NodeStyle("house", "#e5dbff", "sink")
_SIDE = NodeStyle("note", "#f1f3f5", "side effect")
_TOPIC = NodeStyle("cylinder", "#f8f9fa", "topic")
_SHUFFLE_TOPIC = NodeStyle("cylinder", "#ffd8a8", "shuffle topic")
_STATE_TOPIC = NodeStyle("cylinder", "#d3f9d8", "state topic")

STYLES: dict[str, NodeStyle] = {
    "source": _SOURCE,
    "shuffle_source": _SOURCE,
    "map": _STATELESS,
    "flat_map": _STATELESS,
    "filter": _STATELESS,
    "select_timestamp": _STATELESS,
    "to_rstream": _STATELESS,
    "key_by": _KEY,
    "shuffle_sink": _SHUFFLE,
    "count": _STATEFUL,
    "sum": _STATEFUL,
    "min": _STATEFUL,
    "max": _STATEFUL,
    "aggregate": _STATEFUL,
    "avg": _STATEFUL,
    "join": _STATEFUL,
    "left_join": _STATEFUL,
    "window": NodeStyle("box", "#e3fafc", "window"),
    "sink": _SINK,
    "foreach": _SIDE,
    "print": _SIDE,
    "topic": _TOPIC,
    "shuffle_topic": _SHUFFLE_TOPIC,
    "state_topic": _STATE_TOPIC,
}


def style_of(kind: str) -> NodeStyle:
    return STYLES.get(kind, _STATELESS)


@dataclass(frozen=True)
class DrawNode:
    """A node as drawn: its DOT id, kind (which picks the style), label and extra attributes."""

    id: str
    kind: str
    label: str
    attrs: tuple[tuple[str, str], ...] = ()
    cluster: str | None = None


@dataclass(frozen=True)
class DrawEdge:
    tail: str
    head: str
    label: str = ""
    style: str = "solid"
    attrs: tuple[tuple[str, str], ...] = ()


#: Colour of a highlighted path (a record's trace) on a graph.
HIGHLIGHT = "#e8590c"


class FittedDigraph(graphviz.Digraph):
    """A ``graphviz.Digraph`` that shows in a notebook fitted to the output area (``fitted_svg``)
    instead of at its natural size; everything else is graphviz's own."""

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None, **kwargs: Any) -> dict[str, Any]:
        return {"text/html": fitted_svg(self), "text/plain": f"<graph {self.name!r}>"}


def to_digraph(title: str, nodes: Sequence[DrawNode], edges: Iterable[DrawEdge], rankdir: str = "LR") -> Any:
    """One ``graphviz.Digraph`` for any graph of rstream's; clusters group nodes by topic."""
    graph = FittedDigraph(name=title, graph_attr={"rankdir": rankdir, "label": title, "labelloc": "t",
                                                  "fontname": "Helvetica"})
    graph.attr("node", fontname="Helvetica", fontsize="11", style="filled")
    graph.attr("edge", fontname="Helvetica", fontsize="9")
    clusters: dict[str | None, list[DrawNode]] = {}
    for node in nodes:
        clusters.setdefault(node.cluster, []).append(node)
    for cluster, members in clusters.items():
        if cluster is None:
            for node in members:
                _add_node(graph, node)
            continue
        with graph.subgraph(name=f"cluster_{cluster}") as sub:
            sub.attr(label=f"pipeline: {cluster}", style="rounded,dashed", color="#868e96")
            for node in members:
                _add_node(sub, node)
    for edge in edges:
        graph.edge(edge.tail, edge.head, label=edge.label or None, style=edge.style, **dict(edge.attrs))
    return graph


def _add_node(graph: Any, node: DrawNode) -> None:
    st = style_of(node.kind)
    graph.node(node.id, label=node.label, shape=st.shape, fillcolor=st.fillcolor, **dict(node.attrs))


_SIZE = re.compile(r'<svg width="([0-9.]+)pt" height="([0-9.]+)pt"')


def svg_size(svg: str) -> tuple[float, float]:
    """Width and height of a Graphviz SVG in CSS pixels (Graphviz writes points)."""
    found = _SIZE.search(svg)
    if found is None:
        return 0.0, 0.0
    return float(found.group(1)) * 4 / 3, float(found.group(2)) * 4 / 3


def fit_svg(svg: str) -> str:
    """A Graphviz SVG that fits its container: never wider than the output area (it scales down,
    keeping its proportions), never larger than drawn. Drops the XML prolog, so it can sit in HTML."""
    svg = svg[svg.find("<svg"):]
    width, _height = svg_size(svg)
    if not width:
        return svg
    return _SIZE.sub(f'<svg style="width:100%;max-width:{width:.0f}px;height:auto"', svg, count=1)


#: Width (CSS px) a graph may take before it is laid out top to bottom: a notebook's output area
#: in JupyterLab is about 1000 px wide next to the file browser.
FIT_WIDTH_PX = 960


def fitted_svg(graph: Any) -> str:
    """SVG of ``graph`` (a ``graphviz.Digraph``) that fits a notebook: left to right as drawn, or top
    to bottom when that is wider than ``FIT_WIDTH_PX`` and the top-to-bottom layout is narrower;
    scaled to the output area's width either way."""
    svg = str(graph.pipe(format="svg", encoding="utf-8"))
    if svg_size(svg)[0] > FIT_WIDTH_PX and graph.graph_attr.get("rankdir", "TB") == "LR":
        tall = graph.copy()
        tall.graph_attr["rankdir"] = "TB"
        tall_svg = str(tall.pipe(format="svg", encoding="utf-8"))
        if svg_size(tall_svg)[0] < svg_size(svg)[0]:
            svg = tall_svg
    return fit_svg(svg)
