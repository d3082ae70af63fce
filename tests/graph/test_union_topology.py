"""How the second build lays out a union (one union node per pipeline its inputs run in, what follows
copied into each up to the next shuffle) and a map or filter between a window and its aggregation."""

from __future__ import annotations

import html

from rstream import JsonDeserializer, StreamBuilder, TumblingWindow


def two_regions() -> StreamBuilder:
    b = StreamBuilder("regions", shuffle_queues=2)
    eu = b.source("eu", JsonDeserializer())
    us = b.source("us", JsonDeserializer())
    big, small = eu.filter(lambda o: o["n"] > 9), eu.filter(lambda o: o["n"] <= 9)
    (big.union(small, us).select_timestamp(lambda o: o["ts"]).key_by(lambda o: o["sku"])
     .window(TumblingWindow(1000)).count().to_rstream().sink("out"))
    return b


def test_a_union_of_two_topics_is_one_node_in_each_pipeline_and_the_window_topic_has_both_as_producers() -> None:
    topo = two_regions().build()
    unions = [n for n in topo.nodes if n.kind == "union"]
    assert [(n.name, n.pipeline) for n in unions] == [("UNION-5@eu", "eu"), ("UNION-5@us", "us")]
    eu_filters = [n for n in topo.nodes if n.kind == "filter"]
    assert all(c is unions[0] for f in eu_filters for c in f.children)  # both EU branches feed EU's union
    stamps = [n for n in topo.nodes if n.kind == "select_timestamp"]
    assert [n.pipeline for n in stamps] == ["eu", "us"]  # what follows the union, in each pipeline
    window_topic = "regions-ROCKETMQ-COUNT-9-shuffleTopic"
    assert topo.framed_topics == [window_topic] and topo.framed_by_sources
    assert topo.producers(window_topic, {"eu": 2, "us": 1}) == [
        "eu/0/SHUFFLE_SINK-9@eu", "eu/1/SHUFFLE_SINK-9@eu", "us/0/SHUFFLE_SINK-9@us"]
    assert [n.kind for n in topo.pipeline_nodes(window_topic)] == ["shuffle_source", "count", "to_rstream", "sink"]
    text = topo.describe()
    assert "union            UNION-5@eu" in text and "union            UNION-5@us" in text
    dot = html.unescape(topo.real_dot())
    assert "UNION-5@eu" in dot and "UNION-5@us" in dot and window_topic in dot
    assert len({n.name for n in topo.nodes}) == len(topo.nodes)  # every copy has a name of its own


def test_copies_after_a_union_in_a_shuffle_topic_s_pipeline_are_named_by_its_operator() -> None:
    b = StreamBuilder("mixed")
    counts = b.source("in").key_by(len).count().to_rstream()
    counts.union(b.source("other")).map(str).sink("out")
    topo = b.build()
    assert sorted(n.name for n in topo.nodes if n.kind == "map") == ["MAP-7@COUNT-3", "MAP-7@other"]


def test_a_union_inside_one_pipeline_is_one_node_with_several_parents() -> None:
    b = StreamBuilder("branches")
    words = b.source("in").flat_map(str.split)
    words.filter(str.isupper).union(words.map(str.upper)).sink("out")
    topo = b.build()
    union = next(n for n in topo.nodes if n.kind == "union")
    parents = [n for n in topo.nodes if union in n.children]
    assert sorted(p.kind for p in parents) == ["filter", "map"]
    assert list(topo.pipelines) == ["in"] and [n.kind for n in topo.nodes].count("sink") == 1


def test_a_join_after_a_union_shuffles_every_copy_of_each_side_with_its_side() -> None:
    b = StreamBuilder("joined")
    left = b.source("a").union(b.source("b"))
    right = b.source("c")
    left.join(right).where(len).equal_to(len).apply(lambda x, y: (x, y)).sink("pairs")
    topo = b.build()
    sinks = [(n.name, n.pipeline, n.params["side"]) for n in topo.nodes if n.kind == "shuffle_sink"]
    assert sinks == [("SHUFFLE_SINK_LEFT-5@a", "a", 0), ("SHUFFLE_SINK_LEFT-5@b", "b", 0), ("SHUFFLE_SINK_RIGHT-5", "c", 1)]


def test_a_map_and_filter_between_window_and_aggregation_run_before_the_shuffle() -> None:
    b = StreamBuilder("wmap", shuffle_queues=2)
    (b.source("in", JsonDeserializer()).key_by(lambda o: o["k"]).window(TumblingWindow(1000))
     .filter(lambda o: o["ok"]).map(lambda o: o["n"]).avg().to_rstream().sink("out"))
    topo = b.build()
    assert [n.kind for n in topo.pipeline_nodes("in")] == ["source", "key_by", "filter", "map", "shuffle_sink"]
    avg = next(n for n in topo.nodes if n.kind == "avg")
    assert avg.windowed and avg.params["window"].describe() == TumblingWindow(1000).describe()
    assert topo.framed_topics == ["wmap-ROCKETMQ-AVG-6-shuffleTopic"]
    assert "window" not in [n.kind for n in topo.nodes]
