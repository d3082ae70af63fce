"""Every speed path of the real topology is a named rewrite (``builder.build(optimize=...)``), drawn with
the topology, and none changes a result: every kind of job (``tests.support.batch_cuts``) gives the
same sink records with each rewrite off, and with none at all (RIP-58's topology), as with all on."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import DslError, StreamBuilder
from rstream.processors.rewrites import ALL
from tests.support.batch_cuts import JOBS, differences, inputs, run_cut


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(JOBS)), seed=st.integers(0, 10_000), n=st.integers(5, 40),
       off=st.sampled_from([*sorted(ALL), "all"]), cap=st.sampled_from([3, 10**6]))
def test_every_job_gives_the_same_records_with_a_rewrite_off(name: str, seed: int, n: int, off: str, cap: int) -> None:
    data = inputs(seed, n)
    with tempfile.TemporaryDirectory() as tmp:
        on = run_cut([name], data, Path(tmp) / "on", cap)
        without = run_cut([name], data, Path(tmp) / "off", cap, optimize=() if off == "all" else ALL - {off})
    assert not differences(on, without), f"{name} without {off!r}:\n" + "\n".join(differences(on, without)[:8])


def test_the_rewrites_are_drawn_and_named_and_an_unknown_one_is_refused() -> None:
    b = StreamBuilder("drawn")
    b.source("clicks").key_by(str).count().to_rstream().sink("counts")
    assert "rewrites: chunks, combine, fire to sink, shuffle in source" in b.build().real_dot()
    plain = b.build(optimize=())
    assert "real topology (no rewrites)" in plain.real_dot() and "COMBINE" not in plain.real_dot()
    assert b.build(optimize=["chunks"]).optimizations == {"chunks"}
    assert "combine" not in b.build(combine=False).optimizations
    with pytest.raises(DslError, match=r"no rewrite named 'fuse'; rstream has 'chunks', 'combine', 'fire to sink', 'shuffle in source'"):
        b.build(optimize=["fuse"])


def test_a_rewrite_left_out_is_not_taken(tmp_path: Path) -> None:
    """Without ``chunks`` a queue's records go record by record; without ``fire to sink`` a window fires
    through ``forward``: neither speed path runs where its rewrite is not named."""
    from unittest import mock

    from rstream import EmbeddedBroker, TumblingWindow
    from rstream.processors.window import WindowAggregateProcessor
    from rstream.runtime.inprocess import InProcessJob
    from rstream.runtime.queue_run import QueueRun

    b = StreamBuilder("paths", shuffle_queues=1)
    b.source("clicks").select_timestamp(int).key_by(str).window(TumblingWindow(10)).count().to_rstream().sink("n")
    plans: list[bool] = []
    fired: list[bool] = []
    make, fire = QueueRun.__init__, WindowAggregateProcessor._fire_to_sink

    def made(run: QueueRun, *args: object, **kwargs: object) -> None:
        make(run, *args, **kwargs)  # type: ignore[arg-type]
        plans.append(run.plan is not None)

    def fired_to_sink(window: WindowAggregateProcessor, due: list[object]) -> bool:
        taken = fire(window, due)  # type: ignore[arg-type]
        fired.append(taken)
        return taken

    for i, (optimize, chunked, fired_at_once) in enumerate(
            [(None, True, True), ((), False, False), (ALL - {"fire to sink"}, True, False)]):
        broker = EmbeddedBroker(tmp_path / f"broker-{i}")
        broker.create_topic("clicks", queues=1)
        broker.send_batch("clicks", ["1", "2", "15"])
        plans.clear()
        fired.clear()
        with mock.patch.object(QueueRun, "__init__", made), \
                mock.patch.object(WindowAggregateProcessor, "_fire_to_sink", fired_to_sink):
            InProcessJob(b.build(optimize=optimize), broker, tmp_path / f"job-{i}", {"allowed_lateness_ms": 0}).run_until_idle()
        assert sorted(m.body for m in broker.read("n")) == [b"15@[10,20):1", b"1@[0,10):1", b"2@[0,10):1"]
        assert any(plans) == chunked
        assert any(fired) == fired_at_once
