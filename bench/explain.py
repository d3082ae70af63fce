"""``explain`` of one windowed result over a long history, in this process (no Spark, the embedded broker).

    python bench/explain.py                      # 100 K clicks, 7 results explained, what_if at 500 ms
    python bench/explain.py --records 10000 --results 3   # smoke run

A 10 s tumbling-window count of clicks per page (50 pages, 4 source queues, some records out of order and
some later than the 2 s allowed lateness; the default build, so each source range's clicks go to the
shuffle as one partial per page) runs over N clicks in ranges of ``--batch`` records per queue. Then
``job.explain`` is timed on results picked at random (seeded) over the whole history: each re-executes
only the window's firing range, the ranges of its page's shuffle queue that hold its clicks, and the
source ranges of the partials among them. Every explanation is checked before its time counts: its
input records must be exactly the page's on-time clicks of that window and its late records exactly the
late ones, by a plain Python reference (per source queue, watermark = max(previous, t - lateness)).
Then ``what_if(allowed_lateness_ms=--what-if)`` is timed over the whole history (both runs, in scratch
storage), checked the same way: each run's window counts, and the records that became late or on time.
Writes JSON to ``bench/out/explain-<commit>.json`` (``--json`` elsewhere); ``RESULTS.md`` holds the row.
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
from pathlib import Path
from statistics import median
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(_REPO))

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow  # noqa: E402
from rstream.runtime.inprocess import InProcessJob  # noqa: E402

T0 = 1_700_000_000_000
SIZE = 10_000
LATENESS = 2000


def _clicks(n: int, pages: int, seed: int = 50) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [{"id": i, "page": f"p{rng.randrange(pages)}", "ts": T0 + i * 10 - rng.randrange(3000)} for i in range(n)]


def _job() -> StreamBuilder:
    b = StreamBuilder("explained", shuffle_queues=4)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda c: c["ts"]).key_by(lambda c: c["page"])
     .window(TumblingWindow(Time.milliseconds(SIZE))).count().to_rstream().sink("counts", JsonSerializer(with_key=True)))
    return b


def _reference(per_queue: dict[int, list[tuple[int, dict[str, Any]]]],
               lateness: int = LATENESS) -> tuple[dict[Any, set[Any]], dict[Any, set[Any]]]:
    """Per (page, window start): the on-time clicks and the late ones, as (queue, offset)."""
    on_time: dict[Any, set[Any]] = {}
    late: dict[Any, set[Any]] = {}
    for q, records in per_queue.items():
        wm = None
        for offset, c in records:
            t = c["ts"]
            wm = t - lateness if wm is None else max(wm, t - lateness)
            (late if t < wm else on_time).setdefault((c["page"], t - t % SIZE), set()).add((q, offset))
    return on_time, late


def bench_explain(tmp: Path, n: int, pages: int, batch: int, results: int, seed: int,
                  what_if_lateness: int | None = None) -> dict[str, Any]:
    broker = EmbeddedBroker(tmp / "broker")
    broker.create_topic("clicks", queues=4)
    broker.send_batch("clicks", [json.dumps(c) for c in _clicks(n, pages)])
    job = InProcessJob(_job().build(), broker, tmp / "job",
                       {"allowed_lateness_ms": LATENESS, "idle_timeout_ms": 10**9, "max_records_per_queue": batch})
    began = time.perf_counter()
    batches = job.run_until_idle()
    run_s = time.perf_counter() - began
    per_queue = {q: [(m.offset, json.loads(m.body)) for m in broker.read("clicks", q)] for q in range(4)}
    on_time, late = _reference(per_queue)
    outs = broker.read("counts")
    picked = random.Random(seed).sample(outs, results)
    times, checked = [], []
    for m in picked:
        doc = json.loads(m.body)
        page, start, _end = doc["key"]
        t = time.perf_counter()
        e = job.explain("counts", m.queue_id, m.offset)
        times.append(time.perf_counter() - t)
        got = {(q, o) for _t, q, o in e.records}
        if got != on_time.get((page, start), set()) or len(got) != doc["value"] or not e.exact:
            raise SystemExit(f"explain of {doc}: {len(got)} input records, the reference says "
                             f"{len(on_time.get((page, start), ()))}")
        if {(c.queue, c.offset) for c in e.late} != late.get((page, start), set()):
            raise SystemExit(f"explain of {doc}: late records differ from the reference")
        checked.append({"key": doc["key"], "inputs": len(got), "late": len(e.late), "ranges": e.replayed,
                        "seconds": times[-1]})
    out = {"records": n, "batches": batches, "run_s": run_s, "results": len(outs), "explain_median_s": median(times),
           "explain_max_s": max(times), "explained": checked}
    if what_if_lateness is not None:
        out["what_if"] = _bench_what_if(job, per_queue, on_time, late, what_if_lateness)
    return out


def _bench_what_if(job: InProcessJob, per_queue: dict[int, list[tuple[int, dict[str, Any]]]],
                   on_time: dict[Any, set[Any]], late: dict[Any, set[Any]], lateness: int) -> dict[str, Any]:
    """``what_if`` with another lateness over the whole history (the job's input run twice more, in
    scratch storage), checked before its time counts: per window the count each run gives is the
    reference's, and the records that became late or on time are the reference's difference."""
    from rstream.runtime.what_if import BECAME_LATE, BECAME_ON_TIME, LATE, split_window, what_if

    began = time.perf_counter()
    result = what_if(job.topology, job.broker, job.settings, {"allowed_lateness_ms": lateness}, work=job.job_dir)
    seconds = time.perf_counter() - began
    other_on_time, other_late = _reference(per_queue, lateness)
    for run, expected in ((result.before_run, on_time), (result.after_run, other_on_time)):
        counts = {}
        for message_key, values in run.sinks["counts"].items():
            page, window = split_window(message_key)
            assert window is not None and len(values) == 1
            counts[(page, window[0])] = json.loads(values[0])["value"]
        if counts != {k: len(v) for k, v in expected.items() if v}:
            raise SystemExit(f"what_if: the {run.label} run's window counts differ from the reference")
    diff = result.diff()
    moved = diff[diff["sink"] == LATE]

    def places(change: str) -> set[Any]:
        return {tuple(int(x) for x in r.split("/")[1:]) for r in moved[moved["change"] == change]["record"]}

    def every(found: dict[Any, set[Any]]) -> set[Any]:
        return {place for places_of_window in found.values() for place in places_of_window}

    if places(BECAME_LATE) != every(other_late) - every(late) or places(BECAME_ON_TIME) != every(late) - every(other_late):
        raise SystemExit("what_if: the records that became late or on time differ from the reference")
    return {"allowed_lateness_ms": lateness, "seconds": seconds, "batches": [result.before_run.batches,
            result.after_run.batches], "differences": len(diff), "counts": result.counts()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--pages", type=int, default=50)
    ap.add_argument("--batch", type=int, default=2500, help="records per source queue and range")
    ap.add_argument("--results", type=int, default=7, help="window results explained")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--what-if", type=int, default=500, metavar="MS",
                    help="also time job.what_if(allowed_lateness_ms=MS) over the whole history (-1: not)")
    ap.add_argument("--json", default=None, help="where to write the results (default bench/out/explain-<commit>.json)")
    args = ap.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=_REPO, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    out: dict[str, Any] = {"commit": commit, "load": os.getloadavg()}
    tmp = Path(tempfile.mkdtemp(prefix="rstream-bench-explain-"))
    try:
        out["explain"] = r = bench_explain(tmp, args.records, args.pages, args.batch, args.results, args.seed,
                                           None if args.what_if < 0 else args.what_if)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_after"] = os.getloadavg()
    print(f"(x) {r['records']} clicks in {r['batches']} batches ran in {r['run_s']:.1f} s, {r['results']} window results; "
          f"explain of {len(r['explained'])}: median {r['explain_median_s']:.2f} s, max {r['explain_max_s']:.2f} s "
          f"(ranges re-executed: {[x['ranges'] for x in r['explained']]}), each equal to the reference")
    if "what_if" in r:
        w = r["what_if"]
        print(f"(x) what_if(allowed_lateness_ms={w['allowed_lateness_ms']}) over the {r['records']} clicks: "
              f"{w['seconds']:.1f} s for both runs ({w['batches'][0]} and {w['batches'][1]} batches), {w['counts']}, "
              "each run's windows and the records that became late or on time equal to the reference")
    target = Path(args.json) if args.json else _REPO / "bench" / "out" / f"explain-{commit}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(out, indent=2, default=str))
    print(f"load {out['load'][0]:.1f} -> {out['load_after'][0]:.1f}; wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
