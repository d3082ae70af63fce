"""Operators that keep records waiting, in this process (no Spark, the embedded broker): how their time
grows with the records they hold, against a plain Python loop doing the same in the same run.

    python bench/operators.py               # 20 K and 40 K records per part
    python bench/operators.py --records 5000 --repeat 1   # smoke run

(i) interval join: one key, left and right records alternating a millisecond apart, joined within
    ``[0, 1]`` ms (each record meets one or two partners) while the allowed lateness keeps every record
    waiting: the join's waiting list of the key grows to all of them. Timed at N and 2N records; a
    join that rewrote the key's whole list per record took four times as long for twice the records,
    a linear one takes twice. Baseline: plain Python with a sorted list per side and ``bisect``.
(p) keyed process function: a de-duplication with a time to live (as ``tests/support/process.py``'s) over
    N out-of-order events of 50 keys in 4 source queues, which it takes in data-time order (each
    record held until the watermark passes it). Baseline: the same function over the events sorted
    by time in a plain loop with a dict per key.
(s) running sum: the same N events, ``sum`` of ``n`` per key, in arrival order (the default, as RocketMQ
    Streams folds) and in data-time order (``order="data_time"``: each record held until the watermark
    passes it; the same updates at any batch cut). Baseline: plain Python's running sums per key over
    the events sorted by time. Reported: each order's time over the loop, and data-time over arrival
    (what the order costs).

Each part's sink is checked against its baseline's answer before a time is reported. Writes JSON to
``bench/out/operators-<commit>.json`` (``--json`` elsewhere); ``RESULTS.md`` holds the current rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left, insort
from functools import partial
from pathlib import Path
from statistics import median
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO))

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder  # noqa: E402
from rstream.runtime.inprocess import InProcessJob  # noqa: E402
from tools.functions import Dedup  # noqa: E402

T0 = 1_700_000_000_000
#: Nothing expires while a part runs: every record waits (the interval join), no source goes idle.
HOLD = {"allowed_lateness_ms": 10**9, "idle_timeout_ms": 10**9}


def _timed(fn: Any, repeat: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        began = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - began)
    return median(times), result


# -- (i) interval join --------------------------------------------------------------------------------
def _interval_records(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    lefts = [{"id": "hot", "ts": T0 + 2 * i, "v": i} for i in range(n // 2)]
    rights = [{"id": "hot", "ts": T0 + 2 * i + 1, "v": i} for i in range(n // 2)]
    return lefts, rights


def _interval_job(tmp: Path, lefts: list[dict[str, Any]], rights: list[dict[str, Any]]) -> list[tuple[int, int]]:
    broker = EmbeddedBroker(tmp / "broker")
    for topic, records in (("left", lefts), ("right", rights)):
        broker.create_topic(topic, queues=1)
        broker.send_batch(topic, [json.dumps(r) for r in records])
    b = StreamBuilder("interval", shuffle_queues=1)
    left = b.source("left", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    right = b.source("right", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
    (left.join(right).where(lambda e: e["id"]).equal_to(lambda e: e["id"]).between(0, 1)
     .apply(lambda a, z: [a["v"], z["v"]]).sink("joined", JsonSerializer()))
    job = InProcessJob(b.build(), broker, tmp / "job", HOLD)
    began = time.perf_counter()
    job.run_until_idle(fire_idle=False)
    elapsed = time.perf_counter() - began
    pairs = sorted(tuple(json.loads(m.body)) for m in broker.read("joined"))
    return [elapsed, pairs]  # type: ignore[list-item]


def _interval_plain(lefts: list[dict[str, Any]], rights: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Both sides in the order the join reads them (lefts, then rights), each waiting in a sorted list."""
    waiting: dict[int, list[tuple[int, int]]] = {0: [], 1: []}
    pairs = []
    for side, records in ((0, lefts), (1, rights)):
        for r in records:
            others = waiting[1 - side]
            lo, hi = (r["ts"], r["ts"] + 1) if side == 0 else (r["ts"] - 1, r["ts"])
            for _ts, v in others[bisect_left(others, (lo,)):bisect_left(others, (hi + 1,))]:
                pairs.append((r["v"], v) if side == 0 else (v, r["v"]))
            insort(waiting[side], (r["ts"], r["v"]))
    return sorted(pairs)


def bench_interval(tmp: Path, n: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _interval_job(tmp / "warm-up", *_interval_records(200))  # imports and first calls, not timed
    for size in (n, 2 * n):
        lefts, rights = _interval_records(size)
        plain_s, want = _timed(partial(_interval_plain, lefts, rights), repeat)
        runs = []
        for i in range(repeat):
            folder = tmp / f"interval-{size}-{i}"
            elapsed, got = _interval_job(folder, lefts, rights)
            shutil.rmtree(folder, ignore_errors=True)
            if got != want:
                raise SystemExit(f"interval join of {size} records: {len(got)} pairs, the plain loop {len(want)}")
            runs.append(elapsed)
        out[str(size)] = {"rstream_s": median(runs), "plain_s": plain_s, "pairs": len(want)}
    small, large = out[str(n)], out[str(2 * n)]
    out["growth"] = large["rstream_s"] / small["rstream_s"]  # 2.0: linear; 4.0: quadratic
    out["ratio_plain"] = large["plain_s"] / large["rstream_s"]
    return out


# -- (p) keyed process function -----------------------------------------------------------------------
def _events(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"user": f"u{rng.randrange(50)}", "ts": T0 + i * 100 - rng.randrange(1500), "n": i} for i in range(n)]


def _dedup_plain(events: list[dict[str, Any]], ttl: int) -> list[int]:
    last: dict[str, int] = {}
    out = []
    for e in sorted(events, key=lambda e: (e["ts"], e["n"])):
        if e["user"] not in last or e["ts"] >= last[e["user"]] + ttl:
            last[e["user"]] = e["ts"]
            out.append(e["n"])
    return sorted(out)


def _dedup_job(ttl: int) -> StreamBuilder:
    b = StreamBuilder("dedup", shuffle_queues=3)
    (b.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .process(Dedup(ttl)).to_rstream().sink("out", JsonSerializer(with_key=True)))
    return b


def bench_process(tmp: Path, n: int, repeat: int) -> dict[str, Any]:
    events = _events(n)
    ttl = 10_000
    plain_s, want = _timed(lambda: _dedup_plain(events, ttl), repeat)
    runs = []
    for i in range(repeat):
        folder = tmp / f"process-{i}"
        broker = EmbeddedBroker(folder / "broker")
        broker.create_topic("events", queues=4)
        broker.send_batch("events", [json.dumps(e) for e in events])
        job = InProcessJob(_dedup_job(ttl).build(), broker, folder / "job",
                           {"allowed_lateness_ms": 2000, "idle_timeout_ms": 10**9})
        began = time.perf_counter()
        job.run_until_idle()
        runs.append(time.perf_counter() - began)
        got = sorted(json.loads(m.body)["value"]["n"] for m in broker.read("out"))
        shutil.rmtree(folder, ignore_errors=True)
        if got != want:
            raise SystemExit(f"dedup of {n} events: {len(got)} passed, the plain loop says {len(want)}")
    return {"rstream_s": median(runs), "plain_s": plain_s, "passed": len(want), "ratio_plain": plain_s / median(runs)}


# -- (s) running sum, arrival and data-time order ---------------------------------------------------------
def _sums_plain(events: list[dict[str, Any]]) -> dict[str, list[int]]:
    sums: dict[str, list[int]] = {}
    for e in sorted(events, key=lambda e: (e["ts"], e["n"])):
        run = sums.setdefault(e["user"], [])
        run.append((run[-1] if run else 0) + e["n"])
    return sums


def _sum_job(order: str) -> StreamBuilder:
    b = StreamBuilder(f"sum-{order.replace('_', '-')}", shuffle_queues=3)
    (b.source("events", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["user"])
     .sum(lambda e: e["n"], order=order).to_rstream().sink("out", JsonSerializer(with_key=True)))
    return b


def bench_sum(tmp: Path, n: int, repeat: int) -> dict[str, Any]:
    events = _events(n)
    plain_s, want = _timed(lambda: _sums_plain(events), repeat)
    out: dict[str, Any] = {"plain_s": plain_s}
    for order in ("arrival", "data_time"):
        runs = []
        for i in range(repeat):
            folder = tmp / f"sum-{order}-{i}"
            broker = EmbeddedBroker(folder / "broker")
            broker.create_topic("events", queues=4)
            for q in range(4):  # each queue its own quarter, in order of n: four producers
                broker.send_batch("events", [json.dumps(e) for e in events if e["n"] % 4 == q], queue=q)
            job = InProcessJob(_sum_job(order).build(), broker, folder / "job",
                               {"allowed_lateness_ms": 2000, "idle_timeout_ms": 10**9})
            began = time.perf_counter()
            job.run_until_idle()
            runs.append(time.perf_counter() - began)
            got: dict[str, list[int]] = {}
            for m in sorted(broker.read("out"), key=lambda m: (m.queue_id, m.offset)):
                doc = json.loads(m.body)
                got.setdefault(doc["key"], []).append(doc["value"])
            shutil.rmtree(folder, ignore_errors=True)
            right = got == want if order == "data_time" else {k: v[-1] for k, v in got.items()} == {
                k: v[-1] for k, v in want.items()}
            if not right:
                raise SystemExit(f"running sum ({order}) of {n} events differs from the plain running sums")
        out[order] = {"rstream_s": median(runs), "ratio_plain": plain_s / median(runs)}
    out["data_time_over_arrival"] = out["data_time"]["rstream_s"] / out["arrival"]["rstream_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000, help="records of the smaller interval join, events of (p)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip", default="", help="parts to leave out: interval,process,sum")
    ap.add_argument("--json", default=None, help="where to write the results (default bench/out/operators-<commit>.json)")
    args = ap.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    results: dict[str, Any] = {"commit": commit, "load": os.getloadavg(), "records": args.records}
    tmp = Path(tempfile.mkdtemp(prefix="rstream-bench-operators-"))
    try:
        if "interval" not in skip:
            results["interval"] = r = bench_interval(tmp, args.records, args.repeat)
            print(f"(i) interval join: {args.records} records {r[str(args.records)]['rstream_s']:.2f} s, "
                  f"{2 * args.records} records {r[str(2 * args.records)]['rstream_s']:.2f} s: growth {r['growth']:.2f}x "
                  f"(2.0 linear, 4.0 quadratic); plain loop / rstream {r['ratio_plain']:.3f}")
        if "process" not in skip:
            results["process"] = r = bench_process(tmp, args.records, args.repeat)
            print(f"(p) dedup process function: {args.records} events {r['rstream_s']:.2f} s ({r['passed']} passed); "
                  f"plain loop / rstream {r['ratio_plain']:.3f}")
        if "sum" not in skip:
            results["sum"] = r = bench_sum(tmp, args.records, args.repeat)
            print(f"(s) running sum: {args.records} events, arrival order {r['arrival']['rstream_s']:.2f} s, "
                  f"data-time order {r['data_time']['rstream_s']:.2f} s ({r['data_time_over_arrival']:.2f}x); "
                  f"plain loop / rstream {r['arrival']['ratio_plain']:.3f} and {r['data_time']['ratio_plain']:.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    results["load_after"] = os.getloadavg()
    target = Path(args.json) if args.json else _REPO / "bench" / "out" / f"operators-{commit}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results, indent=2))
    print(f"load {results['load'][0]:.1f} -> {results['load_after'][0]:.1f}; wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
