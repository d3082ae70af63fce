"""``topology_view``: the real topology as SVG in an ``ipywidgets.HTML`` (no kernel, no Spark)."""

from __future__ import annotations

from html import unescape
from typing import Any

import ipywidgets
import pytest

from rstream.widgets import topology_svg, topology_view


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


def test_live_counters_on_the_real_topology(finished_job: Any) -> None:
    from tests.support.widgets import SENTENCES
    from widgets import TopologyMonitor

    words = sum(len(s.split()) for s in SENTENCES if s != "boom")  # "boom" raises in flat_map: skipped
    totals = finished_job.operator_totals()
    assert totals["SOURCE-1"]["records_in"] == len(SENTENCES)
    assert totals["KEY_BY-3"]["records_in"] == totals["COUNT-4"]["records_in"] == words
    svg = unescape(TopologyMonitor(finished_job).graph.value)
    assert f">{len(SENTENCES)} in<" in svg and f">{words} in<" in svg  # each a text line of its node


def test_live_counters_show_windows_and_late_records(held_back_job: Any) -> None:
    job, _ = held_back_job
    totals = job.operator_totals()
    window_op = next(n.name for n in job.topology.nodes if n.windowed)
    assert totals[window_op]["windows_fired"] == 2 and totals[window_op]["late"] == 1
    svg = unescape(topology_svg(job.topology, counters=totals))
    assert f"{totals[window_op]['windows_open']} open · 2 fired · 1 late" in svg


def test_topology_snapshot_table(finished_job: Any) -> None:
    from widgets import TopologySnapshot

    snap = TopologySnapshot.of(finished_job)
    table = snap.to_pandas().set_index("operator")
    assert list(table.index) == [n.name for n in finished_job.topology.nodes]
    assert table.loc["SOURCE-1", "records_in"] == 4 and table.loc["COUNT-4", "kind"] == "count"
    assert snap._repr_html_().startswith("<svg")
