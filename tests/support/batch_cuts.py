"""One job, its input cut into batches in different ways: generated jobs of every operator kind, their
generated out-of-order input (some records late), a run of a job at a batch cap with restarts (a new
driver from the commits, the local state deleted) on the way, and what its sinks hold, ready to be
compared between two runs.

A sink is compared as each key's results *in order* where the operator promises an order per key
(windows fire in order of their ends; process functions and the stream–table join take their records
in data-time order; a running count counts up), as each key's multiset elsewhere (a join's pairs and
late records come in the order their records arrived)."""

from __future__ import annotations

import json
import random
import shutil
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    KeyedProcessFunction,
    SessionWindow,
    SlidingWindow,
    StreamBuilder,
    TumblingWindow,
)
from rstream.runtime.inprocess import InProcessJob
from tests.support.bucket_max import bucket_max
from tests.support.process import Sessions
from tools.functions import Dedup

T0 = 1_700_000_000_000
LATENESS = 2000
#: No idleness: a run's results depend on its input only (idleness is processing time by definition).
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 3_600_000}
#: Source topics and their queues: a stream of two queues and one of a single queue.
QUEUES = {"a": 2, "b": 1}
IN_ORDER, MULTISET = "in order", "multiset"


def ts(r: dict[str, Any]) -> int:
    return int(r["ts"])


def k(r: dict[str, Any]) -> Any:
    return r["k"]


def v(r: dict[str, Any]) -> Any:
    return r["v"]


class BothTimers(KeyedProcessFunction[Any, Any]):
    """Per key, the values of each 5 s of data time (an event-time timer at the next multiple of 5 s
    after the first record), and a processing-time timer an hour of wall clock away, set and deleted
    again: processing time never fires within a test, and must not change what event time does."""

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        got = ctx.state.get()
        if got is None:
            got = []
            ctx.register_event_time_timer(ctx.timestamp // 5000 * 5000 + 5000)
            far = ctx.current_processing_time() + 3_600_000
            ctx.register_processing_time_timer(far)
            ctx.delete_processing_time_timer(far)
        ctx.state.set([*got, value["v"]])

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(key, [timestamp, ctx.state.get()])
        ctx.state.clear()


def _a(b: StreamBuilder) -> Any:
    return b.source("a", JsonDeserializer()).select_timestamp(ts)


def _b(b: StreamBuilder) -> Any:
    return b.source("b", JsonDeserializer()).select_timestamp(ts)


def _sink(stream: Any, topic: str) -> None:
    stream.sink(topic, JsonSerializer(with_key=True))


#: ``build(builder, sink)``: a job's nodes, its results to topic ``sink`` (and its late records, if any,
#: to ``sink + "-late"``).
Build = Callable[[StreamBuilder, str], None]


def _windowed(window: Any, agg: str, late: bool = False) -> Build:
    def build(b: StreamBuilder, out: str) -> None:
        ws = _a(b).union(_b(b)).key_by(k).window(window)
        result = ws.count() if agg == "count" else getattr(ws, agg)(v)
        _sink(result.to_rstream(), out)
        if late:
            _sink(result.late(), out + "-late")
    return build


def _process(fn: Any) -> Build:
    def build(b: StreamBuilder, out: str) -> None:
        _sink(_a(b).union(_b(b)).key_by(k).process(fn).to_rstream(), out)
    return build


def _running_count(b: StreamBuilder, out: str) -> None:
    _sink(_a(b).union(_b(b)).key_by(k).count().to_rstream(), out)


def _pair(left: Any, right: Any) -> list[Any]:
    return [left["v"], None if right is None else right["v"]]


def _joined(how: str, window: Any = None, between: tuple[int, int] | None = None) -> Build:
    def build(b: StreamBuilder, out: str) -> None:
        joined = (_a(b).join(_b(b)) if how == "inner" else _a(b).left_join(_b(b))).where(k).equal_to(k)
        if window is not None:
            joined = joined.window(window)
        if between is not None:
            joined = joined.between(*between)
        pairs = joined.apply(_pair)
        _sink(pairs, out)
        _sink(pairs.late(), out + "-late")
    return build


def _priced(order: Any, price: Any) -> list[Any]:
    return [order["v"], price]


def _table(b: StreamBuilder) -> Any:
    return _b(b).key_by(k).map(v).to_table()


def _table_joined(how: str) -> Build:
    def build(b: StreamBuilder, out: str) -> None:
        stream = _a(b)
        joined = stream.join(_table(b)) if how == "inner" else stream.left_join(_table(b))
        _sink(joined.where(k).apply(_priced), out)
    return build


def _table_then_window(b: StreamBuilder, out: str) -> None:
    enriched = _a(b).left_join(_table(b)).where(k).apply(lambda o, price: [o["k"], price, o["v"]])
    _sink(enriched.key_by(lambda e: e[1]).window(TumblingWindow(4000)).count().to_rstream(), out)


def _process_then_window(b: StreamBuilder, out: str) -> None:
    firsts = _a(b).union(_b(b)).key_by(k).process(Dedup(3000))
    _sink(firsts.to_rstream().map(v).key_by(lambda x: x % 3).window(TumblingWindow(4000)).sum(lambda x: x)
          .to_rstream(), out)


class Spread:
    """An accumulator of its own: the smallest and largest value, as ``[low, high]``."""

    def initial(self) -> Any:
        return None

    def add(self, acc: Any, x: int) -> Any:
        return [x, x] if acc is None else [min(acc[0], x), max(acc[1], x)]

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else [min(a[0], b[0]), max(a[1], b[1])]

    def result(self, acc: Any) -> Any:
        return acc


def _windowed_by(window: Any, make: Callable[[Any], Any]) -> Build:
    def build(b: StreamBuilder, out: str) -> None:
        _sink(make(_a(b).union(_b(b)).key_by(k).map(v).window(window)).to_rstream(), out)
    return build


def _stateless_then_count(b: StreamBuilder, out: str) -> None:
    words = _a(b).union(_b(b)).filter(lambda r: r["v"] % 5 != 0).flat_map(lambda r: [r["k"], r["k"] + "-twin"])
    _sink(words.key_by(lambda w: w).count().to_rstream(), out)


def _one_queue_reduce(b: StreamBuilder, out: str) -> None:
    """A running reduce over one source queue: its updates in that queue's order (over several source
    queues a running aggregation's updates come in the order the shuffle topic received them)."""
    _sink(_b(b).key_by(k).map(v).reduce(lambda x, y: x * 3 + y).to_rstream(), out)


#: A running aggregation's ``order`` that takes records in data-time order.
DATA_TIME = "data_time"


def _running(how: Callable[[Any], Any]) -> Build:
    """A running aggregation over several source queues (``how(grouped)``): its updates depend on the
    order it folds records in."""
    def build(b: StreamBuilder, out: str) -> None:
        _sink(how(_a(b).union(_b(b)).key_by(k).map(v)).to_rstream(), out)
    return build


def _changelog(b: StreamBuilder, out: str) -> None:
    _sink(_table(b).to_stream(), out)


def _newcomer(b: StreamBuilder, out: str) -> None:
    """A newcomer's operator, written against the operator contract alone (``tests.support.bucket_max``)."""
    _sink(bucket_max(_a(b).union(_b(b)).key_by(k).map(v), 4000).to_rstream(), out)


#: Every job: its builder, and whether its results (``""``) and its late records (``"-late"``) are
#: compared per key in order or as a multiset.
JOBS: dict[str, tuple[Build, dict[str, str]]] = {
    "tumbling count": (_windowed(TumblingWindow(4000), "count", late=True), {"": IN_ORDER, "-late": MULTISET}),
    "sliding sum": (_windowed(SlidingWindow(4000, 2000), "sum"), {"": IN_ORDER}),
    "session max": (_windowed(SessionWindow(1500), "max", late=True), {"": IN_ORDER, "-late": MULTISET}),
    "tumbling avg": (_windowed(TumblingWindow(3000), "avg"), {"": IN_ORDER}),
    "running count": (_running_count, {"": IN_ORDER}),
    "dedup": (_process(Dedup(3000)), {"": IN_ORDER}),
    "sessions by hand": (_process(Sessions(1500)), {"": IN_ORDER}),
    "both timer kinds": (_process(BothTimers()), {"": IN_ORDER}),
    "windowed join": (_joined("inner", window=TumblingWindow(4000)), {"": MULTISET, "-late": MULTISET}),
    "windowed left join": (_joined("left", window=TumblingWindow(4000)), {"": MULTISET, "-late": MULTISET}),
    "interval join": (_joined("inner", between=(-1000, 2000)), {"": MULTISET, "-late": MULTISET}),
    "interval left join": (_joined("left", between=(-1000, 2000)), {"": MULTISET, "-late": MULTISET}),
    "table join": (_table_joined("inner"), {"": IN_ORDER}),
    "table left join": (_table_joined("left"), {"": IN_ORDER}),
    "table join, then windows": (_table_then_window, {"": IN_ORDER}),
    "process, then windows": (_process_then_window, {"": IN_ORDER}),
    "a newcomer's operator": (_newcomer, {"": IN_ORDER}),
    "sliding count": (_windowed(SlidingWindow(4000, 2000), "count"), {"": IN_ORDER}),
    "session count": (_windowed(SessionWindow(1500), "count"), {"": IN_ORDER}),
    "tumbling min": (_windowed(TumblingWindow(4000), "min"), {"": IN_ORDER}),
    "tumbling reduce": (_windowed_by(TumblingWindow(4000), lambda ws: ws.reduce(lambda x, y: x + y)),
                        {"": IN_ORDER}),
    "sliding aggregate": (_windowed_by(SlidingWindow(4000, 2000), lambda ws: ws.aggregate(Spread())), {"": IN_ORDER}),
    "session reduce": (_windowed_by(SessionWindow(1500), lambda ws: ws.reduce(max)), {"": IN_ORDER}),
    "filter, flat_map, count": (_stateless_then_count, {"": IN_ORDER}),
    "running reduce, one queue": (_one_queue_reduce, {"": IN_ORDER}),
    "table changelog": (_changelog, {"": IN_ORDER}),
    "running sum": (_running(lambda g: g.sum(lambda x: x, order=DATA_TIME)), {"": IN_ORDER}),
    "running max": (_running(lambda g: g.max(lambda x: x, order=DATA_TIME)), {"": IN_ORDER}),
    "running reduce": (_running(lambda g: g.reduce(lambda a, x: (a * 7 + x) % 1_000_003, order=DATA_TIME)),
                       {"": IN_ORDER}),
    "running aggregate": (_running(lambda g: g.aggregate(Spread(), order=DATA_TIME)), {"": IN_ORDER}),
}

#: Jobs whose intermediate updates depend on the batch cuts by design (in arrival order: only each key's
#: last update is the same), run by ``run_cut`` but not in ``JOBS``.
ARRIVAL_ORDER: dict[str, tuple[Build, dict[str, str]]] = {
    "running sum in arrival order": (_running(lambda g: g.sum(lambda x: x)), {"": IN_ORDER}),
}


def sink_name(name: str) -> str:
    """The sink topic of job ``name`` when several jobs run as one."""
    return "out-" + "".join(c if c.isalnum() else "-" for c in name)


def build(names: list[str], job: str = "cuts") -> StreamBuilder:
    """One job doing what every job of ``names`` does, each into its own sinks (``sink_name``)."""
    b = StreamBuilder(job, shuffle_queues=2)
    for name in names:
        {**JOBS, **ARRIVAL_ORDER}[name][0](b, sink_name(name))
    return b


def sinks(names: list[str]) -> dict[str, str]:
    """Every sink of the jobs ``names`` and how it is compared."""
    return {sink_name(name) + suffix: how for name in names for suffix, how in {**JOBS, **ARRIVAL_ORDER}[name][1].items()}


def inputs(seed: int, n: int, keys: int = 3, step: int = 700, disorder: int = 5000) -> dict[str, list[list[Any]]]:
    """Per source topic, per queue, records ``{"k", "v", "ts"}``: ``step`` ms apart on average, up to
    ``disorder`` ms out of order (more than the lateness: some are late), a few keys."""
    rng = random.Random(seed)
    out: dict[str, list[list[Any]]] = {}
    serial = 0
    for topic, queues in QUEUES.items():
        out[topic] = [[] for _ in range(queues)]
        for i in range(n if topic == "a" else max(1, n // 2)):
            rec = {"k": f"k{rng.randrange(keys)}", "v": serial, "ts": T0 + i * step - rng.randrange(disorder)}
            serial += 1
            out[topic][rng.randrange(queues)].append(rec)
    return out


def write(broker: EmbeddedBroker, data: dict[str, list[list[Any]]]) -> None:
    """Each topic with its queues, each queue's records in order."""
    for topic, queues in data.items():
        broker.create_topic(topic, queues=len(queues))
        for q, records in enumerate(queues):
            if records:
                broker.send_batch(topic, [json.dumps(r) for r in records], queue=q)


def run_cut(names: list[str], data: dict[str, list[list[Any]]], root: Path, cap: int,
            restarts: Iterable[int] = (), lose_state: bool = False,
            optimize: Iterable[str] | None = None) -> dict[str, dict[Any, list[Any]]]:
    """The jobs ``names`` of ``JOBS``, as one job, in this process over ``data`` at batch cap ``cap``; after
    each batch number in ``restarts`` a new driver goes on from the commits (with ``lose_state``, the
    local state deleted first: the next batches replay it); at the end of input, the idle flush.
    ``optimize``: the topology's rewrites (``build(optimize=...)``; None: all). Returns each sink's
    records per key."""
    broker = EmbeddedBroker(root / "broker")
    write(broker, data)
    topology = build(names).build(optimize=optimize)
    props = {**EXACT, "max_records_per_queue": cap}
    job = InProcessJob(topology, broker, root / "job", props)
    stops = sorted(set(restarts))
    batches = 0
    while job.run_batch():
        batches += 1
        if batches in stops:
            if lose_state:
                shutil.rmtree(root / "job" / "state", ignore_errors=True)
            job = InProcessJob(topology, broker, root / "job", props)
    job.run_until_idle()
    return read_sinks(broker, names)


def read_sinks(broker: Any, names: list[str]) -> dict[str, dict[Any, list[Any]]]:
    """Each sink of the jobs ``names``: its records per key, as ``sinks`` says to compare them. None of
    their functions raises: a dead letter is an error of the test's job."""
    dead = [m for t in broker.topics() if t.name.endswith("-dlq") for m in broker.read(t.name)]
    assert not dead, f"dead letters: {[m.headers for m in dead[:3]]}"
    return {sink: per_key(broker, sink, how) for sink, how in sinks(names).items()}


def per_key(broker: Any, topic: str, how: str) -> dict[Any, list[Any]]:
    """Each key's values in ``topic`` (JSON with keys): in the order written, or sorted (``MULTISET``)."""
    if not broker.has_topic(topic):
        return {}
    out: dict[Any, list[Any]] = defaultdict(list)
    for m in sorted(broker.read(topic), key=lambda m: (m.queue_id, m.offset)):
        doc = json.loads(m.body)
        out[json.dumps(doc["key"])].append(json.dumps(doc["value"], sort_keys=True))
    if how == MULTISET:
        return {key: sorted(values) for key, values in out.items()}
    return dict(out)


def differences(a: dict[str, dict[Any, list[Any]]], b: dict[str, dict[Any, list[Any]]]) -> list[str]:
    """Where two runs' sinks differ, per sink and key, in words (empty: the same)."""
    out = []
    for sink in sorted(set(a) | set(b)):
        x, y = a.get(sink, {}), b.get(sink, {})
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                out.append(f"{sink} key {key}: {x.get(key)} != {y.get(key)}")
    return out
