"""A count that emits every update combines before the shuffle (``build(combine=True)``, the default):
each range sends one partial per key (how many records, and their data times), and the count emits
an update per record from it. Run in this process (no Spark), the same generated input with it on
and off gives the same updates per key (values and times, in order), the same sink messages, state,
records in and out, and the same dead letters, also where user code after the count raises on some
updates; only the order across keys within a range may differ."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import given
from hypothesis import strategies as st

from rstream import EmbeddedBroker, JsonDeserializer, StreamBuilder, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.topic_decoder import decode_message, topic_role
from rstream.shuffle.wire import PARTIAL_HEADER, RECORDS
from tests.support.inprocess import record_by_record
from tests.support.partials import FAST, flow, state_of
from tests.support.partials import run_phases as window_phases

_RUNS = itertools.count()


class PickySerializer:
    """``key:count``, but raises on every count divisible by ``every`` of key ``u0`` (a dead letter)."""

    def __init__(self, every: int) -> None:
        self.every = every

    def serialize(self, key: Any, value: Any) -> bytes:
        if key == "u0" and value % self.every == 0:
            raise ValueError(f"no {value} for u0")
        return f"{key}:{value}".encode()


def counting(job: str, copies: int = 1, poison: bool = False, every: int = 0, sink: str = "counts") -> StreamBuilder:
    """Events counted per user, with their own data time; ``copies``: each counted that many times (a
    flat_map before the shuffle); ``poison``: user "boom" raises in key_by; ``every``: the sink's
    serializer raises on some of u0's counts."""

    def user(e: dict[str, Any]) -> str:
        if poison and e["user"] == "boom":
            raise ValueError("boom")
        return str(e["user"])

    b = StreamBuilder(job, shuffle_queues=2)
    stream = b.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    if copies > 1:
        stream = stream.flat_map(lambda e: [dict(e, copy=i) for i in range(copies)])
    serializer = PickySerializer(every) if every else None
    stream.key_by(user).count().to_rstream().sink(sink, serializer)
    return b


def run_phases(tmp_path: Path, builder: StreamBuilder, phases: list[list[dict[str, Any]]], queues: int,
               **props: Any) -> tuple[EmbeddedBroker, InProcessJob]:
    """Each phase's events sent to "events", then the job run until idle; its sink is "counts"."""
    return window_phases(tmp_path, builder, phases, queues, source="events", sink="counts", **props)


def run_all(tmp_path: Path, phases: list[list[dict[str, Any]]], queues: int, *args: Any,
            **props: Any) -> tuple[EmbeddedBroker, InProcessJob, InProcessJob, InProcessJob]:
    """The same events (one broker) counted with the combine rewrite (sink "on"), without ("off"), and
    on but record by record, no chunks ("each": how a trace re-executes, and what a chunk that
    raised falls back to)."""
    root = tmp_path / f"all-{next(_RUNS)}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("events", queues=queues)
    jobs = []
    for name in ("on", "off", "each"):
        broker.create_topic(name, queues=2)
        jobs.append(InProcessJob(counting(f"count-{name}", *args, sink=name).build(combine=name != "off"), broker,
                                 root / name, props))
    for events in phases:
        if events:
            broker.send_batch("events", [json.dumps(e) for e in events])
        jobs[0].run_until_idle()
        jobs[1].run_until_idle()
        with record_by_record():
            jobs[2].run_until_idle()
    return broker, jobs[0], jobs[1], jobs[2]


def updates(broker: EmbeddedBroker, topic: str = "counts") -> dict[str, list[tuple[bytes, int]]]:
    """Per key, every sink message's body and born time, in order (a key's updates stay in one queue)."""
    out: dict[str, list[tuple[bytes, int]]] = defaultdict(list)
    for m in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        out[m.key].append((m.body, m.born_timestamp))
    return dict(out)


def dead_letters(broker: EmbeddedBroker, job: InProcessJob) -> Counter[tuple[Any, ...]]:
    """Every dead letter's operator, error, value given and born time (where it sat in a shuffle
    topic differs by design: a partial's offset)."""
    from rstream.processors.base import dead_letter_row

    topic = f"{job.topology.job_id}-dlq"
    messages = broker.read(topic) if broker.has_topic(topic) else []
    return Counter((r["operator"], r["error"], r["value"], m.born_timestamp)
                   for m in messages for r in [dead_letter_row(m)])


def records_flow(job: InProcessJob) -> tuple[Counter[str], Counter[str]]:
    """Records in per kind of queue and out per topic (``flow``), topics named without the job's names."""
    ins, outs = flow(job)
    sink = job.topology.job_id.removeprefix("count-")
    return ins, Counter({t.replace(job.topology.job_id, "JOB") if t != sink else "SINK": n for t, n in outs.items()})


def events(rng: random.Random, n: int, users: int, disorder: int) -> list[dict[str, Any]]:
    """Events of ``users`` users (and "boom"), their times in runs of equal values, some out of order."""
    start = rng.randrange(10_000)
    return [{"user": rng.choice([f"u{rng.randrange(users)}", "boom"]) if rng.random() < 0.05 else f"u{rng.randrange(users)}",
             "ts": start + (i // rng.choice([1, 3, 10])) - rng.randrange(disorder + 1)} for i in range(n)]


@FAST
@given(seed=st.integers(0, 100_000), n1=st.integers(0, 80), n2=st.integers(0, 40), queues=st.integers(1, 3),
       per_range=st.sampled_from([5, 1000]), copies=st.sampled_from([1, 2]), poison=st.booleans(),
       every=st.sampled_from([0, 3]), disorder=st.sampled_from([0, 5]))
def test_combined_counts_equal_counts_of_every_record_shuffled(
        tmp_path: Path, seed: int, n1: int, n2: int, queues: int, per_range: int, copies: int, poison: bool,
        every: int, disorder: int) -> None:
    rng = random.Random(seed)
    phases = [events(rng, n1, 4, disorder), events(rng, n2, 6, disorder)]
    broker, j_on, j_off, j_each = run_all(tmp_path, phases, queues, copies, poison, every,
                                          max_records_per_queue=per_range)
    for sink, job in (("on", j_on), ("each", j_each)):
        assert updates(broker, sink) == updates(broker, "off")
        assert Counter((m.queue_id, m.key, m.body, m.born_timestamp) for m in broker.read(sink)) == \
            Counter((m.queue_id, m.key, m.body, m.born_timestamp) for m in broker.read("off"))
        assert state_of(broker, job) == state_of(broker, j_off)
        assert records_flow(job) == records_flow(j_off)
        assert dead_letters(broker, job) == dead_letters(broker, j_off)
    # and what pandas says: per user, its events (each copied) count up 1, 2, ..., in offset order per queue
    frame = pd.DataFrame([e for phase in phases for e in phase], columns=["user", "ts"])
    frame = frame[frame["user"] != "boom"] if poison else frame
    expected = (frame["user"].value_counts() * copies).to_dict()
    last = {key: int(body.decode().rpartition(":")[2]) for key, ups in updates(broker, "on").items() for body, _ in ups[-1:]}
    for key, n in expected.items():  # u0's updates divisible by ``every`` were dead letters
        assert last.get(key) == (n - 1 if key == "u0" and every and n % every == 0 else n), key
    (on,), (off,) = j_on.topology.shuffle_topics, j_off.topology.shuffle_topics  # a record per key and range
    assert sum(broker.end_offsets(on)) <= sum(broker.end_offsets(off))


def test_a_range_sends_one_partial_per_key_that_the_topic_browser_decodes(tmp_path: Path) -> None:
    phase = [{"user": u, "ts": t} for u, t in [("a", 5), ("b", 5), ("a", 5), ("a", 7), ("b", 3), ("a", 7)]]
    broker, job = run_phases(tmp_path, counting("browse"), [phase], 1)
    (shuffle,) = job.topology.shuffle_topics
    messages = broker.read(shuffle)
    assert all(m.headers == {PARTIAL_HEADER: RECORDS} for m in messages)
    role = topic_role(shuffle, job.topology)
    decoded = {d.key: d for m in messages for d in [decode_message(role, m.key, m.body, m.headers)]}
    assert decoded["a"].detail["records"] == 4 and decoded["a"].detail["times"] == [5, 5, 7, 7]
    assert decoded["b"].detail["records"] == 2 and decoded["b"].detail["times"] == [5, 3]
    # a partial says in words what it is, never a bare number that reads like a total
    assert (decoded["a"].kind, decoded["a"].value) == ("partial", "4 records of 'a' combined into one")
    # the count emitted an update per record, each with that record's time
    assert updates(broker) == {"a": [(b"a:1", 5), (b"a:2", 5), (b"a:3", 7), (b"a:4", 7)],
                               "b": [(b"b:1", 5), (b"b:2", 3)]}


def test_records_sent_together_keep_their_time_in_order(tmp_path: Path) -> None:
    """Each send is a chunk of one time: a key's runs follow the times as they came (5, 7, then 5 again)."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("events", queues=1)
    broker.create_topic("counts", queues=2)
    for ts, users in ((5, "aab"), (7, "ba"), (5, "a")):
        broker.send_batch("events", [json.dumps({"user": u, "ts": ts}) for u in users])
    job = InProcessJob(counting("sends").build(), broker, tmp_path / "job", {})
    job.run_until_idle()
    (shuffle,) = job.topology.shuffle_topics
    assert sum(broker.end_offsets(shuffle)) == 2  # one range: a partial per user
    assert updates(broker) == {"a": [(b"a:1", 5), (b"a:2", 5), (b"a:3", 7), (b"a:4", 5)],
                               "b": [(b"b:1", 5), (b"b:2", 7)]}


def test_where_counts_do_not_combine(tmp_path: Path) -> None:
    """Turned off, per-batch emission (its own combine), a sum, a windowed count: no partial of records."""
    phase = [{"user": f"u{i % 3}", "ts": 1000 * i} for i in range(30)]

    def partials_of_records(broker: EmbeddedBroker, job: InProcessJob) -> int:
        return sum(1 for t in job.topology.shuffle_topics for m in broker.read(t)
                   if (m.headers or {}).get(PARTIAL_HEADER) == RECORDS)

    b_sum = StreamBuilder("summed", shuffle_queues=2)
    b_sum.source("events", JsonDeserializer()).key_by(lambda e: e["user"]).sum(lambda e: 1).to_rstream().sink("counts")
    b_win = StreamBuilder("windowed", shuffle_queues=2)
    (b_win.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(TumblingWindow(10_000)).count().to_rstream().sink("counts"))
    cases = [(counting("off"), {"combine": False}), (counting("batch"), {"aggregate_emit": "batch"}),
             (b_sum, {}), (b_win, {})]
    for builder, props in cases:
        broker, job = run_phases(tmp_path, builder, [phase], 2, **props)
        assert partials_of_records(broker, job) == 0, builder.job_id
    broker, job = run_phases(tmp_path, counting("on"), [phase], 2)
    assert partials_of_records(broker, job) == 6  # one per user and source queue
