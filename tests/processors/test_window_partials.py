"""A count over tumbling or sliding windows combines before the shuffle (``build(combine=True)``, the
default): each source range sends one partial per key, counted per window, and late records alone.
Run in this process (no Spark), the same generated input with it on and off gives the same window
results, the same late records (with their values, times, source offsets and reasons) and the same
state, also where a partial comes for a window that already fired, so its records must be found again."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    SlidingWindow,
    StreamBuilder,
    TumblingWindow,
)
from rstream.runtime.inprocess import InProcessJob
from rstream.shuffle.wire import PARTIAL_HEADER
from tests.support.inprocess import results
from tests.support.partials import FAST, flow, run_phases, state_of
from tests.support.reference import split_late, window_frame


def windowed(job: str, window: Any, copies: int = 1, poison: bool = False) -> StreamBuilder:
    """Clicks counted per user and window; ``copies``: each click counted that many times (a flat_map
    before the shuffle); ``poison``: a click of user "boom" raises in key_by (a dead letter)."""

    def user(e: dict[str, Any]) -> str:
        if poison and e["user"] == "boom":
            raise ValueError("boom")
        return str(e["user"])

    b = StreamBuilder(job, shuffle_queues=2)
    stream = b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    if copies > 1:
        stream = stream.flat_map(lambda e: [dict(e, copy=i) for i in range(copies)])
    (stream.key_by(user).window(window).count().to_rstream().sink("results", JsonSerializer(with_key=True)))
    return b


def late_rows(broker: EmbeddedBroker, job: InProcessJob) -> list[tuple[Any, ...]]:
    """Every late record's row but where it sat in the shuffle topic (which differs by design)."""
    topic = f"{job.topology.job_id}-late"
    if not broker.has_topic(topic):
        return []
    rows = [json.loads(m.body) for m in broker.read(topic)]
    fields = ("operator", "key", "value", "data_time", "watermark", "late_ms", "cause", "reason", "topic", "queue",
              "offset")
    return sorted(tuple(row[f] for f in fields) for row in rows)


def dead_letters(broker: EmbeddedBroker, job: InProcessJob) -> list[tuple[Any, ...]]:
    """Every dead letter's topic, queue, offset, operator and error."""
    from rstream.processors.base import dead_letter_row

    topic = f"{job.topology.job_id}-dlq"
    rows = [dead_letter_row(m) for m in broker.read(topic)] if broker.has_topic(topic) else []
    return sorted((r["topic"], r["queue"], r["offset"], r["operator"], r["error"]) for r in rows)


def partials(broker: EmbeddedBroker, job: InProcessJob) -> int:
    return sum(1 for t in job.topology.framed_topics for m in broker.read(t) if PARTIAL_HEADER in (m.headers or {}))


def both(tmp_path: Path, builder: Any, phases: list[list[dict[str, Any]]], queues: int,
         **props: Any) -> tuple[tuple[EmbeddedBroker, InProcessJob], tuple[EmbeddedBroker, InProcessJob]]:
    return (run_phases(tmp_path, builder, phases, queues, combine=True, **props),
            run_phases(tmp_path, builder, phases, queues, combine=False, **props))


def clicks(rng: random.Random, n: int, start: int, spread: int, disorder: int, users: int) -> list[dict[str, Any]]:
    return [{"user": f"u{rng.randrange(users)}", "ts": start + i * spread // max(n, 1) - rng.randrange(disorder + 1)}
            for i in range(n)]


@FAST
@given(seed=st.integers(0, 100_000), n1=st.integers(0, 60), n2=st.integers(0, 40),
       window=st.sampled_from(["tumbling", "sliding"]), queues=st.integers(1, 3), per_range=st.sampled_from([7, 1000]),
       lateness=st.sampled_from([0, 1500]), copies=st.sampled_from([1, 2]), poison=st.booleans())
def test_combined_windows_equal_windows_of_every_record_shuffled(
        tmp_path: Path, seed: int, n1: int, n2: int, window: str, queues: int, per_range: int, lateness: int,
        copies: int, poison: bool) -> None:
    """Out-of-order clicks in ranges of ``per_range`` records, an idle flush, then more clicks (some
    for windows that fired): combined or not, the same results, late records and state."""
    rng = random.Random(seed)
    first = clicks(rng, n1, 10_000, 20_000, 3000, 3)
    second = clicks(rng, n2, 5_000, 30_000, 6000, 3)  # from before the first phase's end: fired windows
    if poison:
        first.insert(len(first) // 2, {"user": "boom", "ts": 12_000})
    w = TumblingWindow(2000) if window == "tumbling" else SlidingWindow(3000, 1000)
    builder = windowed(f"win-{window}", w, copies, poison)
    (combined, job_c), (plain, job_p) = both(tmp_path, builder, [first, second], queues, allowed_lateness_ms=lateness,
                                              idle_timeout_ms=600_000, max_records_per_queue=per_range)
    assert results(combined) == results(plain)
    assert late_rows(combined, job_c) == late_rows(plain, job_p)
    assert state_of(combined, job_c) == state_of(plain, job_p)
    assert sum(i.get("late", 0) for i in job_c.infos) == sum(i.get("late", 0) for i in job_p.infos)
    assert flow(job_c) == flow(job_p)
    assert dead_letters(combined, job_c) == dead_letters(plain, job_p)
    assert len(dead_letters(combined, job_c)) == int(poison)  # its first copy raised: the record stops there
    if n1 or n2:
        assert partials(combined, job_c) > 0 and partials(plain, job_p) == 0
    assert sum(1 for r in late_rows(plain, job_p) if r[6] == "window fired") == \
        sum(1 for r in late_rows(combined, job_c) if r[6] == "window fired")


def test_combined_windows_equal_the_reference_across_queues_and_ranges(tmp_path: Path) -> None:
    """Many clicks over three queues in ranges of 50: the counts are pandas' over the on-time clicks."""
    rng = random.Random(11)
    sent = clicks(rng, 900, 1_700_000_000_000, 60_000, 2500, 7)
    (broker, job), _ = both(tmp_path, windowed("ref", TumblingWindow(5000)), [sent], 3, allowed_lateness_ms=1000,
                            idle_timeout_ms=600_000, max_records_per_queue=50)
    per_queue = {q: [json.loads(m.body) for m in broker.read("clicks", q)] for q in range(3)}
    on_time, late = split_late(per_queue, lambda e: e["ts"], 1000)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: 1, 5000)
    expected = {(k, s, e): int(v) for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].sum().items()}
    assert results(broker) == expected
    assert sorted(r[3] for r in late_rows(broker, job)) == sorted(e["ts"] for e, _wm in late)
    assert 0 < partials(broker, job) < 900 // 3


def test_the_records_of_a_partial_for_a_fired_window_are_found_again_and_reported_one_by_one(tmp_path: Path) -> None:
    """After an idle flush fired [0, 1000), a range brings two more clicks of "a" for it (counted in
    a's partial, not behind their watermark) and one for the open [1000, 2000): the two are late
    with their own values, offsets and source watermark, the third is counted."""
    b = windowed("fired", TumblingWindow(1000))
    first = [{"user": "a", "ts": 100}, {"user": "a", "ts": 900}]
    second = [{"user": "a", "ts": 500}, {"user": "a", "ts": 1200}, {"user": "a", "ts": 700}]
    broker, job = run_phases(tmp_path, b, [first, second], 1, allowed_lateness_ms=1000, idle_timeout_ms=600_000)
    assert results(broker) == {("a", 0, 1000): 2, ("a", 1000, 2000): 1}
    rows = [json.loads(m.body) for m in broker.read("fired-late")]
    assert [(r["value"], r["offset"], r["cause"], r["data_time"], r["watermark"]) for r in rows] == [
        ("{'user': 'a', 'ts': 500}", 2, "window fired", 500, 1000),
        ("{'user': 'a', 'ts': 700}", 4, "window fired", 700, 1000)]
    assert all("its window [0,1000) already fired" in r["reason"] for r in rows)
    shuffled = [m for t in job.topology.framed_topics for m in broker.read(t) if PARTIAL_HEADER in (m.headers or {})]
    assert len(shuffled) == 2  # one partial per key and range: nothing but them went through for "a"


def test_records_not_found_again_are_still_reported_late(tmp_path: Path) -> None:
    """A data time that is not the same when taken again (not deterministic): running the range
    again finds none of a fired window's records, and each is still reported late, by its window."""
    calls = itertools.count()
    b = StreamBuilder("random", shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"] + (5000 if next(calls) >= 4 else 0))
     .key_by(lambda e: e["user"]).window(TumblingWindow(1000)).count().to_rstream()
     .sink("results", JsonSerializer(with_key=True)))
    first = [{"user": "a", "ts": 100}, {"user": "a", "ts": 200}]
    second = [{"user": "a", "ts": 300}, {"user": "a", "ts": 310}]
    broker, job = run_phases(tmp_path, b, [first, second], 1, allowed_lateness_ms=1000, idle_timeout_ms=600_000)
    assert results(broker) == {("a", 0, 1000): 2}  # the second phase's two came for the fired [0, 1000)
    rows = [json.loads(m.body) for m in broker.read("random-late")]
    assert [(r["value"], r["offset"], r["data_time"], r["cause"]) for r in rows] == [("None", -1, 0, "window fired")] * 2
    assert all("did not give this record back" in r["reason"] and "not deterministic" in r["reason"] for r in rows)


def test_windows_are_not_combined_where_the_range_cannot_be_run_again(tmp_path: Path) -> None:
    """A foreach before the shuffle (a side effect), data time from the wall clock, or the property
    off: every record is shuffled with its frame, and the results are the same."""
    sent = clicks(random.Random(3), 40, 0, 10_000, 500, 3)
    b = StreamBuilder("effect", shuffle_queues=2)
    seen: list[Any] = []
    (b.source("clicks", JsonDeserializer()).foreach(seen.append).select_timestamp(lambda e: e["ts"])
     .key_by(lambda e: e["user"]).window(TumblingWindow(2000)).count().to_rstream()
     .sink("results", JsonSerializer(with_key=True)))
    broker, job = run_phases(tmp_path, b, [sent], 2, allowed_lateness_ms=0, idle_timeout_ms=600_000)
    assert partials(broker, job) == 0 and len(seen) == 40
    _, plain = both(tmp_path, windowed("ref", TumblingWindow(2000)), [sent], 2, allowed_lateness_ms=0,
                    idle_timeout_ms=600_000)
    assert results(broker) == results(plain[0])

    broker, job = run_phases(tmp_path, windowed("wall", TumblingWindow(2000)), [sent], 2,
                             time_type="processing_time", idle_timeout_ms=600_000)
    assert partials(broker, job) == 0 and sum(results(broker).values()) == 40


def test_a_partial_is_one_record_per_key_and_range_read_back_as_such(tmp_path: Path) -> None:
    """What the shuffle topic holds and how the topic browser's decoder shows it: per key, its
    on-time records' count per window start, and where they came from."""
    from rstream.runtime.topic_decoder import decode_message, topic_role

    sent = [{"user": "a", "ts": 100}, {"user": "b", "ts": 150}, {"user": "a", "ts": 1100}, {"user": "a", "ts": 50}]
    broker, job = run_phases(tmp_path, windowed("shown", TumblingWindow(1000)), [sent], 1, allowed_lateness_ms=0,
                             idle_timeout_ms=600_000)
    [topic] = job.topology.framed_topics
    decoded = [decode_message(topic_role(topic, job.topology), m.key, m.body, m.headers) for m in broker.read(topic)]
    data = sorted(((d.kind, d.key, repr(d.detail.get("counts", d.value)), d.detail.get("records"),
                    d.detail.get("source_offsets")) for d in decoded if d.kind in ("data", "partial")), key=repr)
    assert data == sorted([("data", "a", "{'user': 'a', 'ts': 50}", None, None),  # late behind 1100: alone, with its frame
                           ("partial", "a", "{0: 1, 1000: 1}", 2, "0..4"), ("partial", "b", "{0: 1}", 1, "0..4")], key=repr)
    # a partial says in words what it is, never a bare number that reads like a total
    assert {d.value for d in decoded if d.kind == "partial"} == {
        "2 records of 'a' combined into one from clicks/0/SHUFFLE_SINK-5 offsets 0..4, counted per window",
        "1 record of 'b' combined into one from clicks/0/SHUFFLE_SINK-5 offsets 0..4, counted per window"}
    assert Counter(d.kind for d in decoded)["watermark"] == 2  # the marker still goes to every shuffle queue
