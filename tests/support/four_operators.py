"""Issue 40's four operators in one job, to be killed with SIGKILL mid-run: two click topics unioned
into a windowed count whose late records go on as a stream (``.late()``), an interval left join of
orders and payments, and the orders enriched from a table of customer tiers. Its generated input
(fixed seeds, out of order, some records late), the job's builder, the script that runs it in a
process of its own, and the plain Python references for every sink and for the state."""

from __future__ import annotations

import json
import random
import textwrap
from collections import Counter
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, TumblingWindow
from tests.support.reference import fixed_windows, split_late
from tests.support.tables import replay

T0 = 1_700_000_000_000
LATENESS = 2000
WINDOW = 4000
LOWER, UPPER = -1000, 5000  # a payment up to 1 s before its order, or 5 s after it
#: No idleness mid-run, even where kills, restarts and a loaded machine take minutes: exact results.
EXACT = {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 3_600_000}
#: Source topics and their queues.
QUEUES = {"clicks-web": 2, "clicks-app": 1, "orders": 2, "payments": 1, "tiers": 1}
CUSTOMERS = 6


def pair(order: dict[str, Any], payment: Any) -> list[Any]:
    return [order["v"], None if payment is None else payment["v"]]


def enrich(order: dict[str, Any], tier: Any) -> list[Any]:
    return [order["v"], tier]


def four_operators(job: str) -> StreamBuilder:
    """clicks-web ∪ clicks-app -> key by user -> 4 s tumbling count -> ``counts``, its late records ->
    ``late-clicks``; orders ⟕ payments by order id within [-1 s, 5 s] -> ``paid`` (``[order v, payment v
    or None]``); orders ⋈ the table of tiers by customer -> ``enriched`` (``[order v, tier]``). Every
    sink JSON with keys."""
    b = StreamBuilder(job, shuffle_queues=2)
    web = b.source("clicks-web", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    app = b.source("clicks-app", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    counts = web.union(app).key_by(lambda e: e["user"]).window(TumblingWindow(WINDOW)).count()
    counts.to_rstream().sink("counts", JsonSerializer(with_key=True))
    counts.late().sink("late-clicks", JsonSerializer(with_key=True))

    orders = b.source("orders", JsonDeserializer()).select_timestamp(lambda o: o["ts"])
    payments = b.source("payments", JsonDeserializer()).select_timestamp(lambda p: p["ts"])
    (orders.left_join(payments).where(lambda o: o["id"]).equal_to(lambda p: p["id"]).between(LOWER, UPPER)
     .apply(pair).sink("paid", JsonSerializer(with_key=True)))

    tiers = (b.source("tiers", JsonDeserializer()).select_timestamp(lambda t: t["ts"]).key_by(lambda t: t["customer"])
             .map(lambda t: t["tier"]).to_table())
    orders.join(tiers).where(lambda o: o["customer"]).apply(enrich).sink("enriched", JsonSerializer(with_key=True))
    return b


def inputs(seed: int) -> dict[str, list[dict[str, Any]]]:
    """Every source topic's records, in the order they are sent (round robin over its queues): times
    roughly increasing over 30 s, up to 4 s out of order (so some are behind the 2 s lateness); a
    payment for most orders, 2 s before to 12 s after it (some outside the interval); tier updates,
    a few of them deletes (``tier`` None), over the first 30 s, up to 1.5 s out of order."""
    rng = random.Random(seed)

    def clicks(n: int, tag: str) -> list[dict[str, Any]]:
        return [{"user": f"u{rng.randrange(4)}", "ts": T0 + i * 30_000 // n - rng.randrange(4000), "v": f"{tag}{i}"}
                for i in range(n)]

    orders = [{"id": f"o{i}", "customer": f"c{rng.randrange(CUSTOMERS)}", "ts": T0 + i * 30_000 // 60 - rng.randrange(4000),
               "v": f"o{i}"} for i in range(60)]
    paid = [{"id": o["id"], "ts": T0 + int(o["id"][1:]) * 500 + rng.randint(-2000, 8000), "v": f"p{k}"}
            for k, o in enumerate(o for o in orders if rng.random() < 0.8)]
    noisy = sorted((p["ts"] + rng.randrange(3000), k) for k, p in enumerate(paid))
    tiers = [{"customer": f"c{rng.randrange(CUSTOMERS)}", "tier": None if rng.random() < 0.15 else rng.choice("abc"),
              "ts": T0 + i * 1000 - rng.randrange(1500)} for i in range(30)]
    return {"clicks-web": clicks(90, "w"), "clicks-app": clicks(45, "a"), "orders": orders,
            "payments": [paid[k] for _t, k in noisy], "tiers": tiers}


def send_all(broker: EmbeddedBroker, seed: int) -> None:
    for topic, records in inputs(seed).items():
        broker.create_topic(topic, queues=QUEUES[topic])
        broker.send_batch(topic, [json.dumps(r) for r in records])


def stored(broker: EmbeddedBroker, *topics: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every record of ``topics`` per (topic, queue), in offset order, as the broker holds them (what
    lateness is judged by)."""
    return {(t, q): [json.loads(m.body) for m in broker.read(t, q)] for t in topics for q in range(QUEUES[t])}


def on_time_and_late(broker: EmbeddedBroker, *topics: str) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], int]]]:
    return split_late(stored(broker, *topics), lambda e: e["ts"], LATENESS)


def final_watermark(broker: EmbeddedBroker, *topics: str) -> int:
    """The operator watermark over ``topics`` once all of them is read, without idleness: the minimum
    over their queues of (latest data time - lateness)."""
    return min(max(e["ts"] for e in records) - LATENESS for records in stored(broker, *topics).values())


def window_counts(clicks: list[dict[str, Any]]) -> dict[tuple[str, int, int], int]:
    """Per (user, start, end): the count of ``clicks`` in that 4 s window."""
    return dict(Counter((c["user"], *w) for c in clicks for w in fixed_windows(c["ts"], WINDOW)))


def late_clicks(late: list[tuple[dict[str, Any], int]]) -> list[tuple[Any, ...]]:
    """The late clicks as ``(user, click as JSON text, data time, watermark, cause)``, sorted, as
    ``tests.support.late.late_stream`` reads the late sink."""
    return sorted((c["user"], json.dumps(c), c["ts"], wm, "behind watermark") for c, wm in late)


def enrichments(records: list[tuple[int, Any, Any]]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """The plain stream–table join over the join queues' records as the join takes them
    (``tests.support.tables.join_queue_as_taken``):
    every ``(customer, [order v, tier])`` it emits, sorted as ``sink`` sorts, and the table at the end.
    Side 1 sets a customer's tier (None deletes it); side 0, an order, is enriched when its customer
    has one."""
    out, table = replay(records, "inner", enrich)
    return sorted(((key, v) for key, values in out.items() for v in values), key=json.dumps), table


def sink(broker: EmbeddedBroker, topic: str) -> list[tuple[str, Any]]:
    """Every ``(key, value)`` a JSON sink wrote, sorted by their text (so duplicates stay visible)."""
    docs = [json.loads(m.body) for m in broker.read(topic)] if broker.has_topic(topic) else []
    return sorted(((d["key"], d["value"]) for d in docs), key=json.dumps)


#: The job started in a process of its own, to be killed with SIGKILL mid-run: ``python -c
#: FOUR_OPERATORS_TO_KILL <broker> <data_dir> <spark tmp dir> <job id> <records per batch>``, the broker
#: as ``tests.support.jobs.broker_arg`` gives it.
FOUR_OPERATORS_TO_KILL = textwrap.dedent("""
    import pickle, sys, time
    from rstream import RocketMQStream, get_spark
    from tests.support.four_operators import EXACT, four_operators
    broker = pickle.loads(bytes.fromhex(sys.argv[1]))
    spark = get_spark("local[2]", tmp_dir=sys.argv[3], warm_up=False)
    job = RocketMQStream(four_operators(sys.argv[4]).build(),
                         {"data_dir": sys.argv[2], "max_records_per_queue": int(sys.argv[5]), "trigger_interval_ms": 20,
                          **EXACT}, broker=broker, spark=spark)
    job.start()
    print("started", flush=True)
    time.sleep(600)
""")
