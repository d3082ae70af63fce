"""Keyed process functions the tests run in this process and on Spark (the README's examples: an
alert for an order not paid in time, sessions by hand; a processing-time timer; the de-duplication with
a time to live is ``tools.functions.Dedup``, shared with the bench), their generated input and the job
that runs one; compare with ``tests.support.reference.keyed_process``."""

from __future__ import annotations

import random
import textwrap
from typing import Any

from rstream import JsonDeserializer, JsonSerializer, KeyedProcessFunction, StreamBuilder

T0 = 1_700_000_000_000
MINUTE = 60_000


class Unpaid(KeyedProcessFunction[Any, Any]):
    """An alert for each order not paid within ``limit`` ms of data time after it was created."""

    def __init__(self, limit: int = 15 * MINUTE) -> None:
        self.limit = limit

    def process(self, order: Any, event: Any, ctx: Any) -> None:
        if event["type"] == "created":
            ctx.state.set(event["ts"])
            ctx.register_event_time_timer(event["ts"] + self.limit)
        else:  # paid: no alert
            created = ctx.state.get()
            if created is not None:
                ctx.delete_event_time_timer(created + self.limit)
                ctx.state.clear()

    def on_timer(self, order: Any, timestamp: int, ctx: Any) -> None:
        created = ctx.state.get()
        if created is not None:
            ctx.forward(order, {"created": created, "alert_at": timestamp})
            ctx.state.clear()


class Sessions(KeyedProcessFunction[Any, Any]):
    """Sessions by hand: a user's records until ``gap`` ms of data time pass without one; each session
    is emitted as ``[first time, last time, records]`` when the watermark passes its last time + gap."""

    def __init__(self, gap: int) -> None:
        self.gap = gap

    def process(self, user: Any, click: Any, ctx: Any) -> None:
        session = ctx.state.get()
        t = ctx.timestamp
        if session is None:
            session = [t, t, 0]
        else:
            ctx.delete_event_time_timer(session[1] + self.gap)
        session = [min(session[0], t), max(session[1], t), session[2] + 1]
        ctx.state.set(session)
        ctx.register_event_time_timer(session[1] + self.gap)

    def on_timer(self, user: Any, timestamp: int, ctx: Any) -> None:
        ctx.forward(user, ctx.state.get())
        ctx.state.clear()


class Pings(KeyedProcessFunction[Any, Any]):
    """A processing-time timer ``delay`` ms (of wall clock) after each key's first record; it then
    forwards how many records the key had."""

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def process(self, key: Any, value: Any, ctx: Any) -> None:
        n = ctx.state.get(0)
        if n == 0:
            ctx.register_processing_time_timer(ctx.current_processing_time() + self.delay)
        ctx.state.set(n + 1)

    def on_timer(self, key: Any, timestamp: int, ctx: Any) -> None:
        assert ctx.time_domain == "processing_time"
        ctx.forward(key, ctx.state.get())
        ctx.state.clear()


def events(n: int, seed: int, keys: int = 4, step: int = 1000, disorder: int = 4000) -> list[dict[str, Any]]:
    """Clicks of ``keys`` users, ``step`` ms apart on average, up to ``disorder`` ms out of order."""
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(keys)}", "ts": T0 + i * step - rng.randrange(disorder), "n": i}
            for i in range(n)]


def orders(n: int, seed: int, disorder: int = 3 * MINUTE) -> list[dict[str, Any]]:
    """``n`` orders created a minute apart, most paid 1 to 30 minutes later, in order of time give or
    take ``disorder`` ms."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        created = T0 + i * MINUTE
        out.append({"order": f"o{i}", "type": "created", "ts": created})
        if rng.random() < 0.8:
            out.append({"order": f"o{i}", "type": "paid", "ts": created + rng.randint(1, 30) * MINUTE})
    noisy = [(e["ts"] + rng.randrange(disorder), k, e) for k, e in enumerate(out)]
    return [e for _t, _k, e in sorted(noisy)]


def process_job(job: str, fn: Any, key: str = "user", source: str = "events", sink: str = "out",
                shuffle_queues: int = 3) -> StreamBuilder:
    """``source`` (JSON, data time ``ts``) keyed by ``key``, through ``fn``, into ``sink`` as JSON with keys."""
    b = StreamBuilder(job, shuffle_queues=shuffle_queues)
    (b.source(source, JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e[key])
     .process(fn).to_rstream().sink(sink, JsonSerializer(with_key=True)))
    return b


#: The unpaid-orders job started in a process of its own, to be killed with SIGKILL mid-batch: ``python -c
#: UNPAID_TO_KILL <broker> <data_dir> <spark tmp dir> <job id> <records per batch>``, the broker as
#: ``tests.support.jobs.broker_arg`` gives it.
UNPAID_TO_KILL = textwrap.dedent("""
    import pickle, sys, time
    from rstream import RocketMQStream, get_spark
    from tests.support.process import Unpaid, process_job
    broker = pickle.loads(bytes.fromhex(sys.argv[1]))
    spark = get_spark("local[2]", tmp_dir=sys.argv[3])
    job = RocketMQStream(process_job(sys.argv[4], Unpaid(), key="order", source="orders").build(),
                         {"data_dir": sys.argv[2], "max_records_per_queue": int(sys.argv[5]), "trigger_interval_ms": 20,
                          "allowed_lateness_ms": 1000, "idle_timeout_ms": 600_000}, broker=broker, spark=spark)
    job.start()
    print("started", flush=True)
    time.sleep(600)
""")
