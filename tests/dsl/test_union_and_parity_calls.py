"""The DSL calls of ``union`` and of the RocketMQ Streams 1.1 parity operators: what each adds to the
logical graph, and the errors bad arguments get (each naming the problem and what to do)."""

from __future__ import annotations

import pytest

from rstream import DslError, StreamBuilder, TumblingWindow


def test_union_adds_one_node_fed_by_every_input() -> None:
    b = StreamBuilder("u")
    eu, us, asia = b.source("eu"), b.source("us"), b.source("asia")
    merged = eu.union(us, asia)
    node = merged.node
    assert node.kind == "union" and [p.name for p in node.parents] == ["SOURCE-1", "SOURCE-2", "SOURCE-3"]
    assert node.params["detail"] == "3 streams"
    assert all(node in p.children for p in node.parents)
    assert "union" in b.logical_dot()


def test_union_refuses_what_it_cannot_merge() -> None:
    b = StreamBuilder("u")
    s = b.source("in")
    grouped = s.key_by(len)
    with pytest.raises(DslError, match=r"argument 1 is a GroupedStream: call \.to_rstream\(\) on it first"):
        s.union(grouped)  # type: ignore[arg-type]
    with pytest.raises(DslError, match=r"argument 2 is a WindowStream: call \.to_rstream\(\)"):
        s.union(s, grouped.window(TumblingWindow(10)))  # type: ignore[arg-type]
    with pytest.raises(DslError, match="argument 1 is a str: pass streams made by builder.source"):
        s.union("in")  # type: ignore[arg-type]
    other = StreamBuilder("other").source("in")
    with pytest.raises(DslError, match=r"comes from StreamBuilder 'other', this stream from 'u': read both topics "
                                       r"with one builder"):
        s.union(other)
    with pytest.raises(TypeError):
        s.union()  # type: ignore[call-arg]
    assert [n.kind for n in b.graph] == ["source", "key_by", "window"]  # nothing added by a refused call


def test_parity_calls_add_their_nodes() -> None:
    b = StreamBuilder("p")
    ws = b.source("in").key_by(len).window(TumblingWindow(1000))
    assert ws.filter(bool).map(len).avg().node.kind == "avg"
    assert [n.kind for n in b.graph][-3:] == ["filter", "map", "avg"]
    grouped = b.source("in2").key_by(len)
    assert grouped.flat_map(str.split).node.kind == "flat_map"
    assert grouped.count(len).node.kind == "count"
    with pytest.raises(DslError, match="count needs a function"):
        grouped.count(42)  # type: ignore[arg-type]
    with pytest.raises(DslError, match="filter needs a function"):
        ws.filter(None)  # type: ignore[arg-type]
    with pytest.raises(DslError, match="avg needs a function"):
        ws.avg("amount")  # type: ignore[arg-type]
