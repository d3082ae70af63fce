"""The cost of a sink made visible on commit (``sink(..., visible="on_commit")``) on RocketMQ, against the
default sink: the same word count run in-process (no Spark: its tasks are what differs), on a
``LocalRocketMQ`` the bench starts in its temporary folder, alternating the two sinks ``--repeat`` times.

    .venv/bin/python bench/visible.py --sentences 2000 --repeat 3

Each run reads a fresh copy of the same source topic (``--sentences`` of 5 words over 50 words, 2 queues)
into a sink of 2 queues; its sink records per second of ``run_until_idle()`` are reported, with the JVMs'
CPU, and the sink is checked (every word's running counts 1..n, in order) before a time counts. The JSON
goes to ``bench/out/visible-<commit>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.rocketmq import jvm_cpu, missing, start  # noqa: E402


def check(broker: Any, sink: str, sentences: list[str]) -> None:
    counts: dict[str, list[int]] = {}
    for m in sorted(broker.read(sink), key=lambda m: (m.queue_id, m.offset)):
        word, _, count = m.body.decode().rpartition(":")
        counts.setdefault(word, []).append(int(count))
    expected = Counter(w for s in sentences for w in s.split())
    if counts != {w: list(range(1, n + 1)) for w, n in expected.items()}:
        raise SystemExit(f"the sink {sink} is wrong: not every word's running counts once, in order")


def run(broker: Any, mq: Any, root: Path, source: str, sentences: list[str], visible: str, n: int) -> dict[str, Any]:
    from bench.workloads import wordcount_topology
    from rstream.runtime.inprocess import InProcessJob

    name = f"vis-{visible.replace('_', '')}-{n}"
    job = InProcessJob(wordcount_topology(name, source, f"{name}-counts", visible=visible), broker, root / name,
                       {"sink_queues": 2})
    jvm0, cpu0, t0 = jvm_cpu(mq), time.process_time(), time.perf_counter()
    job.run_until_idle(fire_idle=False)
    wall = time.perf_counter() - t0
    out = {"visible": visible, "wall_s": round(wall, 3), "python_cpu_s": round(time.process_time() - cpu0, 3),
           "jvm_cpu_s": round(jvm_cpu(mq) - jvm0, 3),
           "sink_task_s": round(sum(i["millis"] for i in job.infos if i["topic"] != source) / 1000, 3)}
    check(broker, f"{name}-counts", sentences)
    records = sum(len(s.split()) for s in sentences)
    out["records"] = records
    out["records_per_s"] = round(records / wall)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=2000, help="sentences of 5 words (default 2000: 10 000 records)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="where the results go (default bench/out/visible-<commit>.json)")
    args = ap.parse_args(argv)
    why = missing()
    if why:
        print(why)
        return 2
    root = Path(tempfile.mkdtemp(prefix="rstream-bench-visible-"))
    mq, facts = start(root)
    try:
        broker = mq.broker()
        sentences = [" ".join(f"w{(i * 7 + j * 13) % 50}" for j in range(5)) for i in range(args.sentences)]
        runs: list[dict[str, Any]] = []
        for n in range(args.repeat + 1):  # the first round warms up, and is not counted
            for visible in (("always", "on_commit") if n % 2 == 0 else ("on_commit", "always")):
                source = f"vis-src-{visible.replace('_', '')}-{n}"
                broker.create_topic(source, queues=2)
                broker.send_batch(source, sentences)
                got = run(broker, mq, root, source, sentences, visible, n)
                if n:
                    runs.append(got)
                print(f"  {'warm-up' if not n else f'run {n}'}: {visible:9} {got['records_per_s']:>8} records/s "
                      f"({got['wall_s']:.2f} s; JVMs {got['jvm_cpu_s']:.2f} s CPU)", flush=True)
        summary = {}
        for visible in ("always", "on_commit"):
            mine = [r for r in runs if r["visible"] == visible]
            summary[visible] = {"records_per_s_median": statistics.median(r["records_per_s"] for r in mine),
                                "wall_s_median": statistics.median(r["wall_s"] for r in mine),
                                "jvm_cpu_s_median": statistics.median(r["jvm_cpu_s"] for r in mine)}
        ratio = summary["on_commit"]["records_per_s_median"] / summary["always"]["records_per_s_median"]
        print(f"default sink {summary['always']['records_per_s_median']:.0f} records/s, on commit "
              f"{summary['on_commit']['records_per_s_median']:.0f} records/s: {ratio:.3f} of it; load {os.getloadavg()}")
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        path = Path(args.json or Path(__file__).parent / "out" / f"visible-{commit}.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"commit": commit, "rocketmq": facts, "runs": runs, "summary": summary,
                                    "ratio": ratio, "load": os.getloadavg()}, indent=2, default=str))
        print(f"wrote {path}")
    finally:
        mq.stop(grace=3.0)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
