"""The first build: the logical graph. Every DSL call adds one logical node at once, so a notebook can
draw the pipeline after each cell. It is a DAG: a node may feed several children (branches)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rstream.graph.style import DrawEdge, DrawNode, fitted_svg, to_digraph
from rstream.processors.spec import OperatorSpec


@dataclass(eq=False)
class LogicalNode:
    """One DSL call: its operator's spec and the call's parameters. ``number`` is the operator number
    used in real-node and topic names."""

    number: int
    spec: OperatorSpec
    parents: list[LogicalNode]
    params: dict[str, Any] = field(default_factory=dict)
    children: list[LogicalNode] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def name(self) -> str:
        """The operator's name, e.g. ``COUNT-4``: unique in its job, stable across builds."""
        return f"{self.kind.upper()}-{self.number}"

    @property
    def label(self) -> str:
        detail = self.params.get("detail")
        return f"{self.kind}\n{detail}" if detail else self.kind

    def draw_node(self) -> DrawNode:
        return DrawNode(f"n{self.number}", self.spec.style, self.label, (("tooltip", self.name),))


def describe_callable(fn: Any) -> str:
    """A short label for a user function: its name, or ``lambda`` for lambdas."""
    if fn is None:
        return ""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return "λ" if str(name).endswith("<lambda>") else str(name).replace("<locals>.", "")


class LogicalGraph:
    """The logical nodes of one job, in the order they were added (a topological order)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.nodes: list[LogicalNode] = []
        self._listeners: list[Callable[[LogicalNode], None]] = []

    def add(self, spec: OperatorSpec, parents: list[LogicalNode], **params: Any) -> LogicalNode:
        """Add a node of ``spec``'s operator fed by ``parents``."""
        node = LogicalNode(len(self.nodes) + 1, spec, list(parents), params)
        for parent in parents:
            parent.children.append(node)
        self.nodes.append(node)
        for listener in self._listeners:
            listener(node)
        return node

    def on_add(self, listener: Callable[[LogicalNode], None]) -> None:
        """Call ``listener(node)`` each time a node is added (a live notebook view uses it)."""
        self._listeners.append(listener)

    def __iter__(self) -> Iterator[LogicalNode]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        """The logical graph as text: each node with the nodes it feeds."""
        lines = [f"Logical graph of job {self.job_id!r}"]
        for node in self.nodes:
            detail = node.params.get("detail")
            head = f"  {node.name}" + (f" ({detail})" if detail else "")
            kids = ", ".join(c.name for c in node.children)
            lines.append(head + (f" --> {kids}" if kids else ""))
        return "\n".join(lines)

    def to_digraph(self, rankdir: str = "LR") -> Any:
        """The logical graph as a ``graphviz.Digraph`` (``rankdir="TB"``: top to bottom)."""
        edges = [DrawEdge(f"n{n.number}", f"n{c.number}", c.spec.side_output or "",
                          "dashed" if c.spec.side_output else "solid") for n in self.nodes for c in n.children]
        return to_digraph(f"{self.job_id}: logical graph", [n.draw_node() for n in self.nodes], edges, rankdir)

    def to_svg(self) -> str:
        """The logical graph as SVG that fits a notebook's output area (see ``fitted_svg``)."""
        return fitted_svg(self.to_digraph())

    def to_dot(self) -> str:
        """The logical graph as DOT text."""
        return str(self.to_digraph().source)
