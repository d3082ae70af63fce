"""Graphs: the logical graph (first build) and the real topology (second build), with DOT export."""

from rstream.graph.logical import LogicalGraph, LogicalNode
from rstream.graph.topology import RealNode, Topology, TopologyBuilder

__all__ = ["LogicalGraph", "LogicalNode", "RealNode", "Topology", "TopologyBuilder"]
