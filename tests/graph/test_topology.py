from __future__ import annotations

import html
import re
import shutil
from typing import Any

import graphviz
import pytest

from rstream import (
    Accumulator,
    SessionWindow,
    StreamBuilder,
    TextDeserializer,
    TextSerializer,
    TumblingWindow,
)
from rstream.graph.style import FIT_WIDTH_PX, svg_size


def wordcount() -> StreamBuilder:
    b = StreamBuilder("wc")
    (b.source("sentences", TextDeserializer()).flat_map(str.split).key_by(lambda w: w)
     .count().to_rstream().sink("counts", TextSerializer(with_key=True)))
    return b


def test_every_dsl_call_adds_a_logical_node_at_once() -> None:
    b = StreamBuilder("wc")
    s = b.source("sentences")
    assert [n.kind for n in b.graph] == ["source"]
    words = s.flat_map(str.split)
    assert len(b.graph) == 2 and "flat_map" in b.logical_dot()
    words.key_by(lambda w: w).count()
    assert [n.kind for n in b.graph] == ["source", "flat_map", "key_by", "count"]
    assert [n.name for n in b.graph] == ["SOURCE-1", "FLAT_MAP-2", "KEY_BY-3", "COUNT-4"]


def test_wordcount_real_topology_names_rip58_topics() -> None:
    topo = wordcount().build(combine=False)
    shuffle = "wc-ROCKETMQ-COUNT-4-shuffleTopic"
    assert topo.source_topics == ["sentences"]
    assert topo.shuffle_topics == {shuffle: 8}
    assert topo.state_topics == {shuffle: f"{shuffle}-stateTopic"}
    assert topo.sink_topics == ["counts"]
    assert [n.kind for n in topo.pipeline_nodes("sentences")] == ["source", "flat_map", "key_by", "shuffle_sink"]
    assert [n.kind for n in topo.pipeline_nodes(shuffle)] == ["shuffle_source", "count", "to_rstream", "sink"]
    dot = topo.real_dot()
    for name in ("sentences", shuffle, f"{shuffle}-stateTopic", "counts"):
        assert f'"{name}"' in dot or f"={name} " in dot or f"label={name}" in dot, name
    text = topo.describe()
    assert "consumes source topic sentences" in text and f"consumes shuffle topic {shuffle}" in text
    assert "state topic" in text


def test_the_combine_rewrite_inserts_a_node_of_its_own_before_the_shuffle_sink() -> None:
    """``build()`` (combine on) puts a COMBINE node between key_by and the shuffle sink, drawn with its
    own shape and a label that says what it sends; RIP-58's shape has none. The topics are the same."""
    plain, combined = wordcount().build(combine=False), wordcount().build()
    assert [n.kind for n in combined.pipeline_nodes("sentences")] == [
        "source", "flat_map", "key_by", "combine", "shuffle_sink"]
    assert (plain.shuffle_topics, plain.state_topics) == (combined.shuffle_topics, combined.state_topics)
    node = next(n for n in combined.nodes if n.kind == "combine")
    assert node.name == "COMBINE-4" and "counts per key" in node.label
    assert node.spec.style.shape not in {n.spec.style.shape for n in plain.nodes}
    assert "COMBINE-4" in combined.real_dot() and "COMBINE" not in plain.real_dot()
    assert "combine" in combined.describe() and "combine" not in plain.describe()


@pytest.mark.parametrize(("stream", "combines"), [
    (lambda s: s.key_by(len).count(), True),
    (lambda s: s.key_by(len).sum(len), True),  # (passes records on unless aggregate_emit="batch": its label says so)
    (lambda s: s.key_by(len).window(TumblingWindow(10)).count(), True),
    (lambda s: s.key_by(len).window(SessionWindow(10)).count(), False),
    (lambda s: s.key_by(len).window(TumblingWindow(10)).sum(len), False),
])
def test_a_combine_node_goes_where_the_aggregation_allows_it(stream: Any, combines: bool) -> None:
    b = StreamBuilder("c")
    stream(b.source("t")).to_rstream().sink("out")
    assert any(n.kind == "combine" for n in b.build().nodes) is combines
    assert not any(n.kind == "combine" for n in b.build(combine=False).nodes)


def test_build_says_what_combine_must_be() -> None:
    with pytest.raises(Exception, match="combine must be True or False"):
        wordcount().build(combine="yes")  # type: ignore[arg-type]


def test_shuffle_queue_count_follows_the_builder() -> None:
    b = StreamBuilder("j", shuffle_queues=3)
    b.source("t").key_by(lambda v: v).sum(len)
    assert b.build().shuffle_topics == {"j-ROCKETMQ-SUM-3-shuffleTopic": 3}


def test_one_stream_feeds_several_branches_and_sinks() -> None:
    b = StreamBuilder("branches")
    words = b.source("in").flat_map(str.split)
    words.filter(lambda w: len(w) > 3).sink("long")
    words.map(str.upper).sink("upper")
    counts = words.key_by(lambda w: w).count()
    counts.sink("counts")
    counts.map(lambda c: c * 10).to_rstream().sink("tens")
    topo = b.build()
    assert sorted(topo.sink_topics) == ["counts", "long", "tens", "upper"]
    flat = next(n for n in topo.nodes if n.kind == "flat_map")
    assert sorted(c.kind for c in flat.children) == ["filter", "key_by", "map"]
    count = next(n for n in topo.nodes if n.kind == "count")
    assert sorted(c.kind for c in count.children) == ["map", "sink"]
    logical = b.logical_dot()
    assert logical.count("->") == sum(len(n.children) for n in b.graph)


def test_graphs_are_digraphs_and_render_to_svg() -> None:
    topo = wordcount().build()
    assert isinstance(topo.real_graph(), graphviz.Digraph)
    assert isinstance(topo.logical_graph(), graphviz.Digraph)
    if shutil.which("dot") is None:
        pytest.fail("the graphviz dot binary is missing: the README's setup installs it")
    svg = html.unescape(topo.real_graph().pipe(format="svg").decode())
    assert svg.lstrip().startswith("<?xml") and "wc-ROCKETMQ-COUNT-4-shuffleTopic" in svg
    bundle = topo._repr_mimebundle_()
    assert bundle["text/plain"] == topo.describe()
    assert "wc-ROCKETMQ-COUNT-4-shuffleTopic" in html.unescape(bundle["text/html"])


def test_graphs_fit_a_notebook_output_area() -> None:
    """Left to right the word count's real topology is about 1900 px wide: it is laid out top to
    bottom instead, and every rendered graph scales down to its container, never up."""
    topo = wordcount().build()
    wide = topo.real_graph(rankdir="LR").pipe(format="svg", encoding="utf-8")
    assert svg_size(wide)[0] > FIT_WIDTH_PX
    fitted = topo.real_svg()
    assert fitted.startswith('<svg style="width:100%;max-width:')
    drawn = float(re.search(r"max-width:(\d+)px", fitted).group(1))  # type: ignore[union-attr]
    assert drawn <= FIT_WIDTH_PX and 'viewBox="' in fitted
    small = StreamBuilder("s")
    small.source("in").sink("out")
    logical = small.graph.to_svg()
    assert float(re.search(r"max-width:(\d+)px", logical).group(1)) < 500  # type: ignore[union-attr]
    assert small._repr_mimebundle_()["text/html"] == logical


def test_aggregate_and_chained_shuffles() -> None:
    class Avg(Accumulator):
        def initial(self):  # type: ignore[no-untyped-def]
            return (0, 0)

        def add(self, acc, value):  # type: ignore[no-untyped-def]
            return (acc[0] + value, acc[1] + 1)

        def result(self, acc):  # type: ignore[no-untyped-def]
            return acc[0] / acc[1]

    b = StreamBuilder("two")
    counts = b.source("in").key_by(lambda v: v).aggregate(Avg())
    counts.to_rstream().key_by(lambda v: v).count().sink("out")
    topo = b.build()
    assert list(topo.shuffle_topics) == ["two-ROCKETMQ-AGGREGATE-3-shuffleTopic", "two-ROCKETMQ-COUNT-6-shuffleTopic"]
    assert topo.input_topics == ["in", *topo.shuffle_topics]


def test_window_topics_written_by_sources_only() -> None:
    """A window or join topic fed straight from a source can get its end-of-input flush as soon as the
    sources are read; one fed by another shuffle stage (here a count's results) cannot."""
    from rstream import JsonDeserializer, TumblingWindow

    def events(b: StreamBuilder) -> Any:
        return b.source("in", JsonDeserializer()).select_timestamp(lambda e: e["ts"])

    direct = StreamBuilder("direct")
    events(direct).key_by(lambda e: e["k"]).window(TumblingWindow(10)).count().to_rstream().sink("out")
    topo = direct.build()
    assert topo.framed_topics and topo.framed_by_sources

    chained = StreamBuilder("chained")
    counts = events(chained).key_by(lambda e: e["k"]).count().to_rstream()
    counts.key_by(lambda kv: kv).window(TumblingWindow(10)).count().to_rstream().sink("out")
    topo = chained.build()
    assert topo.framed_topics and not topo.framed_by_sources

    plain = StreamBuilder("plain")
    plain.source("in").key_by(lambda v: v).count().to_rstream().sink("out")
    assert plain.build().framed_by_sources  # no window topic at all
