"""A window count run in many small batches, as notebook 03 runs it: how long ``run_until_idle()`` takes
when each batch's window queues run in the source job (``shuffle_in_source_job=True``, the default)
against the same job with the driver's second Spark job per batch (``False``), in the same run.

    python bench/batches.py                  # 3 rounds (about 2 min)
    python bench/batches.py --rounds 5 --json batches.json

The input is notebook 03's: 3 sensors, 120 readings each, 0.5 s apart, about a tenth delayed by 1.5 to
9 s, one broker queue per sensor. The job counts readings per sensor in 10 s tumbling windows with
``max_records_per_queue=20`` (seven batches, as if live), once per allowed lateness of 0, 1, 3 and 10 s.
Each round runs the four jobs both ways, alternating which way goes first, and each job's windows and late
records must equal a plain Python reference's (``bench.baselines.python_windows_parsed``).
One process, one SparkSession (``local[2]``); a warm-up round first, not counted.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import JSON_HELP, results_path  # noqa: E402  (the repo root must be on sys.path first)

LATENESS = [0, 1_000, 3_000, 10_000]
WINDOW_MS = 10_000


def readings(sensors: int = 3, per_sensor: int = 120, seed: int = 3) -> list[dict[str, Any]]:
    """Notebook 03's readings (the same draws), in the order the broker receives them (by arrival)."""
    rng = random.Random(seed)
    out = []
    for sensor in range(sensors):
        for i in range(per_sensor):
            ts = i * 500
            delay = rng.choice([0, 100, 200, 300, 500, 800]) if rng.random() < 0.9 else rng.choice(
                [1_500, 3_000, 6_000, 9_000])
            out.append({"sensor": sensor, "ts": ts, "temp": round(20 + rng.gauss(0, 2), 1), "arrival": ts + delay})
    out.sort(key=lambda r: (r["arrival"], r["sensor"]))
    return out


def build(job_id: str) -> Any:
    from rstream import JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow

    b = StreamBuilder(job_id, shuffle_queues=2)
    (b.source("readings", JsonDeserializer()).select_timestamp(lambda r: r["ts"])
     .key_by(lambda r: f"sensor-{r['sensor']}").window(TumblingWindow(Time.milliseconds(WINDOW_MS))).count()
     .to_rstream().sink(f"{job_id}-counts", JsonSerializer(with_key=True)))
    return b.build()


def run_job(spark: Any, broker: Any, root: Path, job_id: str, lateness: int, in_source_job: bool) -> dict[str, Any]:
    from rstream import RocketMQStream

    job = RocketMQStream(build(job_id), broker=broker, spark=spark, properties={
        "data_dir": str(root), "allowed_lateness_ms": lateness, "max_records_per_queue": 20,
        "shuffle_in_source_job": in_source_job})
    began = time.perf_counter()
    job.run_until_idle(progress=False)
    seconds = time.perf_counter() - began
    windows = {}
    for m in broker.read(f"{job_id}-counts"):
        doc = json.loads(m.body)
        key, start, _end = doc["key"]
        windows[(int(key.removeprefix("sensor-")), start)] = doc["value"]
    return {"seconds": seconds, "batches": len(job.progress), "late": len(job.late_records()), "windows": windows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", default=None, help=JSON_HELP)
    args = ap.parse_args(argv)

    from bench.baselines import python_windows_parsed
    from rstream import EmbeddedBroker, get_spark

    root = Path(tempfile.mkdtemp(prefix="rstream-batches-"))
    try:
        spark = get_spark(master=args.master)
        broker = EmbeddedBroker(root / "broker")
        rows = readings()
        broker.create_topic("readings", queues=3)
        for sensor in range(3):
            broker.send_batch("readings", [json.dumps(r) for r in rows if r["sensor"] == sensor], queue=sensor)
        # the reference: per sensor's queue, in arrival order, watermark = max(watermark, ts - lateness), a
        # reading behind it is late, the others are counted per (sensor, window start)
        per_queue = [[r for r in rows if r["sensor"] == sensor] for sensor in range(3)]
        expected = {lateness: python_windows_parsed(per_queue, lateness, WINDOW_MS, key="sensor")
                    for lateness in LATENESS}
        times: dict[str, list[float]] = {"in_source_job": [], "driver_job": []}
        batches: dict[str, list[int]] = {"in_source_job": [], "driver_job": []}
        for r in range(args.rounds + 1):
            ways = [True, False] if r % 2 else [False, True]
            for in_source_job in ways:
                name = "in_source_job" if in_source_job else "driver_job"
                total = 0.0
                for lateness in LATENESS:
                    res = run_job(spark, broker, root, f"b{r}-{name}-{lateness}".replace("_", "-"), lateness,
                                  in_source_job)
                    late = len(rows) - sum(expected[lateness].values())
                    if res["windows"] != expected[lateness] or res["late"] != late:
                        raise SystemExit(f"wrong result: lateness {lateness}, {name}: {res['late']} late (expected "
                                         f"{late}), windows {res['windows']} != {expected[lateness]}")
                    total += res["seconds"]
                    if r:
                        batches[name].append(res["batches"])
                if r:  # round 0 warms up
                    times[name].append(total)
        out = {
            "command": " ".join(["python", "bench/batches.py", *(argv if argv is not None else sys.argv[1:])]),
            "rounds": args.rounds,
            "seconds_four_jobs": times,
            "median_s": {k: statistics.median(v) for k, v in times.items()},
            "batches_per_job": {k: statistics.median(v) for k, v in batches.items()},
        }
        out["ratio_driver_over_in_source_job"] = out["median_s"]["driver_job"] / out["median_s"]["in_source_job"]
        for name, values in times.items():
            print(f"{name:14s} four jobs: median {statistics.median(values):.2f} s  "
                  f"({', '.join(f'{v:.2f}' for v in values)}), {out['batches_per_job'][name]:.0f} batches per job")
        print(f"driver job / in source job: {out['ratio_driver_over_in_source_job']:.2f}x")
        path = results_path(args.json, "batches")
        path.write_text(json.dumps(out, indent=1))
        print(f"json: {path}")
        return 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
