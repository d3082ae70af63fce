"""The folds on their own: each against a plain Python reference, and merging two halves equals
folding the whole (what combining before the shuffle and merging sessions rely on)."""

from __future__ import annotations

import functools
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import Accumulator
from rstream.processors.fold import (
    AccumulatorFold,
    AvgFold,
    CountFold,
    Fold,
    MaxFold,
    MinFold,
    ReduceFold,
    SumFold,
)

NUMBERS = st.lists(st.integers(-1000, 1000), min_size=1, max_size=40)


def fold_all(fold: Fold, values: list[Any]) -> Any:
    acc = fold.initial()
    for v in values:
        acc = fold.add(acc, fold.extract(v))
    return acc


class Spread(Accumulator[int, list[int], int]):
    def initial(self) -> list[int]:
        return [10**9, -(10**9)]

    def add(self, acc: list[int], value: int) -> list[int]:
        return [min(acc[0], value), max(acc[1], value)]

    def merge(self, a: list[int], b: list[int]) -> list[int]:
        return [min(a[0], b[0]), max(a[1], b[1])]

    def result(self, acc: list[int]) -> int:
        return acc[1] - acc[0]


CASES = [
    ("count", lambda: CountFold(), len),
    ("sum", lambda: SumFold(lambda v: v * 2), lambda vs: sum(v * 2 for v in vs)),
    ("min", lambda: MinFold(abs), lambda vs: min(abs(v) for v in vs)),
    ("max", lambda: MaxFold(lambda v: -v), lambda vs: max(-v for v in vs)),
    ("avg", lambda: AvgFold(lambda v: v), statistics.fmean),
    ("reduce", lambda: ReduceFold(lambda a, b: a * 3 + b), lambda vs: functools.reduce(lambda a, b: a * 3 + b, vs)),
    ("aggregate", lambda: AccumulatorFold(Spread()), lambda vs: max(vs) - min(vs)),
]


@pytest.mark.parametrize(("name", "make", "reference"), CASES, ids=[c[0] for c in CASES])
@settings(deadline=None)
@given(values=NUMBERS)
def test_fold_equals_reference(name: str, make: Any, reference: Any, values: list[int]) -> None:
    fold = make()
    got = fold.result(fold_all(fold, values))
    assert got == pytest.approx(reference(values)), f"{name} over {values}"


ASSOCIATIVE = [c for c in CASES if c[0] not in ("reduce",)]


@pytest.mark.parametrize(("name", "make", "reference"), ASSOCIATIVE, ids=[c[0] for c in ASSOCIATIVE])
@settings(deadline=None)
@given(values=NUMBERS, cut=st.integers(0, 40))
def test_merging_two_halves_equals_folding_the_whole(name: str, make: Any, reference: Any, values: list[int],
                                                     cut: int) -> None:
    fold = make()
    cut = min(cut, len(values))
    merged = fold.merge(fold_all(fold, values[:cut]), fold_all(fold, values[cut:]))
    assert fold.result(merged) == pytest.approx(reference(values)), f"{name}: {values[:cut]} + {values[cut:]}"


def test_reduce_merges_in_order() -> None:
    fold = ReduceFold(lambda a, b: a + b)
    assert fold.merge(fold_all(fold, ["a", "b"]), fold_all(fold, ["c"])) == "abc"
    assert fold.merge(fold.initial(), "x") == "x" and fold.merge("x", fold.initial()) == "x"
