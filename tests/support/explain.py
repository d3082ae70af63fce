"""What the ``explain`` tests share: generated records that name themselves (``id``, key ``k``, data time
``ts``, out of order), where each landed, sums whose bits name the records that went into them, and a
job with a window and a stream–table join to be killed with SIGKILL mid-run (``EXPLAIN_TO_KILL``)."""

from __future__ import annotations

import json
import random
import textwrap
from typing import Any

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow

T0 = 1_700_000_000_000
SIZE = 10_000
Where = tuple[str, int, int]


def generate(broker: EmbeddedBroker, n: int, seed: int, keys: int = 3, topic: str = "in", queues: int = 2,
             disorder: int = 3000, side: str = "") -> dict[int, Where]:
    """``n`` records ``{"id", "k", "ts", "side"}`` round robin over the queues; where each id landed."""
    rng = random.Random(seed)
    broker.create_topic(topic, queues=queues)
    base = {"": 0, "L": 10_000, "R": 20_000}[side]  # ids of both sides of a join apart
    records = [{"id": base + i, "k": f"k{rng.randrange(keys)}", "ts": T0 + i * 700 - (rng.randrange(disorder) if disorder else 0),
                "side": side} for i in range(n)]
    broker.send_batch(topic, [json.dumps(r) for r in records])
    return {json.loads(m.body)["id"]: (topic, m.queue_id, m.offset) for m in broker.read(topic)}


def by_queue(broker: EmbeddedBroker, topic: str = "in") -> dict[int, list[dict[str, Any]]]:
    return {q: [json.loads(m.body) for m in broker.read(topic, q)] for q in range(broker.topic(topic).queues)}


def bits(n: int) -> set[int]:
    return {i for i in range(n.bit_length()) if n >> i & 1}


def table_updates(broker: EmbeddedBroker, n: int, seed: int, taken: set[int], keys: int = 3,
                  topic: str = "tbl", disorder: int = 3000) -> dict[int, Where]:
    """``n`` table updates ``{"id", "k", "ts", "delete"}`` (ids from 30 000; about one in six deletes
    its key) in one queue, each data time unlike any in ``taken`` (which gets them); where each id landed."""
    rng = random.Random(seed)
    broker.create_topic(topic, queues=1)
    records = []
    for i in range(n):
        ts = T0 + i * 900 - rng.randrange(disorder)
        while ts in taken:
            ts += 1
        taken.add(ts)
        records.append({"id": 30_000 + i, "k": f"k{rng.randrange(keys)}", "ts": ts, "delete": rng.random() < 0.17})
    broker.send_batch(topic, [json.dumps(r) for r in records])
    return {json.loads(m.body)["id"]: (topic, m.queue_id, m.offset) for m in broker.read(topic)}


def table_value(update: dict[str, Any]) -> Any:
    """What an update of ``table_updates`` sets its key to: its own id (None: it deletes the key)."""
    return None if update["delete"] else update["id"]


def window_and_table_join(name: str, how: str = "left") -> StreamBuilder:
    """``in`` -> key by ``k`` -> 10 s tumbling sum of ``1 << id`` -> ``out`` (the sum's bits name its
    records); ``in`` joined (``how``) with the table of ``tbl`` by ``k`` -> ``enriched``: ``[id, the id of
    the table's update of the key, or None]``. Every sink JSON with keys."""
    b = StreamBuilder(name, shuffle_queues=2)
    records = b.source("in", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
    (records.key_by(lambda r: r["k"]).window(TumblingWindow(Time.milliseconds(SIZE))).sum(lambda r: 1 << r["id"])
     .to_rstream().sink("out", JsonSerializer(with_key=True)))
    table = (b.source("tbl", JsonDeserializer()).select_timestamp(lambda u: u["ts"]).key_by(lambda u: u["k"])
             .map(table_value).to_table())
    joined = records.join(table) if how == "inner" else records.left_join(table)
    joined.where(lambda r: r["k"]).apply(lambda r, t: [r["id"], t]).sink("enriched", JsonSerializer(with_key=True))
    return b


#: EXPLAIN_TO_KILL <broker> <data_dir> <spark tmp dir> <job id> <records per batch> <allowed lateness ms>``,
#: the broker as ``tests.support.jobs.broker_arg`` gives it: ``window_and_table_join`` running until killed.
EXPLAIN_TO_KILL = textwrap.dedent("""
    import pickle, sys, time
    from rstream import RocketMQStream, get_spark
    from tests.support.explain import window_and_table_join
    broker = pickle.loads(bytes.fromhex(sys.argv[1]))
    spark = get_spark("local[2]", tmp_dir=sys.argv[3], warm_up=False)
    job = RocketMQStream(window_and_table_join(sys.argv[4]).build(),
                         {"data_dir": sys.argv[2], "max_records_per_queue": int(sys.argv[5]), "trigger_interval_ms": 20,
                          "allowed_lateness_ms": int(sys.argv[6]), "idle_timeout_ms": 3_600_000}, broker=broker, spark=spark)
    job.start()
    print("started", flush=True)
    time.sleep(600)
""")
