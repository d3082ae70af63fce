"""Latency probe: how long a workshop waits on rstream, on the embedded broker, for a keyed count
through one shuffle (``source -> key_by -> count -> to_rstream -> sink``, ``aggregate_emit="record"``).

    python bench/probe.py                 # all parts (about 2 min)
    python bench/probe.py --samples 20 --idle-seconds 5 --json probe.json
    python bench/probe.py --broker rocketmq --skip a,c,e   # send -> sink on a real RocketMQ

``--broker rocketmq``: every part on a real Apache RocketMQ 5.3.3 instead of the embedded broker, a
``LocalRocketMQ`` (name server and broker JVMs; ``--brokers 2``: two masters, every topic's queues
spread over both, the decision log on the first) the probe starts in its temporary folder (start time
and RSS reported) and stops at the end; (d) then counts its JVMs' CPU too (and apart). It needs
RocketMQ's jars (``bash setup.sh`` fetches them): without them the probe stops before it starts anything.

Measured, in one process with one SparkSession (``local[2]`` unless ``--master``):

(s) ``get_spark()`` of a fresh session (a new JVM).
(a) ``job.start()`` -> the first result visible in the sink (one record sent before the start):
    the first query of the fresh session (``a_first``), then ``--starts`` more jobs on the session
    already up (``a_warm``, median). A new session warms itself up in the background (a small job
    of its own, ``get_spark(warm_up=True)``); ``a_first`` starts once that ended, as a notebook's
    first job does when its cells are read, and ``w_warm_up_s`` is how long it ran after
    ``get_spark()`` returned (a job started at once would wait about that long, then run warm).
    ``--no-warm-up``: no warm-up, ``a_first`` is the first query of a cold session.
(b) send -> sink latency on a started job: ``--samples`` single records, each sent after the
    previous one's result arrived plus a random pause (so sends do not lock onto the trigger's
    phase); arrival is seen by polling the sink's end offsets every ``--poll-ms``. Also the same
    from the broker's own append times (sink store time - source store time), as a cross-check.
(c) ``run_until_idle()`` of a job that is not started, one record of input each time: the fixed
    cost of one ``availableNow`` query, ``--runs`` times (median), with its batches' durations.
(d) CPU used by the started job while idle: user + system time of the JVM, its Python children
    (workers, the planner) and this process over ``--idle-seconds``, as a share of one core.
(e) Spark's own floor in the same session: median time of a JVM-only job (``range(1).collect()``)
    and of a job through a Python worker over Arrow, what a micro-batch costs before any work.
(r) on RocketMQ only: the remoting requests per record (``bench.rocketmq.request_counts``): the
    job's tasks in this process (no Spark, no timing), a few single records through both stages,
    counted by request code; and one look of a started job's idle watch. Load-independent.

Every result is checked: each record's sink value must be the key's running count.
Spark's per-batch ``durationMs`` of the started job are summarised (medians) as the profile.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script: the bench modules import as bench.*
    sys.path.insert(0, str(_REPO))

from bench.report import JSON_HELP, git_state, results_path  # noqa: E402

SOURCE, SINK = "probe-words", "probe-counts"


def build(job: str) -> Any:
    from rstream import StreamBuilder, TextDeserializer, TextSerializer

    b = StreamBuilder(job)
    (b.source(SOURCE, TextDeserializer()).key_by(lambda w: w).count().to_rstream()
     .sink(SINK, TextSerializer(with_key=True)))
    return b.build()


class SinkWatch:
    """Polls the sink topic's end offsets; returns the new records (key, value, store ms)."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self.ends = list(broker.end_offsets(SINK)) if broker.has_topic(SINK) else []

    def wait(self, timeout: float, poll_s: float) -> tuple[float, list[tuple[str, str, int]]]:
        deadline = time.perf_counter() + timeout
        while True:
            now = time.perf_counter()
            if self.broker.has_topic(SINK):
                ends = self.broker.end_offsets(SINK)
                if sum(ends) > sum(self.ends):
                    new = []
                    for q, end in enumerate(ends):
                        start = self.ends[q] if q < len(self.ends) else 0
                        for m in self.broker.read(SINK, q, start, end):
                            key, _, value = m.body.decode().rpartition(":")
                            new.append((key, value, m.store_timestamp))
                    self.ends = list(ends)
                    return now, new
            if now > deadline:
                raise TimeoutError(f"no result in the sink within {timeout} s")
            time.sleep(poll_s)


def proc_cpu(more: set[int] | None = None) -> dict[int, float]:
    """Per process, CPU seconds (user + system): the JVM, every process under it, this one, and the
    processes ``more`` (a LocalRocketMQ's JVMs)."""
    import psutil
    from pyspark import SparkContext

    procs = [psutil.Process(), *(psutil.Process(pid) for pid in sorted(more or ()))]
    proc = getattr(SparkContext._gateway, "proc", None)
    if proc is not None:
        jvm = psutil.Process(proc.pid)
        procs += [jvm, *jvm.children(recursive=True)]
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            pass
    return out


def cpu_between(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two ``proc_cpu()`` readings (a process that ended in between is
    not counted: its last times are gone; one that started is counted whole)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def _iso_s(stamp: str) -> float:
    """Epoch seconds of a progress event's ISO timestamp (``2026-11-23T01:02:03.456Z``)."""
    import datetime

    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def durations(query: Any) -> list[dict[str, int]]:
    return [dict(p["durationMs"], inputRows=p.get("numInputRows", 0), batchId=p["batchId"])
            for p in query.recentProgress if p.get("durationMs")]


def summarise(rows: list[dict[str, int]]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r if k not in ("batchId", "inputRows")})
    return {k: statistics.median(r.get(k, 0) for r in rows) for k in keys} if rows else {}


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--starts", type=int, default=3, help="starts on the warm session (a), median (3)")
    ap.add_argument("--samples", type=int, default=50, help="single records sent to the started job (50)")
    ap.add_argument("--pause", type=float, default=0.3, help="max random pause before each send, s (0.3)")
    ap.add_argument("--poll-ms", type=float, default=2.0, help="sink polling interval, ms (2)")
    ap.add_argument("--runs", type=int, default=5, help="run_until_idle() calls (c), median (5)")
    ap.add_argument("--idle-seconds", type=float, default=10.0, help="idle CPU window (d), s (10)")
    ap.add_argument("--prop", action="append", default=[], metavar="NAME=VALUE",
                    help="a job property for every job here, e.g. trigger_interval_ms=100 (repeatable)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark property for the session, e.g. spark.sql.streaming.pollingDelay=20ms (repeatable)")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: a,b,c,d,e,r")
    ap.add_argument("--broker", choices=("embedded", "rocketmq"), default="embedded",
                    help="the broker every part runs on: the embedded one, or a LocalRocketMQ started here (embedded)")
    ap.add_argument("--brokers", type=int, default=1,
                    help="with --broker rocketmq: brokers of the LocalRocketMQ (2: a two-master cluster, every "
                         "topic's queues spread over both) (1)")
    ap.add_argument("--broker-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="with --broker rocketmq: a broker setting, e.g. timerWheelEnable=false (repeatable)")
    ap.add_argument("--no-warm-up", action="store_true", help="a session without its background warm-up")
    ap.add_argument("--tmp", default=None, help="parent folder of the temporary data (system temp)")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", default=None, help=JSON_HELP)
    args = ap.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.broker == "rocketmq":
        from bench.rocketmq import missing

        why = missing()
        if why is not None:
            print(f"rstream probe: cannot run on RocketMQ: {why.replace('leave the RocketMQ part out with --skip rocketmq', 'probe the embedded broker (--broker embedded)')}",
                  file=sys.stderr)
            return 2
    props: dict[str, Any] = {}
    for item in args.prop:
        name, _, value = item.partition("=")
        props[name] = int(value) if value.lstrip("-").isdigit() else value
    poll = args.poll_ms / 1000
    root = Path(tempfile.mkdtemp(prefix="rstream-probe-", dir=args.tmp)).absolute()
    import os

    res: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "git": git_state(),
                           "args": vars(args), "loadavg_start": os.getloadavg()}
    rng = random.Random(58)
    jobs = iter(range(1_000_000))
    mq = None
    try:
        from rstream import EmbeddedBroker, RocketMQStream, get_spark

        t = time.perf_counter()
        conf = {k.replace(".", "__"): v for k, _, v in (c.partition("=") for c in args.conf)}
        spark = get_spark(args.master, tmp_dir=root / "spark-tmp", warm_up=not args.no_warm_up, **conf)
        res["s_session_s"] = time.perf_counter() - t
        from rstream.runtime.session import await_warm_up

        t = time.perf_counter()
        await_warm_up()
        res["w_warm_up_s"] = None if args.no_warm_up else time.perf_counter() - t
        broker: Any
        if args.broker == "rocketmq":
            from bench.rocketmq import start

            mq, res["rocketmq"] = start(root, dict(kv.split("=", 1) for kv in args.broker_conf), args.brokers)
            res["rocketmq"]["broker_conf"] = args.broker_conf
            res["rocketmq"]["brokers"] = args.brokers
            broker = mq.broker()
        else:
            broker = EmbeddedBroker(root / "broker")
        res["broker"] = args.broker
        broker.create_topic(SOURCE, queues=2)
        counts: dict[str, int] = {}

        def make(name: str, **extra: Any) -> Any:
            return RocketMQStream(build(name), {"data_dir": str(root / "data"), **props, **extra},
                                  broker=broker, spark=spark)

        def check(new: list[tuple[str, str, int]], key: str) -> None:
            counts[key] = counts.get(key, 0) + 1
            got = [(k, v) for k, v, _ in new]
            if got != [(key, str(counts[key]))]:
                raise AssertionError(f"sink got {got}, expected {[(key, str(counts[key]))]}")

        def start_to_first(job_name: str) -> float:
            """A new job over one new record: start() -> its result in the sink."""
            key = f"start-{job_name}"
            job = make(job_name)
            watch = SinkWatch(broker)
            broker.create_topic(SOURCE, queues=2)
            # a new job reads from the first offset: only the new record is new for its *result*,
            # but it recounts the earlier ones; so every job counts in a topic of its own keys
            broker.send(SOURCE, key, key=key)
            t0, wall0 = time.perf_counter(), time.time()
            job.start()
            phases["start_returned_s"].append(time.perf_counter() - t0)
            try:
                deadline = time.perf_counter() + 120
                while True:
                    at, new = watch.wait(120, poll)
                    mine = [r for r in new if r[0] == key]
                    if mine:
                        break
                    if time.perf_counter() > deadline:
                        raise TimeoutError("no result")
                took = at - t0
                if [(k, v) for k, v, _ in mine] != [(key, "1")]:
                    raise AssertionError(f"sink got {mine}, expected {key}:1")
                # the result is in the sink before its batch ends: its progress is reported a moment later
                progress_deadline = time.perf_counter() + 5
                while True:
                    progress = [p for p in job._query.recentProgress if p.get("numInputRows")]
                    if progress or time.perf_counter() > progress_deadline:
                        break
                    time.sleep(0.05)
                if progress:
                    first = progress[0]["timestamp"]
                    phases["to_first_trigger_s"].append(_iso_s(first) - wall0)
                    for p in progress[:1]:  # the batch that read the record (and counted it)
                        phases["batch_ms"].append(p["durationMs"])
            finally:
                job.stop()
            return took

        phases: dict[str, list[Any]] = {"start_returned_s": [], "to_first_trigger_s": [], "batch_ms": []}
        if "a" not in skip:
            # each job reads the whole source topic from its start: earlier keys give earlier results
            # too, so the sink is watched for this job's key only
            first = start_to_first(f"probe-a{next(jobs)}")
            warm = [start_to_first(f"probe-a{next(jobs)}") for _ in range(args.starts)]
            res["a_first_s"], res["a_warm_s"] = first, warm
            res["a_warm_median_s"] = statistics.median(warm) if warm else None
            res["a_phases"] = phases

        job = make(f"probe-b{next(jobs)}", consume_from="last")  # only what is sent from now on
        if "b" not in skip or "d" not in skip:
            job.start()
            watch = SinkWatch(broker)
            # warm up: the first batch of a query opens everything
            broker.send(SOURCE, "warm", key="warm")
            while not any(r[0] == "warm" for r in watch.wait(120, poll)[1]):
                pass
            base_batch = max((p["batchId"] for p in job._query.recentProgress), default=-1)
        if "b" not in skip:
            lat, lat_store = [], []
            for i in range(args.samples):
                time.sleep(rng.uniform(0.05, args.pause))
                key = f"k{i % 5}"
                t0 = time.perf_counter()
                sent = broker.send(SOURCE, key, key=key)
                at, new = watch.wait(60, poll)
                check(new, key)
                lat.append((at - t0) * 1000)
                src = broker.read(SOURCE, sent.queue_id, sent.offset, sent.offset + 1)[0]
                lat_store.append(new[0][2] - src.store_timestamp)
            rows = [r for r in durations(job._query) if r["batchId"] > base_batch and r.get("inputRows")]
            res["b_latency_ms"] = lat
            res["b_p50_ms"], res["b_p95_ms"] = statistics.median(lat), pct(lat, 95)
            res["b_store_p50_ms"], res["b_store_p95_ms"] = statistics.median(lat_store), pct(lat_store, 95)
            res["b_batches_with_data"] = summarise(rows)
            res["b_batch_count"] = len(rows)
        if "d" not in skip:
            time.sleep(1.0)
            rmq_pids = set(mq.pids.values()) if mq is not None else set()
            c0, t0 = proc_cpu(rmq_pids), time.perf_counter()
            time.sleep(args.idle_seconds)
            c1, t1 = proc_cpu(rmq_pids), time.perf_counter()
            res["d_idle_cpu_share"] = cpu_between(c0, c1) / (t1 - t0)
            res["d_processes"] = len(c1)
            if mq is not None:
                res["d_rocketmq_cpu_share"] = cpu_between({p: c0[p] for p in rmq_pids if p in c0},
                                                          {p: c1[p] for p in rmq_pids if p in c1}) / (t1 - t0)
            idle_rows = [r for r in durations(job._query) if not r.get("inputRows")]
            res["d_idle_triggers"] = summarise(idle_rows)
        job.stop()

        if "c" not in skip:
            job = make(f"probe-c{next(jobs)}", consume_from="last")
            job.run_until_idle(progress=False)  # the first run only records where the topic ends
            runs, batches = [], []
            for i in range(args.runs):
                key = f"c{i}"
                watch = SinkWatch(broker)
                broker.send(SOURCE, key, key=key)
                t0 = time.perf_counter()
                job.run_until_idle(progress=False)
                runs.append(time.perf_counter() - t0)
                new = watch.wait(5, poll)[1]
                if [(k, v) for k, v, _ in new] != [(key, "1")]:
                    raise AssertionError(f"sink got {new}, expected {key}:1")
                batches.append(durations(job._query))
            res["c_run_until_idle_s"] = runs
            res["c_median_s"] = statistics.median(runs)
            res["c_batches_per_run"] = statistics.median(len(b) for b in batches)
            res["c_batches"] = summarise([r for b in batches for r in b])
        if "r" not in skip and args.broker == "rocketmq":
            from bench.rocketmq import request_counts

            res["r_requests"] = request_counts(broker, build(f"probe-r{next(jobs)}"), SOURCE, root)
        if "e" not in skip:
            res["e_floor_ms"] = spark_floor(spark, args.runs * 3)
    finally:
        res["loadavg_end"] = os.getloadavg()
        from rstream import stop_spark

        stop_spark()
        if mq is not None:
            res["rocketmq"]["rss_at_end_bytes"] = mq.rss_bytes()
            mq.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(res)
    out = results_path(args.json, "probe" if args.broker == "embedded" else "probe-rocketmq")
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"json: {out}")
    return 0


def _same_batches(batches: Iterator[Any]) -> Iterator[Any]:
    return batches


def spark_floor(spark: Any, runs: int) -> dict[str, float]:
    """Median ms of Spark jobs that do next to nothing, in the same session: one JVM-only job
    (``range(1).collect()``), and one through a Python worker over Arrow (as a streaming source's
    partitions are read): what any micro-batch costs before its work."""
    jobs = {"jvm_job": lambda: spark.range(1).collect(),
            "python_arrow_job": lambda: spark.range(0, 1, 1, 1).mapInArrow(_same_batches, "id long").collect()}
    out = {}
    for name, job in jobs.items():
        for _ in range(3):
            job()
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            job()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = statistics.median(times)
    return out


def report(res: dict[str, Any]) -> None:
    g = res["git"]
    print(f"rstream probe at {g.get('commit')}"
          + (f" (+ uncommitted {', '.join(g['rstream_uncommitted'])})" if g.get("rstream_uncommitted") else "")
          + f"   load {res['loadavg_start'][0]:.2f} -> {res['loadavg_end'][0]:.2f}")
    if res.get("rocketmq"):
        r = res["rocketmq"]
        print(f"  on RocketMQ: a LocalRocketMQ of {r.get('brokers', 1)} broker(s) started in {r['start_s']:.1f} s; its JVMs' RSS "
              f"{r['rss_after_start_bytes'] / 2**20:.0f} MB after the start, {r['rss_at_end_bytes'] / 2**20:.0f} MB at the end"
              + (f" (broker_conf {', '.join(r['broker_conf'])})" if r.get("broker_conf") else ""))
    else:
        print("  on the embedded broker")
    print(f"  (s) get_spark(), fresh JVM                 {res['s_session_s']:7.2f} s")
    if res.get("w_warm_up_s") is not None:
        print(f"  (w) its warm-up, after get_spark() returned {res['w_warm_up_s']:6.2f} s")
    if "a_first_s" in res:
        after = "after the warm-up" if res.get("w_warm_up_s") is not None else "cold session"
        print(f"  (a) start() -> first result, first query   {res['a_first_s']:7.2f} s   ({after})")
        if res["a_warm_median_s"] is not None:
            warm = ", ".join(f"{x:.2f}" for x in res["a_warm_s"])
            print(f"  (a) start() -> first result, warm session  {res['a_warm_median_s']:7.2f} s   ({warm})")
        ph = res["a_phases"]
        print("      start() returns after " + ", ".join(f"{x:.2f}" for x in ph["start_returned_s"])
              + " s; first trigger after " + ", ".join(f"{x:.2f}" for x in ph["to_first_trigger_s"]) + " s")
        for d in ph["batch_ms"]:
            print("      a batch with input, ms: " + ", ".join(f"{k} {v}" for k, v in sorted(d.items()) if v))
    if "b_p50_ms" in res:
        print(f"  (b) send -> sink visible      p50 {res['b_p50_ms']:6.0f} ms   p95 {res['b_p95_ms']:6.0f} ms"
              f"   ({len(res['b_latency_ms'])} records)")
        print(f"      broker append times       p50 {res['b_store_p50_ms']:6.0f} ms   p95 {res['b_store_p95_ms']:6.0f} ms")
        d = res["b_batches_with_data"]
        print(f"      {res['b_batch_count']} batches with data, median ms: "
              + ", ".join(f"{k} {v:.0f}" for k, v in d.items()))
    if "d_idle_cpu_share" in res:
        print(f"  (d) idle started job: CPU {res['d_idle_cpu_share'] * 100:5.1f} % of one core"
              + (f" (RocketMQ's JVMs {res['d_rocketmq_cpu_share'] * 100:.1f} % of it)" if "d_rocketmq_cpu_share" in res else "")
              + "; idle triggers, median ms: " + ", ".join(f"{k} {v:.0f}" for k, v in res["d_idle_triggers"].items()))
    if "c_median_s" in res:
        runs = ", ".join(f"{x:.2f}" for x in res["c_run_until_idle_s"])
        print(f"  (c) run_until_idle(), 1 record              {res['c_median_s']:7.2f} s   ({runs}); "
              f"{res['c_batches_per_run']:.0f} batches per run")
        print("      batch median ms: " + ", ".join(f"{k} {v:.0f}" for k, v in res["c_batches"].items()))
    if "r_requests" in res:
        r = res["r_requests"]
        print(f"  (r) remoting requests per record, in-process (no Spark): {r['per_record']:.1f} in the tasks of both "
              f"stages, {r['per_record_with_planning']:.1f} with InProcessJob's planning; an idle watch's look "
              f"{r['watch_look_total']} ({', '.join(f'{k} {v}' for k, v in r['watch_look'].items())})")
        for stage, codes in r["per_stage"].items():
            print(f"      {stage:8s} " + ", ".join(f"{k} {v:g}" for k, v in codes.items()))
    if "e_floor_ms" in res:
        f = res["e_floor_ms"]
        print(f"  (e) Spark's floor, same session: a JVM-only job {f['jvm_job']:.0f} ms, "
              f"a job through a Python worker over Arrow {f['python_arrow_job']:.0f} ms (medians)")


if __name__ == "__main__":
    sys.exit(main())
