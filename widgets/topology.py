"""``topology_view``: a topology's graph as an SVG inside an ``ipywidgets.HTML``."""

from __future__ import annotations

from typing import Any

import ipywidgets

from rstream import Topology

GRAPHS = ("real", "logical")


def topology_svg(topology: Topology, graph: str = "real") -> str:
    """The ``graph`` (``"real"``: the real topology, the default; or ``"logical"``) of ``topology``
    as SVG text, rendered by the Graphviz ``dot`` program (which must be on the PATH)."""
    if not isinstance(topology, Topology):
        raise TypeError(f"topology_svg needs a Topology (builder.build()), got {type(topology).__name__}")
    if graph not in GRAPHS:
        raise ValueError(f"graph must be one of {GRAPHS}, got {graph!r}")
    digraph: Any = topology.real_graph() if graph == "real" else topology.logical_graph()
    svg = str(digraph.pipe(format="svg", encoding="utf-8"))
    return svg[svg.find("<svg"):]  # drop the XML prolog and doctype: the SVG sits inside HTML


def topology_view(topology: Topology, graph: str = "real") -> ipywidgets.HTML:
    """An ``ipywidgets.HTML`` showing ``topology``'s real (or logical) graph as SVG."""
    return ipywidgets.HTML(value=topology_svg(topology, graph))
