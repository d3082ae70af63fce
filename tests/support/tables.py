"""Tables and stream–table joins: the job's builder, generated table updates (with deletes) and
stream records over a few keys, and the plain Python join replayed over the join's shuffle topic in
the order the join takes its records (data-time order across the producers that wrote to its queue,
whatever the batches)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder
from rstream.shuffle.wire import FramedRecord, decode

KEYS = ("a", "b", "c", "d")

#: One operation: a table update ``("t", key, value or None)`` or a stream record ``("s", key, n)``.
operations = st.lists(
    st.one_of(st.tuples(st.just("t"), st.sampled_from(KEYS), st.one_of(st.none(), st.integers(0, 99))),
              st.tuples(st.just("s"), st.sampled_from(KEYS), st.integers(0, 999))),
    min_size=1, max_size=40)


def enrich(order: dict[str, Any], price: Any) -> list[Any]:
    return [order["n"], price]


def table_job(name: str, how: str) -> StreamBuilder:
    """``orders`` (``{"k", "n"}``) joined with the table of ``prices`` (``{"k", "v"}``, ``v`` None
    deletes), by ``k``; the results ``[n, price]`` keyed by ``k`` in ``out``."""
    b = StreamBuilder(name, shuffle_queues=3)
    prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table()
    orders = b.source("orders", JsonDeserializer())
    joined = orders.join(prices) if how == "inner" else orders.left_join(prices)
    joined.where(lambda o: o["k"]).apply(enrich).sink("out", JsonSerializer(with_key=True))
    return b


def timed_table_job(name: str, how: str, queues: int = 2, out: str = "out") -> StreamBuilder:
    """``table_job`` with data times: ``prices`` ``{"k", "v", "ts"}`` and ``orders`` ``{"k", "n", "ts"}``;
    the results in ``out``."""
    b = StreamBuilder(name, shuffle_queues=queues)
    prices = (b.source("prices", JsonDeserializer()).select_timestamp(lambda p: p["ts"])
              .key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table())
    orders = b.source("orders", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    joined = orders.join(prices) if how == "inner" else orders.left_join(prices)
    joined.where(lambda o: o["k"]).apply(enrich).sink(out, JsonSerializer(with_key=True))
    return b


def write_timed(broker: EmbeddedBroker, prices: list[dict[str, Any]], orders: list[list[dict[str, Any]]]) -> None:
    """Topics ``prices`` (one queue) and ``orders`` (one queue per list of ``orders``) holding them, as
    JSON, written in one append (their born times all 0: their data times are their ``ts``)."""
    broker.create_topic("prices", queues=1)
    broker.create_topic("orders", queues=len(orders))
    broker.append({(topic, queue): [(None, json.dumps(r).encode(), 0, None, None) for r in records]
                   for topic, queue, records in [("prices", 0, prices), *(("orders", q, o) for q, o in enumerate(orders))]})


def joined_in_time_order(prices: list[dict[str, Any]], orders: list[list[dict[str, Any]]],
                         how: str) -> dict[Any, list[Any]]:
    """The plain stream–table join of ``prices`` and ``orders`` (one list per source queue) taken in
    data-time order: at equal times a price first, then orders by queue."""
    timed = sorted([(p["ts"], 0, 0, i, 1, p["k"], p["v"]) for i, p in enumerate(prices)]
                   + [(o["ts"], 1, q, i, 0, o["k"], o) for q, qs in enumerate(orders) for i, o in enumerate(qs)],
                   key=lambda r: r[:4])
    return replay([(side, key, value) for *_order, side, key, value in timed], how)[0]


def as_messages(ops: list[tuple[str, str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The table's and the stream's records of ``ops``, each side in the order given."""
    prices = [{"k": k, "v": v} for side, k, v in ops if side == "t"]
    orders = [{"k": k, "n": v} for side, k, v in ops if side == "s"]
    return prices, orders


def join_queue_records(broker: EmbeddedBroker, topic: str) -> list[tuple[int, Any, Any]]:
    """``(side, key, value)`` of every data record of the join's shuffle ``topic``, queue by queue in
    offset order (a key's records are all in one queue)."""
    out = []
    for queue in range(broker.topic(topic).queues):
        for m in broker.read(topic, queue):
            record = decode(m.key or None, m.body, m.headers, framed=True)
            if isinstance(record, FramedRecord):
                out.append((record.side, record.key, record.value))
    return out


def join_queue_as_taken(broker: EmbeddedBroker, topic: str, before: int | None = None) -> list[tuple[int, Any, Any]]:
    """``(side, key, value)`` of every data record of the join's shuffle ``topic`` in the order the
    join takes them, whatever the batches: queue by queue, each record at its data time or, if later,
    the watermark it carried (a late one); at equal times a table update first, then by producer,
    then each producer's records in their own order. With ``before``, only those taken before the
    operator watermark reached it."""
    out = []
    for queue in range(broker.topic(topic).queues):
        taken = []
        for m in broker.read(topic, queue):
            record = decode(m.key or None, m.body, m.headers, framed=True)
            if isinstance(record, FramedRecord):
                at = max(m.born_timestamp, record.watermark)
                if before is None or at < before:
                    taken.append(((at, record.side != 1, record.producer, m.offset), record))
        out += [(r.side, r.key, r.value) for _order, r in sorted(taken, key=lambda t: t[0])]
    return out


def replay(records: list[tuple[int, Any, Any]], how: str,
           enrich: Callable[[Any, Any], Any] = enrich) -> tuple[dict[Any, list[Any]], dict[Any, Any]]:
    """The plain stream–table join over the join queue's records: per key, what it emits in order
    (``enrich(value, the key's table value)``), and the table at the end. Side 1 updates the table
    (None deletes); side 0 looks its key up."""
    table: dict[Any, Any] = {}
    out: dict[Any, list[Any]] = defaultdict(list)
    for side, key, value in records:
        if side == 1:
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        elif key in table or how == "left":
            out[key].append(enrich(value, table.get(key)))
    return dict(out), table


def changelog_job(name: str, queues: int = 3) -> StreamBuilder:
    """The table of ``prices`` (``{"k", "v", "ts"}``, ``v`` None deletes) and its changelog,
    ``to_stream()``, written to ``changes`` with keys (each message's born time its data time)."""
    b = StreamBuilder(name, shuffle_queues=queues)
    prices = (b.source("prices", JsonDeserializer()).select_timestamp(lambda p: p["ts"])
              .key_by(lambda p: p["k"]).map(lambda p: p["v"]).to_table())
    prices.to_stream().sink("changes", JsonSerializer(with_key=True))
    return b


def changelog(broker: EmbeddedBroker, topic: str = "changes") -> dict[Any, list[tuple[int, Any]]]:
    """Per key, ``(data time, value)`` of each record of ``topic`` in the order of its queue (each key
    must be in one queue)."""
    out: dict[Any, list[tuple[int, Any]]] = defaultdict(list)
    queue_of: dict[Any, int] = {}
    for m in broker.read(topic):
        doc = json.loads(m.body)
        assert queue_of.setdefault(doc["key"], m.queue_id) == m.queue_id, f"key {doc['key']!r} in two queues"
        out[doc["key"]].append((m.born_timestamp, doc["value"]))
    return dict(out)
