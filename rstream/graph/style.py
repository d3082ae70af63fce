"""How each kind of node is drawn: every node knows its own shape and colour (after streamz), and
one function turns nodes and edges into a ``graphviz.Digraph``."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import graphviz

from rstream.processors.spec import NodeStyle

#: How topics are drawn (operators' styles are in their specs: ``rstream.processors.spec``).
TOPIC_STYLE = NodeStyle("cylinder", "#f8f9fa", "topic")
SHUFFLE_TOPIC_STYLE = NodeStyle("cylinder", "#ffd8a8", "shuffle topic")
STATE_TOPIC_STYLE = NodeStyle("cylinder", "#d3f9d8", "state topic")
TOPIC_STYLES = {"topic": TOPIC_STYLE, "shuffle_topic": SHUFFLE_TOPIC_STYLE, "state_topic": STATE_TOPIC_STYLE}


@dataclass(frozen=True)
class DrawNode:
    """A node as drawn: its DOT id, style, label and extra attributes."""

    id: str
    style: NodeStyle
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
    st = node.style
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
