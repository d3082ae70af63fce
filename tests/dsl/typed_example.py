"""Checked by mypy in tests/dsl/test_dsl.py: the DSL's generic types flow through each call."""

from __future__ import annotations

from typing import Any

from typing_extensions import assert_type

from rstream import (
    GroupedStream,
    JoinResultStream,
    LateRecord,
    RStream,
    RTable,
    StreamBuilder,
    TableJoinedStream,
    TumblingWindow,
)

builder = StreamBuilder("typed")
lines: RStream[Any, str] = builder.source("t")
lengths = lines.map(len)
assert_type(lengths, RStream[Any, int])
words = lines.flat_map(str.split)
assert_type(words, RStream[Any, str])
by_word = words.key_by(lambda w: w.lower())
assert_type(by_word, GroupedStream[str, str])
counts = by_word.count()
assert_type(counts, GroupedStream[str, int])
total = by_word.sum(len)
assert_type(total, GroupedStream[str, int])
assert_type(counts.to_rstream(), RStream[str, int])
assert_type(counts.map(float), GroupedStream[str, float])
assert_type(lines.union(lines.map(str.upper)), RStream[Any, Any])
assert_type(by_word.flat_map(list), GroupedStream[str, str])
assert_type(by_word.count(len), GroupedStream[str, int])
table = counts.to_table()
assert_type(table, RTable[str, int])
assert_type(table.to_stream(), RStream[str, int | None])
assert_type(lengths.join(table), TableJoinedStream[int, int])
assert_type(lengths.left_join(table).where(str).apply(lambda n, c: (n, c)), RStream[Any, tuple[int, int | None]])
joined = lines.join(lengths).where(len).equal_to(lambda n: n).window(TumblingWindow(1000)).apply(lambda s, n: s)
assert_type(joined, JoinResultStream[Any, str])
assert_type(joined.late(), RStream[Any, LateRecord])
