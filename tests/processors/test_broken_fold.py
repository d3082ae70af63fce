"""The in-process tests catch a broken fold: break one on purpose and the comparison with the
reference fails (the tests above would go red the same way)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker
from rstream.processors.fold import SumFold
from tests.support.inprocess import emitted, keyed, produce, records, run


def sums(tmp_path: Path, emit: str) -> tuple[dict[str, int], dict[str, int]]:
    broker = EmbeddedBroker(tmp_path / emit / "broker")
    per_queue = produce(broker, "in", records(["ant", "bee", "ant", "cat", "ant"] * 4, seed=1), queues=2)
    run(keyed(f"sum-{emit}", "sum", lambda r: r["n"]), broker, tmp_path / emit, aggregate_emit=emit,
        max_records_per_queue=3)
    expected: dict[str, int] = {}
    for recs in per_queue.values():
        for r in recs:
            expected[r["k"]] = expected.get(r["k"], 0) + r["n"]
    return {k: v[-1] for k, v in emitted(broker, "out").items()}, expected


@pytest.mark.parametrize(("method", "emit"), [("add", "record"), ("merge", "batch")])
def test_a_deliberately_broken_fold_is_caught(tmp_path: Path, monkeypatch: Any, method: str, emit: str) -> None:
    got, expected = sums(tmp_path / "good", emit)
    assert got == expected
    original = getattr(SumFold, method)
    monkeypatch.setattr(SumFold, method, lambda self, a, b: original(self, a, b) + 1 if b is not None else a)
    got, expected = sums(tmp_path / "broken", emit)
    assert got != expected
