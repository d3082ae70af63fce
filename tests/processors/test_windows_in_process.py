"""Windowed aggregations and joins run in this process (no Spark) against the event-time reference
(``tests/support/reference.py``): generated out-of-order clicks, on-time results equal pandas, late
records equal the reference's, and reduce per window equals functools.reduce."""

from __future__ import annotations

import functools
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    TumblingWindow,
)
from rstream.runtime.inprocess import InProcessJob
from tests.support.inprocess import produce, results, run
from tests.support.reference import sessions, split_late, window_frame

LATENESS = 2000
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000}
_RUNS = itertools.count()


def clicks(n: int, seed: int, users: int = 3, spread: int = 30_000, disorder: int = 4000) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(users)}", "ts": 1_700_000_000_000 + i * spread // n - rng.randrange(disorder),
             "amount": rng.randint(1, 50)} for i in range(n)]


def windowed(job: str, window: Any, agg: str, *args: Any) -> StreamBuilder:
    b = StreamBuilder(job, shuffle_queues=3)
    ws = b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
    getattr(ws.window(window), agg)(*args).to_rstream().sink("results", JsonSerializer(with_key=True))
    return b


def fresh(tmp_path: Path) -> tuple[EmbeddedBroker, Path]:
    root = tmp_path / f"run-{next(_RUNS)}"
    return EmbeddedBroker(root / "broker"), root


FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(n=st.integers(1, 80), seed=st.integers(0, 10_000), size=st.sampled_from([1000, 5000]),
       slide=st.sampled_from([None, 500, 2000]), queues=st.integers(1, 3))
def test_fixed_windows_equal_the_reference(tmp_path: Path, n: int, seed: int, size: int, slide: int | None,
                                           queues: int) -> None:
    if slide is not None and slide > size:
        slide = size
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "clicks", clicks(n, seed), queues)
    window = TumblingWindow(size) if slide is None else SlidingWindow(size, slide)
    job = run(windowed("win", window, "sum", lambda e: e["amount"]), broker, root, **EXACT)
    on_time, late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], size, slide)
    expected = {(k, s, e): v for (k, s, e), v in frame.groupby(["key", "start", "end"])["value"].sum().items()}
    assert results(broker) == expected
    assert sum(info.get("late", 0) for info in job.infos) == len(late)


@FAST
@given(n=st.integers(1, 60), seed=st.integers(0, 10_000))
def test_sessions_equal_the_reference(tmp_path: Path, n: int, seed: int) -> None:
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "clicks", clicks(n, seed, spread=60_000, disorder=1500), 1)
    run(windowed("ses", SessionWindow(3000), "count"), broker, root, **EXACT)
    on_time, _late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    assert results(broker) == sessions(on_time, lambda e: e["user"], lambda e: e["ts"], 3000)


@pytest.mark.parametrize("window", [TumblingWindow(4000), SessionWindow(2500)], ids=["tumbling", "session"])
def test_reduce_per_window_is_functools_reduce(tmp_path: Path, window: Any) -> None:
    """Max amount by reduce equals max by functools.reduce over each window's on-time records."""
    broker, root = fresh(tmp_path)
    per_queue = produce(broker, "clicks", clicks(120, 7, spread=40_000), 2)
    run(windowed("red", window, "reduce", lambda a, b: a if a["amount"] >= b["amount"] else b), broker, root,
        **EXACT)
    on_time, _late = split_late(per_queue, lambda e: e["ts"], LATENESS)
    got = {k: v["amount"] for k, v in results(broker).items()}
    if isinstance(window, TumblingWindow):
        frame = window_frame(on_time, lambda e: e["user"], lambda e: e["ts"], lambda e: e["amount"], 4000)
        groups = {k: list(g) for k, g in frame.groupby(["key", "start", "end"])["value"]}
    else:
        spans = sessions(on_time, lambda e: e["user"], lambda e: e["ts"], 2500)
        groups = {(k, s, e): [r["amount"] for r in on_time if r["user"] == k and s <= r["ts"] < e - 2500 + 1]
                  for (k, s, e) in spans}
    assert got == {k: functools.reduce(max, v) for k, v in groups.items()}


def test_windowed_inner_join_equals_pairs_in_the_same_window(tmp_path: Path) -> None:
    broker, root = fresh(tmp_path)
    rng = random.Random(2)
    events = [{"side": rng.choice("LR"), "user": f"u{rng.randrange(3)}", "ts": 1_700_000_000_000 + i * 100}
              for i in range(80)]
    produce(broker, "events", events, 1)
    b = StreamBuilder("join", shuffle_queues=2)
    src = b.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    left, right = src.filter(lambda e: e["side"] == "L"), src.filter(lambda e: e["side"] == "R")
    (left.join(right).where(lambda e: e["user"]).equal_to(lambda e: e["user"]).window(TumblingWindow(1000))
     .apply(lambda a, c: [a["ts"], c["ts"]]).sink("pairs", JsonSerializer()))
    run(b, broker, root, **EXACT)
    got = sorted(tuple(json.loads(m.body)) for m in broker.read("pairs"))
    lefts = [e for e in events if e["side"] == "L"]
    rights = [e for e in events if e["side"] == "R"]
    expected = sorted((a["ts"], c["ts"]) for a in lefts for c in rights
                      if a["user"] == c["user"] and a["ts"] // 1000 == c["ts"] // 1000)
    assert got == expected and got


def test_a_window_opened_and_fired_in_one_batch_leaves_nothing_in_the_state_topic(tmp_path: Path) -> None:
    """Its count lived in memory only, so no delete is written for it or for its timer; a window open
    across a batch boundary is written at the end of its first batch and deleted when it fires."""
    from rstream.runtime.inprocess import InProcessJob
    from rstream.serde.codec import decode
    from rstream.state.store import DELETE_HEADER, split_state_key

    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("clicks", queues=1)
    b = windowed("once", TumblingWindow(1000), "count")
    job = InProcessJob(b.build(), broker, tmp_path / "job", {"allowed_lateness_ms": 0, "idle_timeout_ms": 600_000})
    [state_topic] = [t for s, t in job.topology.state_topics.items() if s in job.topology.framed_topics]

    def send(*times: int) -> None:
        broker.send_batch("clicks", [json.dumps({"user": "u", "ts": t}) for t in times])
        while job.run_batch():
            pass

    def changes(window: tuple[str, int, int]) -> list[str]:
        """What the state topic holds for ``window``'s count and its timer, in order."""
        out = []
        for m in broker.read(state_topic):
            kb = bytes.fromhex(m.key)
            name = kb.split(b"\x00")[0]
            kind = "delete" if (m.headers or {}).get(DELETE_HEADER) else "put"
            if b"\x01" in name:  # a timer: operator \x01 end (8 bytes) payload
                cut = name.index(b"\x01")
                if decode(kb[cut + 9:]) == (window[0], window[1]):
                    out.append(f"{kind} timer")
            elif split_state_key(kb)[1] == window:
                out.append(kind)
        return out

    send(100, 200, 1100)  # [0, 1000) opens and fires in this batch; [1000, 2000) stays open
    assert results(broker) == {("u", 0, 1000): 2}
    assert changes(("u", 0, 1000)) == []
    assert sorted(changes(("u", 1000, 2000))) == ["put", "put timer"]
    send(2500)  # [1000, 2000) fires in a later batch: its count and timer are deleted
    assert results(broker) == {("u", 0, 1000): 2, ("u", 1000, 2000): 1}
    assert changes(("u", 0, 1000)) == []
    assert sorted(changes(("u", 1000, 2000))) == ["delete", "delete timer", "put", "put timer"]


def test_window_results_go_to_the_sink_queue_of_their_plain_tuple(tmp_path: Path) -> None:
    """A window's result picks its sink queue by the bytes of ``(key, start, end)`` (marshal), as a
    tuple key would: spread over the queues, each result in the queue its bytes say."""
    from rstream.serde.codec import encode, stable_queue

    broker, root = fresh(tmp_path)
    produce(broker, "clicks", clicks(80, 7, users=5), queues=2)
    broker.create_topic("results", queues=4)
    run(windowed("routed", TumblingWindow(1000), "count"), broker, root, **EXACT)
    placed = [(tuple(json.loads(m.body)["key"]), m.queue_id) for m in broker.read("results")]
    assert len(placed) > 20 and len({q for _, q in placed}) == 4
    assert [q for _, q in placed] == [stable_queue(encode(key), 4) for key, _ in placed]


def test_windows_left_open_by_a_batch_fire_in_key_order_with_the_batch_s_own(tmp_path: Path) -> None:
    """Windows with one end fire in one order (by key), whether an earlier batch opened them (the
    store holds them) or the batch that fires them did (the operator holds them until the batch
    ends): here "a" and "c" stay open through batch 1; batch 2 opens "b" and "d", adds to "a" (read
    back from the store) and fires all four."""
    broker, root = fresh(tmp_path)
    broker.create_topic("clicks", queues=1)
    broker.create_topic("results", queues=1)  # one queue: the sink's order is the firing order
    b = StreamBuilder("order", shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .window(TumblingWindow(2000)).count().to_rstream().sink("results", JsonSerializer(with_key=True)))
    job = InProcessJob(b.build(), broker, root / "job", {"allowed_lateness_ms": 0, "idle_timeout_ms": 600_000})

    def send(*clicks: tuple[str, int]) -> None:
        broker.send_batch("clicks", [json.dumps({"user": u, "ts": t}) for u, t in clicks], queue=0)
        job.run_until_idle(fire_idle=False)

    send(("c", 1000), ("a", 1500), ("c", 1600))
    assert broker.read("results") == []  # the watermark (1600) is below the windows' end
    send(("d", 1700), ("a", 1750), ("b", 1800), ("x", 5000))  # "a" adds to its window of batch 1
    fired = [json.loads(m.body) for m in broker.read("results")]
    assert fired == [{"key": [k, 0, 2000], "value": n} for k, n in (("a", 2), ("b", 1), ("c", 2), ("d", 1))]
    send(("y", 9000))  # fires x's window, opened in batch 2 and left open
    assert json.loads(broker.read("results")[-1].body) == {"key": ["x", 4000, 6000], "value": 1}


class _Tag:
    """A key marshal cannot write (pickled wherever rstream encodes it)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Tag) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("tag", self.n))

    def __repr__(self) -> str:
        return f"_Tag({self.n})"


@pytest.mark.parametrize("pickled", [False, True], ids=["marshal-keys", "with-a-pickled-key"])
def test_windows_fire_in_timer_key_order_whatever_their_keys(tmp_path: Path, pickled: bool) -> None:
    """The windows a batch opens and fires are ordered as their timers would be in the store (by end,
    then ``encode((key, start))``) without making their timer keys: by end, then their keys' bytes
    (marshal's bytes are never the start of another value's), or by timer key where a key is
    pickled. Keys of every kind and length; due at once: windows of two ends all opened in the
    batch, with a window of an earlier batch among them, and all of them (the idle flush)."""
    from rstream.serde.codec import encode

    keys: list[Any] = ["b", "aa", "a", "", "é", 3, -1, 2**70, 1.5, ("t", 1), ("s", 2, 3), None, b"x", frozenset({2})]
    if pickled:
        keys.append(_Tag(1))
    broker, root = fresh(tmp_path)
    broker.create_topic("ticks", queues=1)
    broker.create_topic("order", queues=1)
    by_index = dict(enumerate(keys))
    b = StreamBuilder("keyorder", shuffle_queues=1)
    (b.source("ticks", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: by_index[e["k"]])
     .window(TumblingWindow(1000)).count().to_rstream().sink("order", lambda k, v: repr(tuple(k)).encode()))
    job = InProcessJob(b.build(), broker, root / "job", {"allowed_lateness_ms": 0, "idle_timeout_ms": 600_000})
    windows = []
    for w in range(0, 9, 3):
        # every key in windows w and w + 1, opened and fired in this batch, and the first key in
        # window w + 2, which moves the watermark past both and stays open: the next batch fires it
        # (from the store) with its own two; an idle flush fires the last ones
        sent = [(i, w * 1000 + 10 + i) for i in range(len(keys))] + [(i, w * 1000 + 1010 + i) for i in range(len(keys))]
        sent.append((0, w * 1000 + 2500))
        broker.send_batch("ticks", [json.dumps({"k": i, "ts": ts}) for i, ts in sent])
        job.run_until_idle(fire_idle=w == 6)
        windows += [(keys[i], ts - ts % 1000, ts - ts % 1000 + 1000) for i, ts in sent]
    fired = [m.body.decode() for m in broker.read("order")]
    assert fired == [repr(wk) for wk in sorted(set(windows), key=lambda wk: (wk[2], encode(wk[:2])))]
