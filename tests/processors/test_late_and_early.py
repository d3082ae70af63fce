"""``.late()`` and ``window(w, emit="early")`` run in this process (no Spark) against the plain
reference on generated out-of-order clicks sent in steps: the late stream holds exactly the
reference's late clicks and the late-data topic's rows, each once, also through a retried range,
a crash after the commit and a restart with the local state deleted; early results carry the
running aggregate of each window a batch changed, final results equal the reference, and the
default output is byte for byte what it was."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import (
    DslError,
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    LateRecord,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    TextSerializer,
    TumblingWindow,
    WindowResult,
)
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topics import late_topic_name
from tests.support.inprocess import record_by_record, run_through_a_crash_a_retry_and_lost_state
from tests.support.late import (
    EXACT,
    LATENESS,
    as_rows,
    fixed_aggregates,
    late_job,
    late_rows,
    late_stream,
    messages,
    on_time,
    per_queue,
    reference_late,
    session_counts,
    stepped_clicks,
)

pytestmark = pytest.mark.unit

_RUNS = itertools.count()
FAST = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fresh(tmp_path: Path, queues: int) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("clicks", queues=queues)
    return broker, root


def run_steps(builder: StreamBuilder, broker: EmbeddedBroker, root: Path, steps: list[list[dict[str, Any]]],
              **props: Any) -> tuple[InProcessJob, list[list[dict[str, Any]]]]:
    """Send each step's clicks and run the job until it has read them (no idle flush), then flush
    once at the end. Returns the job and, per step (the flush last), the results it emitted."""
    job = InProcessJob(builder.build(), broker, root / "job", {**EXACT, **props})
    seen: set[tuple[int, int]] = set()
    emitted: list[list[dict[str, Any]]] = []

    def new_results() -> list[dict[str, Any]]:
        out = [doc for q, o, doc in messages(broker, "results") if (q, o) not in seen]
        seen.update((q, o) for q, o, _doc in messages(broker, "results"))
        return out

    for step in steps:
        broker.send_batch("clicks", [json.dumps(e) for e in step])
        job.run_until_idle(fire_idle=False)
        emitted.append(new_results())
    job.run_until_idle()
    emitted.append(new_results())
    return job, emitted


def late_topic_rows(broker: EmbeddedBroker, job: str) -> list[dict[str, Any]]:
    """What ``job.late_records()`` reads: the rows of the job's late-data topic."""
    return [doc for _q, _o, doc in messages(broker, late_topic_name(job))]


def check_early_and_final(emitted: list[list[dict[str, Any]]], queues: dict[int, list[dict[str, Any]]],
                          window: Any, value_of: Any) -> None:
    """Per step: each early result is the window's aggregate over the on-time clicks of the steps so
    far; each window that got on-time clicks in a step emits exactly one result then (early, or
    final when it fired in that step); nothing after a window's final; the finals equal the reference."""
    good = on_time(queues)
    session = isinstance(window, SessionWindow)
    finals: dict[tuple[Any, int, int], Any] = {}
    for step, docs in enumerate(emitted):
        so_far = [e for e in good if e["step"] <= step]
        now = (session_counts(so_far, window.gap) if session else
               fixed_aggregates(so_far, window.size, getattr(window, "slide", None), value_of))
        seen_now: dict[tuple[Any, int, int], int] = defaultdict(int)
        for doc in docs:
            wk = tuple(doc["key"])
            value, final = doc["value"]
            assert wk not in finals, f"{wk} emitted after its final result"
            seen_now[wk] += 1
            if final:
                finals[wk] = value
            else:
                assert now.get(wk) == value, f"step {step}: early {wk}={value}, reference {now.get(wk)}"
        assert all(n == 1 for n in seen_now.values()), f"step {step}: a window emitted twice: {dict(seen_now)}"
        if not session:  # (a session that grew in a step is a new window key)
            changed = {wk for e in good if e["step"] == step
                       for wk in fixed_aggregates([e], window.size, getattr(window, "slide", None), value_of)}
            assert changed <= set(seen_now), f"step {step}: changed windows without a result: {changed - set(seen_now)}"
    everything = (session_counts(good, window.gap) if session else
                  fixed_aggregates(good, window.size, getattr(window, "slide", None), value_of))
    assert finals == everything


WINDOWS = st.sampled_from([TumblingWindow(1000), TumblingWindow(5000), SlidingWindow(5000, 2000), SessionWindow(3000)])


@FAST
@given(n=st.integers(1, 70), seed=st.integers(0, 10_000), steps=st.integers(1, 5), queues=st.integers(1, 3),
       window=WINDOWS, agg=st.sampled_from(["count", "sum"]))
def test_early_and_final_results_and_the_late_stream_equal_the_reference(
        tmp_path: Path, n: int, seed: int, steps: int, queues: int, window: Any, agg: str) -> None:
    if isinstance(window, SessionWindow):
        agg = "count"
    broker, root = fresh(tmp_path, queues)
    parts = stepped_clicks(n, seed, steps, spread=30_000, disorder=4000)
    fn = (lambda e: e["amount"]) if agg == "sum" else None
    job, emitted = run_steps(late_job("early", window, "early", agg, fn), broker, root, parts)
    queues_now = per_queue(broker)
    check_early_and_final(emitted, queues_now, window, (lambda e: e["amount"]) if agg == "sum" else (lambda e: 1))
    stream = late_stream(broker)
    assert [s[:5] for s in stream] == reference_late(queues_now)
    assert as_rows(stream) == late_rows(late_topic_rows(broker, "early"))
    assert sum(info.get("late", 0) for info in job.infos) == len(stream)


@FAST
@given(n=st.integers(1, 70), seed=st.integers(0, 10_000), steps=st.integers(1, 4), queues=st.integers(1, 3),
       window=WINDOWS)
def test_the_default_emits_final_values_only_byte_for_byte_as_before(
        tmp_path: Path, n: int, seed: int, steps: int, queues: int, window: Any) -> None:
    """``window(w)``, ``window(w, emit="final")`` and ``window(w)`` with a ``.late()`` beside it write
    the same results, in the same queues and order; the late stream equals the reference."""
    parts = stepped_clicks(n, seed, steps)
    bodies = []
    for emit, late in ((None, False), ("final", False), (None, True)):
        broker, root = fresh(tmp_path, queues)
        run_steps(late_job("plain", window, emit, late=late), broker, root, parts)
        bodies.append([(m.queue_id, m.offset, m.key, m.body) for m in broker.read("results")])
        if late:
            assert [s[:5] for s in late_stream(broker)] == reference_late(per_queue(broker))
    assert bodies[0] == bodies[1] == bodies[2]
    for _q, _o, _k, body in bodies[0]:
        assert not isinstance(json.loads(body)["value"], list)  # plain values, no WindowResult


def test_early_results_on_the_record_by_record_path_equal_the_chunked_ones(tmp_path: Path) -> None:
    """Windows fired one by one through ``forward`` (no chunks, no firing to the sink at once) emit
    what the chunked path emits, byte for byte, late stream included."""
    parts = stepped_clicks(120, 5, 4)
    got = []
    for slow in (False, True):
        broker, root = fresh(tmp_path, 2)
        if slow:
            with record_by_record():
                run_steps(late_job("path", TumblingWindow(2000)), broker, root, parts)
        else:
            run_steps(late_job("path", TumblingWindow(2000)), broker, root, parts)
        got.append([(m.queue_id, m.key, m.body) for t in ("results", "late") for m in broker.read(t)])
    assert got[0] == got[1] and got[0]


def test_the_late_stream_can_be_counted_and_mapped_like_any_stream(tmp_path: Path) -> None:
    """``late().key_by(...).count()`` shuffles the late records again: its counts per user are the
    reference's late clicks per user; ``map`` sees ``LateRecord``s."""
    broker, root = fresh(tmp_path, 2)
    parts = stepped_clicks(150, 11, 3)
    b = StreamBuilder("lcount", shuffle_queues=2)
    counts = (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
              .window(TumblingWindow(3000)).count())
    late = counts.late()
    late.key_by(lambda r: r.key).count().to_rstream().sink("late-counts", TextSerializer(with_key=True))
    late.map(lambda r: f"{type(r).__name__} {r.data_time} {r.late_ms} {r.cause}").sink("late-text", TextSerializer())
    run_steps(b, broker, root, parts)
    expected = reference_late(per_queue(broker))
    assert expected, "the generated clicks have late ones"
    last: dict[str, int] = {}
    for m in broker.read("late-counts"):
        user, _, n = m.body.decode().partition(":")
        last[user] = int(n)
    by_user: dict[str, int] = defaultdict(int)
    for user, *_rest in expected:
        by_user[user] += 1
    assert last == by_user
    text = sorted(m.body.decode() for m in broker.read("late-text"))
    assert text == sorted(f"LateRecord {t} {wm - t} behind watermark" for _u, _v, t, wm, _c in expected)


def test_late_records_come_out_once_through_a_retry_a_crash_after_the_commit_and_lost_state(tmp_path: Path) -> None:
    """A range run again after it committed is skipped (its tag); a task that died after its commit,
    before its local state write, leaves stale state that is replayed; a restart with the local state
    deleted replays it all. The late stream and the final results are those of one clean run."""
    parts = stepped_clicks(200, 3, 6)

    def finals(broker: EmbeddedBroker) -> list[bytes]:
        """The final results; and each window's early counts grow (a result repeated would not)."""
        early: dict[tuple[Any, ...], list[int]] = defaultdict(list)
        out = []
        for m in broker.read("results"):
            doc = json.loads(m.body)
            if doc["value"][1]:
                out.append(m.body)
            else:
                early[tuple(doc["key"])].append(doc["value"][0])
        assert all(counts == sorted(set(counts)) for counts in early.values()), early
        return sorted(out)

    def clean() -> tuple[list[Any], list[Any]]:
        broker, root = fresh(tmp_path, 2)
        run_steps(late_job("once", TumblingWindow(2000)), broker, root, parts, max_records_per_queue=15)
        return finals(broker), late_stream(broker)

    want_results, want_late = clean()
    broker, root = fresh(tmp_path, 2)
    props = {**EXACT, "max_records_per_queue": 15}
    job = InProcessJob(late_job("once", TumblingWindow(2000)).build(), broker, root / "job", props)
    run_through_a_crash_a_retry_and_lost_state(
        job, parts, lambda step: broker.send_batch("clicks", [json.dumps(e) for e in step]), root, props)
    assert finals(broker) == want_results  # (early ones depend on where batches begin, which the crash moved)
    assert late_stream(broker) == want_late
    assert [s[:5] for s in want_late] == reference_late(per_queue(broker))
    assert as_rows(want_late) == late_rows(late_topic_rows(broker, "once"))


def test_graphs_draw_the_late_stream_and_early_windows() -> None:
    b = late_job("drawn", TumblingWindow(1000), "early")
    logical = b.build().logical_dot()
    assert "emit early" in logical and 'tooltip="LATE-8"' in logical
    assert '[label=late style=dashed]' in logical
    topo = b.build()
    text = topo.describe()
    assert "[tumbling Time.seconds(1) emit early]" in text and "(late)" in text
    real = topo.real_dot()
    assert "LATE-" in real and '[label=late style=dashed]' in real and "emit early" in real
    plain = late_job("drawn", TumblingWindow(1000), None, late=False).build()
    final = late_job("drawn", TumblingWindow(1000), "final", late=False).build()
    assert plain.real_dot() == final.real_dot() and plain.logical_dot() == final.logical_dot()
    assert "emit" not in plain.real_dot() and "late" not in plain.real_dot()


def test_wrong_use_says_what_to_do() -> None:
    b = StreamBuilder("bad")
    grouped = b.source("clicks", JsonDeserializer()).key_by(lambda e: e["user"])
    with pytest.raises(DslError, match=r"late\(\) needs a windowed aggregation.*COUNT-3.*window\(w\)\.count\(\)\.late\(\)"):
        grouped.count().late()
    with pytest.raises(DslError, match=r"on the windowed aggregation, not on the window"):
        grouped.window(TumblingWindow(1000)).late()
    with pytest.raises(DslError, match=r"emit must be 'final'.*or 'early'.*got 'sometimes'"):
        grouped.window(TumblingWindow(1000), emit="sometimes")


def test_result_and_late_record_types_read_well() -> None:
    assert str(WindowResult(3, False)) == "3 (early)" and str(WindowResult(3, True)) == "3 (final)"
    assert WindowResult(3, True).final and WindowResult(3, True).value == 3
    from rstream.processors.base import LateCause

    r = LateRecord("u1", {"ts": 5}, 5, 2005, LateCause.BEHIND_WATERMARK, "why", "COUNT-5")
    assert r.late_ms == LATENESS and r.cause == "behind watermark"
    assert str(r) == "{'ts': 5} at 5: behind watermark, watermark 2005 (COUNT-5)"


@pytest.mark.parametrize("slow", [False, True], ids=["chunked", "record by record"])
def test_a_function_after_late_that_raises_makes_a_dead_letter_of_that_late_record(tmp_path: Path, slow: bool) -> None:
    """The window's results and the other late records go on, on either path; a dead letter each."""
    broker, root = fresh(tmp_path, 2)
    parts = stepped_clicks(150, 11, 3)
    b = StreamBuilder("lraise", shuffle_queues=2)
    counts = (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
              .window(TumblingWindow(3000)).count())
    counts.to_rstream().sink("results", JsonSerializer(with_key=True))
    counts.late().map(lambda r: r.data_time if r.data_time % 2 else 1 // 0).sink("late", TextSerializer())
    if slow:
        with record_by_record():
            job, _emitted = run_steps(b, broker, root, parts)
    else:
        job, _emitted = run_steps(b, broker, root, parts)
    expected = reference_late(per_queue(broker))
    odd = sorted(t for _u, _v, t, _wm, _c in expected if t % 2)
    assert sorted(int(m.body) for m in broker.read("late")) == odd
    dead = broker.read(job.cfg.dlq_topic)
    assert len(dead) == len(expected) - len(odd)
    assert all("ZeroDivisionError" in m.headers["rstream-dlq-error"] for m in dead)
    good = on_time(per_queue(broker))
    assert sum(json.loads(m.body)["value"] for m in broker.read("results")) == len(good)


def test_early_results_after_a_window_filter_and_the_late_stream_of_what_it_kept(tmp_path: Path) -> None:
    """``window(w, emit="early").filter(f).count()``: the filter runs before the window, so the
    results and the late stream are the reference's over the kept clicks only."""
    broker, root = fresh(tmp_path, 2)
    parts = stepped_clicks(160, 23, 4)
    b = StreamBuilder("wfilter", shuffle_queues=2)
    counts = (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
              .window(TumblingWindow(2000), emit="early").filter(lambda e: e["amount"] > 20).count())
    counts.to_rstream().sink("results", JsonSerializer(with_key=True))
    counts.late().sink("late", JsonSerializer(with_key=True))
    assert "emit early" in b.build().describe()
    _job, emitted = run_steps(b, broker, root, parts)
    kept = {q: [e for e in records if e["amount"] > 20] for q, records in per_queue(broker).items()}
    # the filter runs before the shuffle sink, where the watermark is kept: lateness is judged by the kept clicks
    assert [s[:5] for s in late_stream(broker)] == reference_late(kept)
    check_early_and_final(emitted, kept, TumblingWindow(2000), lambda e: 1)
    assert any(not d["value"][1] for docs in emitted for d in docs)
