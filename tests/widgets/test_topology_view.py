"""``topology_view``: the real topology as SVG in an ``ipywidgets.HTML`` (no kernel, no Spark)."""

from __future__ import annotations

from html import unescape
from typing import Any

import ipywidgets
import pytest

from widgets import topology_svg, topology_view


def test_real_topology_svg_names_every_node_and_topic(wordcount_builder: Any) -> None:
    topology = wordcount_builder("view").build()
    view = topology_view(topology)
    assert isinstance(view, ipywidgets.HTML)
    assert view.value.startswith("<svg") and view.value.rstrip().endswith("</svg>")
    for name in ["sentences", "word-counts", "view-ROCKETMQ-COUNT-4-shuffleTopic",
                 "view-ROCKETMQ-COUNT-4-shuffleTopic-stateTopic", "SHUFFLE_SINK-4", "SHUFFLE_SOURCE-4",
                 "COUNT-4", "SINK-6"]:
        assert name in unescape(view.value), name  # dot writes "-" as "&#45;"
    assert view.model_id  # a real widget, with a comm (a dummy one outside a kernel)


def test_logical_graph_has_no_shuffle_topic(wordcount_builder: Any) -> None:
    svg = topology_svg(wordcount_builder("view").build(), graph="logical")
    assert "count" in svg and "sentences" in svg
    assert "shuffleTopic" not in svg


def test_bad_arguments_say_what_was_wrong(wordcount_builder: Any) -> None:
    with pytest.raises(ValueError, match="graph must be one of .*got 'physical'"):
        topology_svg(wordcount_builder("view").build(), graph="physical")
    with pytest.raises(TypeError, match="needs a Topology .*got StreamBuilder"):
        topology_view(wordcount_builder("view"))  # type: ignore[arg-type]
