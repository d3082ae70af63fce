"""rstream benchmarks: word count against plain Python and Spark's native streaming count, an
event-time tumbling-window count against plain Python and Spark's native windowed count, and state
replay against raw rocksdict ``WriteBatch`` puts.

    python bench/run.py                 # full size: 1 M words, 1 M clicks, 200 K replay keys
    python bench/run.py --quick         # smoke run (seconds)
    python bench/run.py --profile       # also cProfile one source queue and one shuffle queue
    python bench/run.py --skip wordcount,replay   # the window count alone
    python bench/run.py --skip rocketmq           # without the word count on RocketMQ (no LocalRocketMQ)

Everything runs in one process with one SparkSession (``local[2]`` unless ``--master``). All
temporary data lives in one temporary folder that is deleted at the end (``--keep`` keeps it).
Every measured result is checked against the plain Python count, so the bench cannot report a
fast wrong answer.

Measured:

(a) rstream on Spark: ``RocketMQStream.run_until_idle()`` from call to return (the producer's
    ``send_batch`` and the job's construction are not timed), plus the sum of the batches' busy
    time (``BatchProgress.duration_ms``: the driver's ``foreachBatch``, i.e. the Spark tasks)
    and the sum of the per-queue task times (``QueueProgress.millis``). (a0): the same job with
    ``build(combine=False)`` (every word shuffled alone, as before counts combined), in the same runs;
    (a2): ``aggregate_emit="batch"``.
(a-rmq) the same job as (a), on a real Apache RocketMQ 5.3.3: a ``LocalRocketMQ`` (name server and
    broker JVMs) that the bench starts in its temporary folder (its start time and RSS reported) and
    stops at the end, the same sentences produced into it, checked as (a); with the CPU its JVMs used
    during the run. (a2-rmq): ``aggregate_emit="batch"``; (a-rmq0), (a2-rmq0): both with
    ``pack_shuffle=False`` (a RocketMQ message per shuffle record). Each counted in the messages
    RocketMQ stored for it (its per-queue end offsets of every topic, before and after) and the records
    those messages hold (a packed one many), per second of the run, and over (k).
(k) the broker's own write rate on the same LocalRocketMQ, before the word count: the official Java
    client in a loop (``bench/BrokerRate.java``, compiled with javac at bench time against the
    rocketmq-client jar LocalRocketMQ runs with) shaped like RocketMQ's benchmark Producer and
    BatchProducer, from 64 threads of one message a send to 2 threads of 4096; acknowledged and
    readable messages per second (``bench.rocketmq.broker_rate``); (k) is the best readable rate.
    ``--skip broker-rate`` leaves it out. Reported as speed a-rmq/a (RocketMQ over the embedded broker, target >= 0.5) and
    a-rmq/c (over Spark native), in the same run. ``--skip rocketmq`` leaves it out; asked for without
    RocketMQ's jars (``bash setup.sh`` fetches them), the bench stops before it starts anything.
    ``--profile`` also runs the job's tasks in-process on RocketMQ and on the embedded broker
    (this process's CPU, the JVMs' CPU by thread) and cProfiles one in-process run on RocketMQ.
(b) plain Python over the same list of sentences: a dict loop and ``collections.Counter``; the
    faster one is the ceiling.
(c) Spark Structured Streaming natively: text files -> ``split``/``explode`` -> ``groupBy().count()``
    -> memory sink, ``outputMode("update")``, ``trigger(availableNow=True)``; timed from
    ``writeStream.start()`` to ``awaitTermination()`` returning.
(r) replay: ``StateStore.replay`` of a state topic written by a real rstream job (N distinct keys
    counted once each) vs the same (key, value) pairs put into a fresh rocksdict with one
    ``WriteBatch``. Then replay after 10 updates per key vs after 1 (same keys, changelogs written
    in appends of 10 000 records as a count's micro-batches would, compacted by the broker's own
    policy as they are written; target <= 1.5x), each replayed store checked against the reference.

Window count (``--skip windows`` leaves it out): generated clicks ``{"page", "ts"}`` (ts in epoch
ms, mostly increasing, some out of order within the allowed lateness, some later than it), counted
per page in 10 s tumbling windows with 2 s allowed lateness:

(a) rstream: ``select_timestamp(ts).key_by(page).window(TumblingWindow(10 s)).count()`` to a sink,
    ``run_until_idle()`` (which ends with an idle tick that fires the last windows).
(b) plain Python over the same JSON bodies, per source queue in offset order as the broker stores
    them: watermark = max(watermark, ts - lateness) per queue, ts < watermark is late, count the
    rest per (page, window). (a) must equal (b) exactly: every window's count, and the late records.
(c) Spark natively: the same JSON lines in files, ``readStream.schema(...).json`` ->
    ``withWatermark("ts", "2 seconds")`` -> ``groupBy(window("ts", "10 seconds"), "page").count()``
    -> memory sink, append mode, ``availableNow``: once with all files in one batch (c1), once one
    file per batch (c2). Spark's watermark is global and judges a batch by the previous batch's
    watermark, so its result differs from (a) and (b); the bench reports by how much, and checks
    it against a model of Spark's rule.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_REPO = Path(__file__).resolve().parent.parent
if str(_REPO) not in sys.path:  # run as a script: the bench modules import as bench.*
    sys.path.insert(0, str(_REPO))

from bench.data import make_sentences, produce  # noqa: E402
from bench.report import JSON_HELP, fmt_rate, git_state, print_top, results_path  # noqa: E402
from bench.workloads import (  # noqa: E402
    bench_windows,
    bench_wordcount,
    build_state_topic,
    profile_queue,
    profile_replay,
    profile_window_queue,
    run_replay,
    run_replay_updates,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=1_000_000, help="words in the word count (1 000 000)")
    ap.add_argument("--vocab", type=int, default=10_000, help="vocabulary size (10 000)")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of word frequencies (1.0)")
    ap.add_argument("--sentence-len", type=int, default=10, help="mean words per sentence (10)")
    ap.add_argument("--queues", type=int, default=4, help="queues of the sentences topic (4)")
    ap.add_argument("--text-files", type=int, default=4, help="text files for Spark's native source (4)")
    ap.add_argument("--seed", type=int, default=58)
    ap.add_argument("--clicks", type=int, default=1_000_000, help="clicks in the window count (1 000 000)")
    ap.add_argument("--pages", type=int, default=1_000, help="distinct pages of the clicks (1 000)")
    ap.add_argument("--page-zipf", type=float, default=1.0, help="Zipf exponent of page popularity (1.0)")
    ap.add_argument("--click-rate", type=float, default=1_000.0,
                    help="clicks per second of event time (1 000: 1 M clicks span about 17 min, 100 windows)")
    ap.add_argument("--click-files", type=int, default=10,
                    help="JSON files of the clicks for Spark native; (c2) reads one per batch (10)")
    ap.add_argument("--replay-keys", type=int, default=200_000, help="keys in the replayed state topic (200 000)")
    ap.add_argument("--replay-queues", type=int, default=1,
                    help="queues of the replayed state topic (1: all keys in one store)")
    ap.add_argument("--replay-updates", type=int, default=10,
                    help="updates per key of the second replayed topic, compared with one update per key (10)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="measured runs of each word count (median reported) and of replay (best reported)")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--no-warmup", action="store_true", help="skip the small warm-up runs of (a) and (c)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile one source and one shuffle queue task (word count, window count)")
    ap.add_argument("--profile-top", type=int, default=25)
    ap.add_argument("--skip", default="",
                    help="comma list of parts to skip: wordcount,rocketmq,broker-rate,windows,replay (broker-rate: "
                         "(k), the Java producer's runs; rocketmq: the word "
                         "count on a LocalRocketMQ, part of wordcount)")
    ap.add_argument("--rate-seconds", type=float, default=8.0,
                    help="seconds of each run of the Java producer in (k), the broker's own write rate (8)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 K words, 20 K clicks, 5 K keys, 1 repeat")
    ap.add_argument("--tmp", default=None, help="parent folder of the temporary data (system temp)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data")
    ap.add_argument("--json", default=None, help=JSON_HELP)
    args = ap.parse_args(argv)
    if args.quick:
        args.words, args.replay_keys, args.repeat = 20_000, 5_000, 1
        args.vocab = min(args.vocab, 2_000)
        args.clicks, args.click_rate, args.pages, args.click_files = 20_000, 200.0, min(args.pages, 200), 4
        args.rate_seconds = min(args.rate_seconds, 2.0)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - {"wordcount", "rocketmq", "broker-rate", "windows", "replay"}
    if unknown:
        ap.error(f"--skip knows wordcount, rocketmq, broker-rate, windows and replay, not {', '.join(sorted(unknown))}")
    with_rocketmq = "wordcount" not in skip and "rocketmq" not in skip
    if with_rocketmq:
        from bench.rocketmq import missing

        why = missing()
        if why is not None:
            print(f"rstream bench: cannot run the word count on RocketMQ: {why}", file=sys.stderr)
            return 2

    root = Path(tempfile.mkdtemp(prefix="rstream-bench-", dir=args.tmp)).absolute()
    results: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "args": vars(args),
        "loadavg_start": os.getloadavg(),
        "git": git_state(),
    }
    print(f"rstream bench  {results['date']}  cpus={os.cpu_count()}  python {platform.python_version()}  "
          f"load {os.getloadavg()[0]:.2f}  tmp={root}", flush=True)
    g = results["git"]
    print(f"rstream at commit {g.get('commit')}"
          + (f" plus uncommitted changes in {', '.join(g['rstream_uncommitted'])}" if g.get("rstream_uncommitted") else ""),
          flush=True)
    mq = None
    try:
        from rstream import EmbeddedBroker, get_spark

        t = time.perf_counter()
        spark = get_spark(args.master, tmp_dir=root / "spark-tmp")
        import pyspark

        results["machine"]["pyspark"] = pyspark.__version__
        results["spark_conf"] = {k: spark.conf.get(k, None) for k in (
            "spark.master", "spark.sql.shuffle.partitions", "spark.python.worker.reuse",
            "spark.sql.streaming.stateStore.providerClass")}
        print(f"spark session {spark.conf.get('spark.master')} started in {time.perf_counter() - t:.1f} s  "
              f"shuffle.partitions={results['spark_conf']['spark.sql.shuffle.partitions']}", flush=True)
        broker = EmbeddedBroker(root / "broker")

        rmq = None
        if with_rocketmq:
            from bench.rocketmq import start

            print(f"starting LocalRocketMQ (load {os.getloadavg()[0]:.2f}) ...", flush=True)
            mq, facts = start(root)
            results["rocketmq"] = facts
            rmq = (mq, mq.broker())
            print(f"LocalRocketMQ started in {facts['start_s']:.1f} s, its two JVMs' RSS "
                  f"{facts['rss_after_start_bytes'] / 2**20:.0f} MB (name server and broker in the proxy)", flush=True)
            if "broker-rate" not in skip:
                from bench.rocketmq import broker_rate, compile_broker_rate

                print(f"\n(k) the broker's own write rate: the official Java client in a loop, {args.rate_seconds:g} s "
                      "per run", flush=True)
                results["broker_rate"] = broker_rate(mq, rmq[1], compile_broker_rate(root), args.rate_seconds)
                print(f"  (k) = {results['broker_rate']['best_messages_per_s']:,.0f} messages/s readable "
                      f"({results['broker_rate']['best']}; acknowledged at most "
                      f"{results['broker_rate']['best_acknowledged_per_s']:,.0f} messages/s)", flush=True)
        if "wordcount" not in skip:
            results["wordcount"] = bench_wordcount(args, spark, broker, root, rmq)
            if "broker_rate" in results:
                k = results["broker_rate"]["best_messages_per_s"]
                rm = results["wordcount"]["rocketmq"]
                ka = results["broker_rate"]["best_acknowledged_per_s"]
                print(f"\n  rstream's writes on RocketMQ against (k) = {k:,.0f} messages/s readable (the broker's own "
                      f"rate; acknowledged: {ka:,.0f}):")
                for part, emit in (("a_rmq", "per-record"), ("a_rmq0", "per-record, shuffle not packed"),
                                   ("a2_rmq", "batch"), ("a2_rmq0", "batch, shuffle not packed")):
                    rm[f"{part}_over_k"] = rm[f"{part}_messages_per_s"] / k
                    rm[f"{part}_over_k_acknowledged"] = rm[f"{part}_messages_per_s"] / ka
                    print(f"    ({part.replace('_', '-')}) {emit} emission: {rm[f'{part}_messages_per_s']:9,.0f} messages/s "
                          f"stored over the whole run = {rm[f'{part}_over_k']:.3f} x (k) "
                          f"({rm[f'{part}_over_k_acknowledged']:.3f} x acknowledged)  (target >= 0.5: "
                          f"{'MET' if rm[f'{part}_over_k'] >= 0.5 else 'NOT MET'});  records written "
                          f"{rm[f'{part}_records_per_s']:,.0f}/s = {rm[f'{part}_records_per_s'] / k:.3f} x (k);  its input, "
                          f"{args.words / results['wordcount']['median_s'][part]:,.0f} words/s = "
                          f"{args.words / results['wordcount']['median_s'][part] / k:.3f} x (k)", flush=True)
            if mq is not None:
                results["rocketmq"]["rss_after_wordcount_bytes"] = mq.rss_bytes()
                results["rocketmq"]["rss_max_bytes"] = results["wordcount"]["rocketmq"]["rss_max_bytes"]
                print(f"  LocalRocketMQ: started in {results['rocketmq']['start_s']:.1f} s; RSS "
                      f"{results['rocketmq']['rss_after_start_bytes'] / 2**20:.0f} MB after its start, "
                      f"{results['rocketmq']['rss_max_bytes'] / 2**20:.0f} MB at most after a run "
                      f"(the store: {len(results['wordcount']['runs']['a_rmq'])} runs' topics)", flush=True)
        if "windows" not in skip:
            results["windows"] = bench_windows(args, spark, broker, root)
        state_topic = None
        if "replay" not in skip:
            t = time.perf_counter()
            job, shuffle, state_topic = build_state_topic(spark, broker, root, args.replay_keys, args.replay_queues)
            print(f"\nstate topic {state_topic}: {args.replay_keys} keys in {args.replay_queues} queue(s), "
                  f"written by a real job in {time.perf_counter() - t:.1f} s", flush=True)
            rp = run_replay(broker, root, job.job_id, shuffle, state_topic, args.replay_keys, max(1, args.repeat))
            results["replay"] = rp
            k = rp["keys"]
            print(f"  StateStore.replay        {rp['replay_s'] * 1000:8.1f} ms  {fmt_rate(k, rp['replay_s'])} keys")
            print(f"    of which broker read   {rp['read_s'] * 1000:8.1f} ms  {fmt_rate(k, rp['read_s'])} (read_records + dict, timed apart)")
            print(f"  raw WriteBatch puts      {rp['raw_writebatch_s'] * 1000:8.1f} ms  {fmt_rate(k, rp['raw_writebatch_s'])} keys")
            print(f"  raw one-by-one puts      {rp['raw_put_s'] * 1000:8.1f} ms  {fmt_rate(k, rp['raw_put_s'])} keys")
            ratio = rp["raw_writebatch_s"] / rp["replay_s"]
            rp["ratio_replay_vs_writebatch"] = ratio
            print(f"  replay speed / WriteBatch speed = {ratio:.2f}   (target >= 0.5: "
                  f"{'MET' if ratio >= 0.5 else 'NOT MET'})", flush=True)
            u = args.replay_updates
            # --quick: the default policy leaves 5 000 keys alone (workshop-size topics keep their
            # history), so scale its thresholds to the keys to see it work
            scaled = {"compact_min_dirty": args.replay_keys // 4, "compact_min_lag": args.replay_keys // 20}
            ru = run_replay_updates(root, args.replay_keys, u, max(1, args.repeat), scaled if args.quick else None)
            print(f"  replay after {u} updates per key vs 1, same keys, broker compaction settings: "
                  f"{ru['broker_settings']}")
            results["replay_updates"] = ru
            for n in (1, u):
                w = ru[f"written_{n}"]
                print(f"  {n:2d} update(s) per key: {w['records']} changelog records written in {w['appends']} appends "
                      f"({w['write_s']:.1f} s), compacted below {w['compacted_below']}, {w['stored_records']} stored; "
                      f"replay {ru[f'replay_{n}_s'] * 1000:8.1f} ms  {fmt_rate(ru['keys'], ru[f'replay_{n}_s'])} keys")
            print(f"  replay after {u} updates per key / after 1 = {ru['ratio']:.2f}   (target <= 1.5: "
                  f"{'MET' if ru['ratio'] <= 1.5 else 'NOT MET'}; verified)", flush=True)
        if args.profile and ("wordcount" not in skip or "windows" in skip):
            print("\nprofiling run_queue in-process (cProfile) ...", flush=True)
            source = "sentences"
            if not broker.has_topic(source):
                produce(broker, make_sentences(args.words, args.vocab, args.zipf, args.sentence_len, args.seed),
                        source, args.queues)
            prof = profile_queue(broker, root, source, args.profile_top)
            results["profile"] = prof
            print("\n  every queue in this process, one after the other (one core, no Spark, no profiler):")
            for name, times in prof.pop("in_process").items():
                total = sum(x["seconds"] for x in times.values())
                print(f"    {name:13s} source stage {times['source']['seconds']:6.2f} s "
                      f"({times['source']['records_in']} records in)   shuffle stage {times['shuffle']['seconds']:6.2f} s "
                      f"({times['shuffle']['records_in']} records in)   total {total:6.2f} s "
                      f"= {fmt_rate(args.words, total)} words on one core")
                results.setdefault("profile_in_process", {})[name] = times
            for stage, p in prof.items():
                print(f"\n[{stage}] {p['topic']} queue {p['queue']}: {p['records']} input records, "
                      f"{p['records_in']} records into the chain; {p['wall_profiled_s']} s under cProfile")
                print_top(p["top"])
        if args.profile and mq is not None and rmq is not None:
            from bench.baselines import python_dict_loop
            from bench.rocketmq import print_profile, profile_wordcount

            print("\nprofiling the word count's tasks in-process on RocketMQ ...", flush=True)
            sentences = make_sentences(args.words, args.vocab, args.zipf, args.sentence_len, args.seed)
            prof_rmq = profile_wordcount(mq, rmq[1], broker, root, "sentences", args.words,
                                         python_dict_loop(sentences), args.profile_top)
            results["profile_rocketmq"] = prof_rmq
            print_profile(prof_rmq, args.words)
        if args.profile and "windows" in results:
            print("\nprofiling the window count's run_queue in-process (cProfile) ...", flush=True)
            prof = profile_window_queue(broker, root, "clicks", args.profile_top)
            results["profile_windows"] = prof
            stages = prof.pop("in_process")
            total = sum(x["seconds"] for x in stages.values())
            print("\n  every queue in this process, one after the other (one core, no Spark, no profiler):")
            print("    " + "   ".join(f"{name} stage {x['seconds']:6.2f} s ({x['records_in']} records in)"
                                      for name, x in stages.items())
                  + f"   total {total:6.2f} s = {fmt_rate(args.clicks, total)} clicks on one core")
            results["profile_windows_in_process"] = stages
            for stage, p in prof.items():
                print(f"\n[window {stage}] {p['topic']} queue {p['queue']}: {p['records']} input records, "
                      f"{p['records_in']} records into the chain, {p['late']} late; {p['wall_profiled_s']} s under cProfile")
                print_top(p["top"])
        if args.profile:
            if state_topic is not None:
                rp = profile_replay(broker, root, state_topic, args.profile_top)
                results["profile_replay"] = rp
                print(f"\n[replay] StateStore.replay of {rp['keys']} keys: {rp['wall_profiled_s']} s under cProfile")
                print_top(rp["top"])
    finally:
        if mq is not None:
            mq.stop()
        results["loadavg_end"] = os.getloadavg()
        print(f"\nload average (1, 5, 15 min) at start {results['loadavg_start']}, at end {results['loadavg_end']}  "
              "(other work on this machine skews every number)")
        out = results_path(args.json, "run")
        out.write_text(json.dumps(results, indent=2, default=str))
        print(f"json: {out}")
        try:
            from pyspark.sql import SparkSession

            s = SparkSession.getActiveSession()
            if s is not None:
                s.stop()
        except Exception:
            pass
        if args.keep:
            print(f"\nkept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
