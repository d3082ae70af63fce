"""Tables and stream–table joins run in this process (no Spark) against a plain Python join: table
updates, deletes and stream records over a few keys, generated, sent in rounds with a restart between
rounds (and the local state deleted in some); the reference replays the join queue's records batch
by batch in data-time order across their producers, the order "at the time the record is processed"
means; with data times interleaved across the sides, the plain join in time order. Also: the table
answers ``job.query``, the sides reach the join queue in their input order, a record user code raises
on is a dead letter holding it as stored, and bad calls are refused."""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rstream import (
    DslError,
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    RTable,
    StreamBuilder,
    TumblingWindow,
)
from rstream.processors.base import dead_letter_row
from rstream.runtime.inprocess import InProcessJob
from rstream.shuffle.wire import FramedRecord, decode
from tests.support.inprocess import emitted
from tests.support.tables import (
    KEYS,
    as_messages,
    join_queue_as_taken,
    join_queue_records,
    joined_in_time_order,
    operations,
    replay,
    table_job,
    timed_table_job,
    write_timed,
)

pytestmark = pytest.mark.unit

_RUNS = itertools.count()


def _join_node(job: InProcessJob) -> Any:
    return next(n for n in job.topology.nodes if n.kind in ("table_join", "left_table_join"))


def _check(ops: list[tuple[str, str, Any]], cuts: list[int], wipe: list[bool], how: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        broker = EmbeddedBroker(root / "broker")
        broker.create_topic("prices", queues=1)
        broker.create_topic("orders", queues=1)
        builder = table_job(f"tables-{how}-{next(_RUNS)}", how)
        bounds = sorted({0, len(ops), *(c % (len(ops) + 1) for c in cuts)})
        job = None
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            prices, orders = as_messages(ops[lo:hi])
            broker.send_batch("prices", [json.dumps(p) for p in prices])
            broker.send_batch("orders", [json.dumps(o) for o in orders])
            if job is not None and wipe[i % len(wipe)]:
                shutil.rmtree(job.job_dir / "state")
            job = InProcessJob(builder.build(), broker, root / "jobs" / builder.job_id)
            job.run_until_idle()
        assert job is not None
        node = _join_node(job)
        stored = join_queue_records(broker, node.pipeline)
        # the reference replays real inputs: each side reached the join queue in its input order, per key
        prices, orders = as_messages(ops)
        for key in KEYS:
            assert [v for s, k, v in stored if s == 1 and k == key] == [p["v"] for p in prices if p["k"] == key]
            assert [v for s, k, v in stored if s == 0 and k == key] == [o for o in orders if o["k"] == key]
        want, table = replay(join_queue_as_taken(broker, node.pipeline), how)
        assert emitted(broker, "out") == want
        for key in KEYS:
            assert job.query(node.name, key) == job.query("TABLE-4", key) == table.get(key)


@pytest.mark.parametrize("how", ["inner", "left"])
@settings(max_examples=15, deadline=None)
@given(ops=operations, cuts=st.lists(st.integers(0, 40), max_size=3), wipe=st.lists(st.booleans(), min_size=1, max_size=3))
def test_stream_table_join_matches_the_plain_join_over_the_join_queue(how: str, ops: list[tuple[str, str, Any]],
                                                                      cuts: list[int], wipe: list[bool]) -> None:
    _check(ops, cuts, wipe, how)


_times = st.lists(st.integers(0, 30), max_size=12).map(sorted)  # one queue's data times, in order


@pytest.mark.parametrize("how", ["inner", "left"])
@settings(max_examples=20, deadline=None)
@given(price_times=_times, order_times=st.tuples(_times, _times), data=st.data(), cap=st.sampled_from([10**6, 4, 1]))
def test_a_batch_is_taken_in_data_time_order_whatever_order_its_queue_got(
        how: str, price_times: list[int], order_times: tuple[list[int], list[int]], data: st.DataObject,
        cap: int) -> None:
    """Both sides written before the job's first batch, their data times interleaved: each order meets
    the table as of its own time (the plain join in time order, a price first at equal times), however
    the source tasks' writes landed in the join's queue, and at every batch cap (issue 51: read as one
    batch or a few records at a time)."""
    keys = st.sampled_from(KEYS[:2])
    prices = [{"k": data.draw(keys), "v": data.draw(st.one_of(st.none(), st.integers(0, 9))), "ts": t}
              for t in price_times]
    orders = [[{"k": data.draw(keys), "n": 100 * q + i, "ts": t} for i, t in enumerate(ts)]
              for q, ts in enumerate(order_times)]
    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(Path(tmp) / "broker")
        write_timed(broker, prices, orders)
        builder = timed_table_job(f"timed-{how}-{next(_RUNS)}", how, queues=1)
        InProcessJob(builder.build(), broker, Path(tmp) / "job", {"max_records_per_queue": cap}).run_until_idle()
        assert emitted(broker, "out") == joined_in_time_order(prices, orders, how)


@settings(max_examples=15, deadline=None)
@given(price_times=st.lists(st.integers(0, 900), max_size=10).map(sorted),
       order_times=st.tuples(*[st.lists(st.integers(0, 900), max_size=10).map(sorted)] * 2), data=st.data())
def test_windows_after_the_join_count_every_enriched_order(price_times: list[int],
                                                           order_times: tuple[list[int], list[int]],
                                                           data: st.DataObject) -> None:
    """Enriched orders counted per price in 100 ms windows after the join (a framed shuffle after it):
    every order is counted once, in the window of its own time, with the price of its time; none is
    late (the join's results carry the watermark its batch started with)."""
    prices = [{"k": "a", "v": data.draw(st.one_of(st.none(), st.integers(0, 3))), "ts": t} for t in price_times]
    orders = [[{"k": "a", "n": 100 * q + i, "ts": t} for i, t in enumerate(ts)] for q, ts in enumerate(order_times)]
    with tempfile.TemporaryDirectory() as tmp:
        broker = EmbeddedBroker(Path(tmp) / "broker")
        write_timed(broker, prices, orders)
        b = StreamBuilder(f"windowed-{next(_RUNS)}", shuffle_queues=2)
        table = (b.source("prices", JsonDeserializer()).select_timestamp(lambda p: p["ts"])
                 .key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table())
        (b.source("orders", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
         .left_join(table).where(lambda o: o["k"]).apply(lambda o, price: price)
         .key_by(lambda price: price).window(TumblingWindow(100)).count().to_rstream()
         .sink("out", JsonSerializer(with_key=True)))
        job = InProcessJob(b.build(), broker, Path(tmp) / "job")
        job.run_until_idle()
        at = {o["n"]: o["ts"] for queue in orders for o in queue}
        want = Counter((price, at[n] // 100 * 100) for n, price in joined_in_time_order(prices, orders, "left").get("a", []))
        got = {(d["key"][0], d["key"][1]): d["value"] for d in (json.loads(m.body) for m in broker.read("out"))}
        assert got == dict(want)
        assert sum(info["late"] for info in job.infos) == 0


def test_a_table_updated_before_the_stream_arrives(tmp_path: Path) -> None:
    """Rounds make the order plain: prices first (b deleted), then orders: inner drops b and c,
    left gives them None; a later price enriches only later orders. The local state is deleted
    before every restart, so the table comes back from the state topic each time."""
    for how, expected in (("inner", {"a": [[1, 2], [4, 5]]}),
                          ("left", {"a": [[1, 2], [4, 5]], "b": [[2, None]], "c": [[3, None]]})):
        broker = EmbeddedBroker(tmp_path / how / "broker")
        broker.create_topic("prices", queues=1)
        broker.create_topic("orders", queues=2)
        builder = table_job(f"plain-{how}", how)

        def run(*, prices: list[Any] = (), orders: list[Any] = (), builder: StreamBuilder = builder,
                broker: EmbeddedBroker = broker, how: str = how) -> InProcessJob:
            broker.send_batch("prices", [json.dumps(p) for p in prices])
            broker.send_batch("orders", [json.dumps(o) for o in orders])
            shutil.rmtree(tmp_path / how / "job" / "state", ignore_errors=True)  # each restart: from the state topic
            job = InProcessJob(builder.build(), broker, tmp_path / how / "job")
            job.run_until_idle()
            return job

        run(prices=[{"k": "a", "v": 2}, {"k": "b", "v": 3}, {"k": "b", "v": None}])
        run(orders=[{"k": "a", "n": 1}, {"k": "b", "n": 2}, {"k": "c", "n": 3}])
        job = run(prices=[{"k": "a", "v": 5}])
        job = run(orders=[{"k": "a", "n": 4}])
        assert emitted(broker, "out") == expected
        name = _join_node(job).name
        assert (job.query(name, "a"), job.query(name, "b")) == (5, None)


def test_bad_calls_are_refused() -> None:
    b = StreamBuilder("bad")
    grouped = b.source("prices", JsonDeserializer()).key_by(lambda p: p["k"])
    table = grouped.to_table()
    assert isinstance(table, RTable)
    orders = b.source("orders", JsonDeserializer())
    with pytest.raises(DslError, match="needs .where"):
        orders.join(table).apply(lambda o, p: o)
    with pytest.raises(DslError, match="keyed already"):
        orders.join(table).where(lambda o: o["k"]).equal_to(lambda p: p)
    with pytest.raises(DslError, match="no window"):
        orders.left_join(table).window(TumblingWindow(1000))
    with pytest.raises(DslError, match="needs a function"):
        orders.join(table).where("k")
    with pytest.raises(DslError, match="to_table"):
        orders.join(grouped)  # type: ignore[arg-type]
    other = StreamBuilder("other").source("x").key_by(lambda v: v).to_table()
    with pytest.raises(DslError, match="same StreamBuilder"):
        orders.join(other)


def test_drawn_in_both_graphs() -> None:
    b = table_job("drawn", "left")
    assert "table" in b.logical_dot() and "left_table_join" in b.logical_dot()
    topo = b.build()
    real = topo.real_dot()
    assert "LEFT_TABLE_JOIN-6" in real and "stateTopic" in real
    text = topo.describe()
    assert "SHUFFLE_SINK_LEFT-6" in text and "SHUFFLE_SINK_RIGHT-6" in text
    assert "TABLE-4" not in {n.name for n in topo.nodes}  # the join keeps the table: no node of its own


def test_a_raising_join_function_makes_its_record_a_dead_letter(tmp_path: Path) -> None:
    """``fn`` raising on one order: that order is a dead letter naming the join; the others go on."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("prices", queues=1)
    broker.create_topic("orders", queues=1)
    broker.send("prices", json.dumps({"k": "a", "v": 0}))
    b = StreamBuilder("tdlq", shuffle_queues=1)
    prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table()
    orders = b.source("orders", JsonDeserializer())
    orders.join(prices).where(lambda o: o["k"]).apply(lambda o, p: o["n"] // p).sink("out")
    InProcessJob(b.build(), broker, tmp_path / "job").run_until_idle()
    broker.send("prices", json.dumps({"k": "b", "v": 2}))
    broker.send_batch("orders", [json.dumps({"k": k, "n": 4}) for k in "aba"])
    job = InProcessJob(b.build(), broker, tmp_path / "job")
    job.run_until_idle()
    letters = [dead_letter_row(m) for m in broker.read("tdlq-dlq")]
    assert [(d["operator"], "ZeroDivisionError" in d["error"]) for d in letters] == [("TABLE_JOIN-6", True)] * 2
    assert [m.body.decode() for m in broker.read("out")] == ["b:2"]
    # each letter holds its order as the join's queue stored it, at the offset named
    [join_topic] = [t for t in job.topology.shuffle_topics if "TABLE_JOIN" in t]
    stored = {m.offset: m for m in broker.read(join_topic, 0)}
    for d, m in zip(letters, broker.read("tdlq-dlq"), strict=True):
        record = decode(m.key or None, m.body, None, framed=True)
        assert isinstance(record, FramedRecord) and (record.key, record.value) == ("a", {"k": "a", "n": 4})
        assert decode(stored[d["offset"]].key, stored[d["offset"]].body, None, framed=True) == record


def test_a_sink_raising_after_the_join_makes_that_order_a_dead_letter(tmp_path: Path) -> None:
    """The sink's serializer raising on one enriched order: that order is a dead letter of its own,
    named by its offset in the join's queue; the others reach the sink."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("prices", queues=1)
    broker.create_topic("orders", queues=1)
    broker.send("prices", json.dumps({"k": "a", "v": 1}))
    broker.send_batch("orders", [json.dumps({"k": "a", "n": n}) for n in (1, 2, 3)])

    def serialize(key: Any, value: Any) -> bytes:
        if value == 2:
            raise ValueError("no twos")
        return str(value).encode()

    b = StreamBuilder("tsink", shuffle_queues=1)
    prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table()
    orders = b.source("orders", JsonDeserializer())
    orders.join(prices).where(lambda o: o["k"]).apply(lambda o, p: o["n"] * p).sink("out", serialize)
    job = InProcessJob(b.build(), broker, tmp_path / "job")
    job.run_until_idle()
    assert [m.body for m in broker.read("out")] == [b"1", b"3"]
    [letter] = [dead_letter_row(m) for m in broker.read("tsink-dlq")]
    assert "no twos" in letter["error"] and letter["offset"] >= 0
    [join_topic] = [t for t in job.topology.shuffle_topics if "TABLE_JOIN" in t]
    stored = broker.read(join_topic, 0, letter["offset"], letter["offset"] + 1)[0]
    assert decode(stored.key, stored.body, None, framed=True).value == {"k": "a", "n": 2}


def test_a_table_of_an_aggregation(tmp_path: Path) -> None:
    """``count().to_table()``: the table's side comes from the count's shuffle pipeline, its value the
    latest count of the key when a visit is processed."""
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("orders", queues=2)
    broker.create_topic("visits", queues=1)
    b = StreamBuilder("counted", shuffle_queues=2)
    counts = b.source("orders", JsonDeserializer()).key_by(lambda o: o["k"]).count().to_table()
    visits = b.source("visits", JsonDeserializer())
    visits.left_join(counts).where(lambda v: v["k"]).apply(lambda v, n: [v["at"], n]).sink("out", JsonSerializer(with_key=True))
    for orders, seen in (("aab", "abc"), ("bb", "b")):
        broker.send_batch("orders", [json.dumps({"k": k}) for k in orders])
        InProcessJob(b.build(), broker, tmp_path / "job").run_until_idle()
        broker.send_batch("visits", [json.dumps({"k": k, "at": i}) for i, k in enumerate(seen)])
        job = InProcessJob(b.build(), broker, tmp_path / "job")
        job.run_until_idle()
    assert emitted(broker, "out") == {"a": [[0, 2]], "b": [[1, 1], [0, 3]], "c": [[2, None]]}
    assert job.query("LEFT_TABLE_JOIN-6", "b") == 3
