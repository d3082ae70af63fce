"""What the driver of ``tests/cluster/test_rstream_on_cluster.py`` sends, shared by the test and the
driver it starts in a subprocess."""

from __future__ import annotations

ROUNDS = 6
KILL_AFTER = 3  # rounds processed before an executor is killed


def sentences(round_: int) -> list[str]:
    return [f"w{(round_ * 7 + i) % 11} w{i % 5} w{(i * 3) % 13} w{round_}" for i in range(40)]
