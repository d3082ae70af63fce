"""``topology_view``: a topology's graph as an SVG inside an ``ipywidgets.HTML``; ``TopologyMonitor``:
the real topology of a running job, with live counters on its nodes."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import ipywidgets

from rstream import RocketMQStream, Topology

from .html import box, status
from .live import LiveView

GRAPHS = ("real", "logical")


def topology_svg(topology: Topology, graph: str = "real",
                 counters: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The ``graph`` (``"real"``: the real topology, the default; or ``"logical"``) of ``topology``
    as SVG text, rendered by the Graphviz ``dot`` program (which must be on the PATH); ``counters``
    (``job.operator_totals()``) label the real graph's nodes."""
    if not isinstance(topology, Topology):
        raise TypeError(f"topology_svg needs a Topology (builder.build()), got {type(topology).__name__}")
    if graph not in GRAPHS:
        raise ValueError(f"graph must be one of {GRAPHS}, got {graph!r}")
    return topology.real_svg(counters) if graph == "real" else topology.graph.to_svg()


def topology_view(topology: Topology, graph: str = "real") -> ipywidgets.HTML:
    """An ``ipywidgets.HTML`` showing ``topology``'s real (or logical) graph as SVG, fitted to the
    output area."""
    view = box()
    view.value = topology_svg(topology, graph)
    return view


class TopologySnapshot:
    """A job's real topology with its operators' counters, as they are now: ``to_pandas()`` (one row
    per operator) and ``_repr_html_`` (the SVG)."""

    def __init__(self, topology: Topology, counters: dict[str, dict[str, int]]) -> None:
        self.topology = topology
        self.counters = counters

    @classmethod
    def of(cls, job: RocketMQStream) -> TopologySnapshot:
        return cls(job.topology, job.operator_totals())

    def to_pandas(self) -> Any:
        import pandas as pd

        rows = [{"operator": node.name, "kind": node.kind, "pipeline": node.pipeline,
                 **self.counters.get(node.name, {})} for node in self.topology.nodes]
        return pd.DataFrame(rows)

    def _repr_html_(self) -> str:
        return topology_svg(self.topology, "real", self.counters)


class TopologyMonitor(LiveView):
    """The real topology of ``job``, redrawn after each batch with every operator's records in, and
    the open and fired windows and late records of windows and joins (one renderer thread, as
    every live view: ``start()``, ``stop()``, ``refresh()``)."""

    kind = "topology"

    def __init__(self, job: RocketMQStream, interval: float = 0.5, **kwargs: Any) -> None:
        self.graph = box()
        status_line = box()
        super().__init__(job, [status_line, self.graph], status_line, interval, **kwargs)
        self.refresh()

    def snapshot(self) -> TopologySnapshot:
        """The real topology with every operator's counters so far (``job.operator_totals()``)."""
        return TopologySnapshot.of(self.job)

    def draw(self) -> Hashable:
        seen = self.seen()
        state = "running" if self.job.is_running else "stopped"
        self.status_line.value = status(f"{self.job.job_id}: {state}, {len(self.job.progress)} batches")
        self.graph.value = self.snapshot()._repr_html_()
        return seen
