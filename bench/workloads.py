"""Bench workloads: rstream jobs (word count, event-time windows, replay) and their profiles."""

from __future__ import annotations

import argparse
import collections
import cProfile
import itertools
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.baselines import (
    python_dict_loop,
    python_windows,
    query_phases,
    run_bytewax,
    run_python,
    run_python_windows,
    run_spark_native,
    run_spark_windows,
    spark_rule_model,
    spark_trigger_ms,
)
from bench.data import (
    LATENESS_MS,
    WINDOW_MS,
    make_clicks,
    make_sentences,
    produce,
    write_click_files,
    write_text_files,
)
from bench.report import compare_windows, diff, fmt_rate, print_phases, top_rows


def wordcount_topology(job_id: str, source: str, sink: str, combine: bool = True, visible: str = "always") -> Any:
    from rstream import StreamBuilder, TextDeserializer, TextSerializer

    b = StreamBuilder(job_id)
    (b.source(source, TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()
     .to_rstream().sink(sink, TextSerializer(with_key=True), visible=visible))
    return b.build(combine=combine)


def read_sink_counts(broker: Any, topic: str) -> dict[str, int]:
    """The last count per word in the sink topic (each key stays in one sink queue, in order)."""
    last: dict[str, int] = {}
    for q, end in enumerate(broker.end_offsets(topic)):
        for _off, key, body, _born, _store, _h in broker.read_records(topic, q, 0, end):
            word, _, n = body.decode().rpartition(":")
            assert word == key, (word, key)
            last[key] = int(n)
    return last


def progress_summary(progress: list[Any], source: str) -> dict[str, Any]:
    """What every rstream run reports of its batches: busy time, task time by stage, per batch."""
    by_topic: dict[str, float] = collections.defaultdict(float)
    for p in progress:
        for q in p.queues:
            by_topic["source" if q.topic == source else "shuffle"] += q.millis
    return {
        "busy_ms": sum(p.duration_ms for p in progress),
        "queue_ms": dict(by_topic),
        "batches": [{"batch_id": p.batch_id, "records_in": p.records_in, "records_out": p.records_out,
                     "duration_ms": round(p.duration_ms, 1),
                     "queue_ms": [round(q.millis, 1) for q in p.queues]} for p in progress],
    }


def run_rstream(spark: Any, broker: Any, root: Path, source: str, job_id: str, expected: dict[str, int] | None,
                max_per_queue: int, emit: str = "record", combine: bool = True,
                cpu_of: Callable[[], float] | None = None, props: dict[str, Any] | None = None) -> dict[str, Any]:
    """(a) and (a2): the word count on Spark; ``combine``: built with the combine rewrite (off: (a0));
    ``cpu_of``: CPU seconds of something else (RocketMQ's JVMs), read before and after the timed part;
    ``props``: more job properties."""
    from rstream import RocketMQStream

    sink = f"{job_id}-counts"
    topo = wordcount_topology(job_id, source, sink, combine)
    job = RocketMQStream(topo, properties={"data_dir": str(root / "rstream"), "max_records_per_queue": max_per_queue,
                                           "aggregate_emit": emit, **(props or {})},
                         broker=broker, spark=spark)
    cpu0 = cpu_of() if cpu_of is not None else 0.0
    wall = time.time()
    t = time.perf_counter()
    job.run_until_idle(timeout=3600, progress=False)
    seconds = time.perf_counter() - t
    other_cpu = cpu_of() - cpu0 if cpu_of is not None else None
    phases = query_phases(getattr(job, "_query", None), wall, time.time())
    out = {
        "seconds": seconds,
        "other_cpu_s": other_cpu,
        "spark_trigger_ms": spark_trigger_ms(getattr(job, "_query", None)),
        "phases": phases,
        **progress_summary(job.progress, source),
    }
    if expected is not None:
        got = read_sink_counts(broker, sink)
        assert got == expected, f"rstream sink counts differ from Python: {diff(got, expected)}"
        state = job.state()
        from_state = dict(zip(state["key"], state["value"]))
        assert from_state == expected, f"rstream state differs from Python: {diff(from_state, expected)}"
        out["verified"] = True
    return out


def build_state_topic(spark: Any, broker: Any, root: Path, keys: int, queues: int) -> tuple[Any, str, str]:
    """Count ``keys`` distinct keys once each with a real job; returns (job, shuffle topic, state topic)."""
    from rstream import RocketMQStream, StreamBuilder, TextDeserializer

    src = "replay-keys"
    broker.create_topic(src, queues=4)
    for i in range(0, keys, 100_000):
        broker.send_batch(src, [f"key-{j:08d}" for j in range(i, min(keys, i + 100_000))])
    b = StreamBuilder("replaybench", shuffle_queues=queues)
    b.source(src, TextDeserializer()).key_by(lambda w: w).count()
    topo = b.build()
    job = RocketMQStream(topo, properties={"data_dir": str(root / "rstream")}, broker=broker, spark=spark)
    job.run_until_idle(timeout=3600, progress=False)
    (shuffle, state_topic), = topo.state_topics.items()
    return job, shuffle, state_topic


def run_replay(broker: Any, root: Path, job_id: str, shuffle: str, state_topic: str, keys: int,
               repeat: int) -> dict[str, Any]:
    from rocksdict import Options, Rdict, WriteBatch

    from rstream import StateStore
    from rstream.state.store import DELETE_HEADER, unframe

    ends = broker.end_offsets(state_topic)
    best: dict[str, float] = {}
    loaded_total = 0
    for r in range(repeat):
        t_read = t_replay = t_raw = t_raw_one = 0.0
        loaded_total = 0
        for q, end in enumerate(ends):
            # read only: what the broker part of replay costs (also warms SQLite's page cache)
            t = time.perf_counter()
            latest = {}
            for _off, key, body, _b, _s, headers in broker.read_records(state_topic, q, 0, end):
                latest[key] = (body, headers)
            t_read += time.perf_counter() - t
            pairs = [unframe(body) for body, h in latest.values() if body and not (h and h.get(DELETE_HEADER))]

            commit = broker.last_commit(job_id, shuffle, q)
            folder = root / "replay" / f"r{r}" / "store" / str(q)
            store = StateStore(folder, state_topic, q).open()
            t = time.perf_counter()
            n = store.replay(broker, None if commit is None else commit.end_offset)
            t_replay += time.perf_counter() - t
            store.close()
            assert n == len(pairs), (n, len(pairs))
            loaded_total += n

            raw = Rdict(str(root / "replay" / f"r{r}" / "raw" / str(q)), Options(raw_mode=True))
            t = time.perf_counter()
            wb = WriteBatch(raw_mode=True)
            put = wb.put
            for kb, vb in pairs:
                put(kb, vb)
            raw.write(wb)
            t_raw += time.perf_counter() - t
            raw.close()

            one = Rdict(str(root / "replay" / f"r{r}" / "one" / str(q)), Options(raw_mode=True))
            t = time.perf_counter()
            for kb, vb in pairs:
                one[kb] = vb
            t_raw_one += time.perf_counter() - t
            one.close()
        for name, value in (("read_s", t_read), ("replay_s", t_replay), ("raw_writebatch_s", t_raw),
                            ("raw_put_s", t_raw_one)):
            best[name] = min(best.get(name, float("inf")), value)
        shutil.rmtree(root / "replay" / f"r{r}", ignore_errors=True)
    assert loaded_total == keys, f"replayed {loaded_total} keys, expected {keys}"
    # check the replayed store really holds the right values: replay once more and read it back
    check = StateStore(root / "replay" / "check", state_topic, 0)
    check.open()
    check.replay(broker, None)
    sample = list(itertools.islice(check.items(), 1000))
    check.close()
    assert sample and all(v == 1 for _op, _k, v in sample), sample[:3]
    return {"keys": loaded_total, "queues": len(ends), "repeat": repeat, **best}


def write_updates(broker: Any, topic: str, keys: int, updates: int, per_append: int = 10_000) -> dict[str, Any]:
    """A count's changelog as a job writes it: ``updates`` rounds, each setting every one of ``keys``
    keys once (to the round number), in appends of ``per_append`` records (one micro-batch of one
    queue); the broker compacts the topic as it goes, by its own policy. Returns what was written."""
    from rstream import StateStore

    broker.create_topic(topic, queues=1, compact=True)
    writer = StateStore(Path("unused"), topic, 0)  # staging and changelog only: never opened
    names = [f"key-{j:08d}" for j in range(keys)]
    t = time.perf_counter()
    appends = 0
    for r in range(1, updates + 1):
        for i in range(0, keys, per_append):
            for name in names[i:i + per_append]:
                writer.put("count", name, r)
            broker.append({(topic, 0): writer.changelog()})
            writer.discard()
            appends += 1
    return {"records": keys * updates, "appends": appends, "write_s": time.perf_counter() - t,
            "end_offset": broker.end_offsets(topic)[0], "compacted_below": broker.compacted_below(topic, 0),
            "stored_records": sum(1 for _ in broker.read_records(topic, 0, 0))}


def run_replay_updates(root: Path, keys: int, updates: int, repeat: int,
                       broker_settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Replay after ``updates`` updates per key vs after one, same keys (the target: at most 1.5x,
    because automatic compaction makes replay cost follow live keys, not history), on a broker of
    its own with ``broker_settings`` (default: the broker's defaults). Each replayed store is
    checked against the reference: every key holds its last round."""
    from rstream import EmbeddedBroker, StateStore

    broker = EmbeddedBroker(root / "broker-updates", **(broker_settings or {}))
    out: dict[str, Any] = {"keys": keys, "updates": updates, "broker_settings": broker_settings or "defaults"}
    topics = {1: "replay-updates-1", updates: f"replay-updates-{updates}"}
    for n, topic in topics.items():
        out[f"written_{n}"] = write_updates(broker, topic, keys, n)
    best = {n: float("inf") for n in topics}
    for r in range(repeat + 1):  # round 0 warms up (SQLite pages, RocksDB) and checks the stores
        for n, topic in topics.items():  # alternate, so machine noise hits both alike
            store = StateStore(root / "replay-updates" / f"{n}-{r}", topic, 0).open()
            t = time.perf_counter()
            loaded = store.replay(broker, None)
            if r > 0:
                best[n] = min(best[n], time.perf_counter() - t)
            assert loaded == keys, (n, loaded, keys)
            if r == 0:
                got = {key: value for _op, key, value in store.items("count")}
                assert got == {f"key-{j:08d}": n for j in range(keys)}, f"replay after {n} updates per key is wrong"
            store.close()
            shutil.rmtree(root / "replay-updates" / f"{n}-{r}", ignore_errors=True)
    out["replay_1_s"], out[f"replay_{updates}_s"] = best[1], best[updates]
    out["ratio"] = best[updates] / best[1]
    out["verified"] = True
    return out


def window_topology(job_id: str, source: str, sink: str, combine: bool = True) -> Any:
    from rstream import JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow

    b = StreamBuilder(job_id)
    (b.source(source, JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])
     .window(TumblingWindow(Time.seconds(WINDOW_MS // 1000))).count().to_rstream()
     .sink(sink, JsonSerializer(with_key=True)))
    return b.build(combine=combine)


def read_window_results(broker: Any, topic: str) -> dict[tuple[str, int, int], int]:
    """``{(page, start, end): count}`` from the sink topic; a window fired twice fails."""
    out: dict[tuple[str, int, int], int] = {}
    for m in broker.read(topic):
        doc = json.loads(m.body)
        page, start, end = doc["key"]
        assert (page, start, end) not in out, f"window {(page, start, end)} fired twice"
        out[(page, start, end)] = doc["value"]
    return out


def run_rstream_windows(spark: Any, broker: Any, root: Path, source: str, job_id: str, n: int,
                        expected: dict[tuple[str, int, int], int] | None,
                        expected_late: list[int] | None, combine: bool = True) -> dict[str, Any]:
    """(a): the window count on Spark; ``combine``: built with the combine rewrite (off: (a0))."""
    from rstream import RocketMQStream

    sink = f"{job_id}-windows"
    topo = window_topology(job_id, source, sink, combine)
    job = RocketMQStream(topo, properties={"data_dir": str(root / "rstream"), "allowed_lateness_ms": LATENESS_MS,
                                           "idle_timeout_ms": 600_000, "max_records_per_queue": n},
                         broker=broker, spark=spark)
    t = time.perf_counter()
    job.run_until_idle(timeout=3600, progress=False)  # one query: the source sends the end-of-input idle flush itself
    seconds = time.perf_counter() - t
    out: dict[str, Any] = {"seconds": seconds, **progress_summary(job.progress, source)}
    if expected is not None:
        got = read_window_results(broker, sink)
        late = job.late_records()
        out["windows"] = len(got)
        out["late"] = len(late)
        assert got == expected, f"rstream windows differ from Python: {diff(got, expected)}"
        assert sum(got.values()) + len(late) == n, f"on time {sum(got.values())} + late {len(late)} != {n}"
        assert expected_late is not None and sorted(late["data_time"]) == sorted(expected_late), \
            f"rstream declared {len(late)} records late, Python {len(expected_late or [])}"
        out["verified"] = True
    return out


def profile_queue(broker: Any, root: Path, source: str, top: int) -> dict[str, Any]:
    """The per-queue task in this process, without Spark.

    1. Every queue of the word count, one after the other on one core, no profiler: the whole
       Python work of the job; once as written, once without the sink (``count()`` only), to show
       what emitting every update to the sink costs.
    2. cProfile of ``run_queue`` on source queue 0, then on shuffle queue 0 (after every source
       queue ran, so the shuffle queue holds its whole input).
    """
    from rstream import StreamBuilder, TextDeserializer
    from rstream.runtime.commit import run_queue
    from rstream.runtime.config import TaskConfig

    def setup(job_id: str, with_sink: bool = True) -> tuple[Any, str]:
        sink = f"{job_id}-counts"
        if with_sink:
            topo = wordcount_topology(job_id, source, sink)
        else:
            b = StreamBuilder(job_id)
            b.source(source, TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()
            topo = b.build()
        for shuffle, queues in topo.shuffle_topics.items():
            broker.create_topic(shuffle, queues=queues)
        for input_topic, state_topic in topo.state_topics.items():
            broker.create_topic(state_topic, queues=broker.topic(input_topic).queues, compact=True)
        broker.create_topic(sink, queues=4)
        cfg = TaskConfig(job=job_id, topology=topo, broker=broker, state_dir=str(root / "profile-state" / job_id),
                         sink_queues={sink: 4})
        return cfg, next(iter(topo.shuffle_topics))

    ends = broker.end_offsets(source)
    out: dict[str, Any] = {"in_process": {}}
    for name, with_sink in (("with_sink", True), ("without_sink", False)):
        cfg, shuffle = setup(f"wc-plain-{name.replace('_', '')}", with_sink)
        times = {}
        for stage, topic in (("source", source), ("shuffle", shuffle)):
            t = time.perf_counter()
            n = 0
            for q, end in enumerate(broker.end_offsets(topic)):
                n += run_queue(cfg, topic, q, 0, end)["records_in"]
            times[stage] = {"seconds": round(time.perf_counter() - t, 3), "records_in": n}
        out["in_process"][name] = times

    prof_cfg, prof_shuffle = setup("wc-profile")
    for q in range(1, len(ends)):
        run_queue(prof_cfg, source, q, 0, ends[q])
    for stage, topic in (("source", source), ("shuffle", prof_shuffle)):
        end = broker.end_offsets(topic)[0]
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        info = run_queue(prof_cfg, topic, 0, 0, end)
        prof.disable()
        out[stage] = {"topic": topic, "queue": 0, "records": end, "records_in": info["records_in"],
                      "wall_profiled_s": round(time.perf_counter() - t, 3), "top": top_rows(prof, top)}
    return out


def profile_window_queue(broker: Any, root: Path, source: str, top: int) -> dict[str, Any]:
    """The window count's per-queue tasks in this process, without Spark (as ``profile_queue``).

    1. Every queue one after the other on one core, no profiler: the source stage (JSON, time,
       key, framed shuffle), the shuffle stage (window counts; windows fire as the source queues'
       watermark markers arrive) and the flush stage (the final idle tick fires the rest).
    2. cProfile of ``run_queue`` on source queue 0, shuffle queue 0 and its flush, for a second job.
    """
    from rstream import JobProperties
    from rstream.runtime.commit import run_queue
    from rstream.runtime.config import TaskConfig
    from rstream.shuffle.wire import send_ticks

    def setup(job_id: str) -> tuple[Any, str]:
        sink = f"{job_id}-windows"
        topo = window_topology(job_id, source, sink)
        for shuffle, queues in topo.shuffle_topics.items():
            broker.create_topic(shuffle, queues=queues)
        for input_topic, state_topic in topo.state_topics.items():
            broker.create_topic(state_topic, queues=broker.topic(input_topic).queues, compact=True)
        broker.create_topic(sink, queues=4)
        late_topic = f"{job_id}-late"
        broker.create_topic(late_topic, queues=1)
        counts = {t: broker.topic(t).queues for t in topo.input_topics}
        cfg = TaskConfig(job=job_id, topology=topo, broker=broker, state_dir=str(root / "profile-state" / job_id),
                         sink_queues={sink: 4},
                         settings=JobProperties(allowed_lateness_ms=LATENESS_MS, idle_timeout_ms=600_000),
                         late_topic=late_topic,
                         producers={t: topo.producers(t, counts) for t in topo.framed_topics})
        return cfg, next(iter(topo.shuffle_topics))

    def flush_tick(shuffle: str) -> None:  # what RocketMQStream.tick(flush=True) appends
        send_ticks(broker, [shuffle], flush=True)

    def run_all(cfg: Any, topic: str, starts: list[int] | None = None) -> dict[str, Any]:
        t = time.perf_counter()
        n = 0
        ends = broker.end_offsets(topic)
        for q, end in enumerate(ends):
            n += run_queue(cfg, topic, q, starts[q] if starts else 0, end)["records_in"]
        return {"seconds": round(time.perf_counter() - t, 3), "records_in": n, "ends": ends}

    cfg, shuffle = setup("win-plain")
    src = run_all(cfg, source)
    shf = run_all(cfg, shuffle)
    flush_tick(shuffle)
    fl = run_all(cfg, shuffle, shf["ends"])
    out: dict[str, Any] = {"in_process": {name: {"seconds": x["seconds"], "records_in": x["records_in"]}
                                          for name, x in (("source", src), ("shuffle", shf), ("flush", fl))}}

    prof_cfg, prof_shuffle = setup("win-profile")
    ends = broker.end_offsets(source)
    for q in range(1, len(ends)):
        run_queue(prof_cfg, source, q, 0, ends[q])
    for stage, topic in (("source", source), ("shuffle", prof_shuffle), ("flush", prof_shuffle)):
        start = 0
        if stage == "flush":  # queue 0 only: each shuffle queue fires its own windows
            start = broker.end_offsets(prof_shuffle)[0]
            flush_tick(prof_shuffle)
        end = broker.end_offsets(topic)[0]
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        info = run_queue(prof_cfg, topic, 0, start, end)
        prof.disable()
        out[stage] = {"topic": topic, "queue": 0, "records": end - start, "records_in": info["records_in"],
                      "late": info.get("late"), "wall_profiled_s": round(time.perf_counter() - t, 3),
                      "operators": info["operators"], "top": top_rows(prof, top)}
    return out


def profile_replay(broker: Any, root: Path, state_topic: str, top: int) -> dict[str, Any]:
    from rstream import StateStore

    store = StateStore(root / "profile-replay", state_topic, 0).open()
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    n = store.replay(broker, None)
    prof.disable()
    wall = time.perf_counter() - t
    store.close()
    return {"keys": n, "wall_profiled_s": round(wall, 3), "top": top_rows(prof, top)}


def bench_wordcount(args: argparse.Namespace, spark: Any, broker: Any, root: Path,
                    rmq: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """The word count's parts; ``rmq``: ``(LocalRocketMQ, its RocketMQBroker)`` for (a-rmq), or None."""
    t = time.perf_counter()
    sentences = make_sentences(args.words, args.vocab, args.zipf, args.sentence_len, args.seed)
    n_words = sum(len(s.split()) for s in sentences)
    assert n_words == args.words
    print(f"\nword count: {n_words} words in {len(sentences)} sentences, vocabulary {args.vocab}, "
          f"Zipf s={args.zipf}, seed {args.seed} (generated in {time.perf_counter() - t:.1f} s)", flush=True)
    expected = python_dict_loop(sentences)
    print(f"  distinct words {len(expected)}; top 3 {collections.Counter(expected).most_common(3)}")
    t_produce = produce(broker, sentences, "sentences", args.queues)
    text_dir = root / "text"
    write_text_files(sentences, text_dir, args.text_files)
    print(f"  produced into the broker ({args.queues} queues) in {t_produce:.2f} s (not timed below); "
          f"{args.text_files} text files for Spark native", flush=True)
    mq, rmq_broker = rmq if rmq is not None else (None, None)
    t_produce_rmq = None
    if rmq_broker is not None:
        from bench.rocketmq import jvm_cpu, records_written, stored_messages, written

        t_produce_rmq = produce(rmq_broker, sentences, "sentences", args.queues)
        print(f"  produced into RocketMQ ({args.queues} queues) in {t_produce_rmq:.2f} s (not timed below)", flush=True)

    if not args.no_warmup:
        t = time.perf_counter()
        warm = sentences[: max(1, len(sentences) // 50)]
        warm_expected = python_dict_loop(warm)
        produce(broker, warm, "warmup", args.queues)
        write_text_files(warm, root / "warm-text", args.text_files)
        run_rstream(spark, broker, root, "warmup", "warm", warm_expected, args.words)
        if rmq_broker is not None:
            produce(rmq_broker, warm, "warmup", args.queues)
            run_rstream(spark, rmq_broker, root, "warmup", "warm-rmq", warm_expected, args.words)
        run_spark_native(spark, root, root / "warm-text", "warm_native", warm_expected)
        print(f"  warm-up of (a){', (a-rmq)' if rmq_broker is not None else ''} and (c) on "
              f"{sum(warm_expected.values())} words: {time.perf_counter() - t:.1f} s", flush=True)

    runs: dict[str, list[dict[str, Any]]] = {"a": [], "a0": [], "a2": [], "b": [], "c": [], "d": [], "d2": []}
    if rmq_broker is not None:
        runs["a_rmq"], runs["a2_rmq"], runs["a_rmq0"], runs["a2_rmq0"] = [], [], [], []
    for r in range(args.repeat):
        # alternate the order so neither side always runs on a warmer (or busier) machine
        order = ("b", "a", "a_rmq", "a_rmq0", "a0", "d", "a2", "a2_rmq", "a2_rmq0", "d2", "c") if r % 2 == 0 else \
            ("b", "c", "d2", "a2_rmq0", "a2_rmq", "a2", "d", "a0", "a_rmq0", "a_rmq", "a")
        for part in (p for p in order if p in runs):
            if part == "b":
                res = run_python(sentences)
                assert res.pop("counts") == expected
            elif part in ("d", "d2"):
                res = run_bytewax(sentences, expected, final=part == "d2")
            elif part == "a":
                res = run_rstream(spark, broker, root, "sentences", f"wc-r{r}", expected, args.words)
            elif part == "a0":
                res = run_rstream(spark, broker, root, "sentences", f"wc0-r{r}", expected, args.words, combine=False)
            elif part == "a2":
                res = run_rstream(spark, broker, root, "sentences", f"wcb-r{r}", expected, args.words, emit="batch")
            elif part in ("a_rmq", "a2_rmq", "a_rmq0", "a2_rmq0"):
                before = stored_messages(rmq_broker)
                packed = not part.endswith("0")  # a_rmq0, a2_rmq0: shuffle records one per message, as before
                res = run_rstream(spark, rmq_broker, root, "sentences", f"wcr{part[1:].replace('_rmq', '')}-r{r}",
                                  expected, args.words, emit="record" if part.startswith("a_") else "batch",
                                  cpu_of=lambda: jvm_cpu(mq), props={"pack_shuffle": packed})
                res["rocketmq_rss_bytes"] = mq.rss_bytes()
                res["stored"] = written(before, stored_messages(rmq_broker))
                res["messages"] = sum(res["stored"].values())
                res["records_written"] = records_written(rmq_broker, res["stored"])
                res["messages_per_s"] = res["messages"] / res["seconds"]
            else:
                res = run_spark_native(spark, root, text_dir, f"native_r{r}", expected)
            runs[part].append(res)
        a, a2, b, c = runs["a"][-1], runs["a2"][-1], runs["b"][-1], runs["c"][-1]
        print(f"  run {r + 1}/{args.repeat}: (a) rstream {a['seconds']:.2f} s (busy {a['busy_ms'] / 1000:.2f} s)  "
              f"(a0) not combined {runs['a0'][-1]['seconds']:.2f} s  "
              f"(a2) rstream emit=batch {a2['seconds']:.2f} s  "
              f"(b) python {b['seconds']:.3f} s  (c) spark native {c['seconds']:.2f} s  "
              f"(d) bytewax {runs['d'][-1]['seconds']:.2f} s  (d2) bytewax count_final {runs['d2'][-1]['seconds']:.2f} s"
              + "".join(f"  ({k.replace('_', '-')}) on RocketMQ {runs[k][-1]['seconds']:.2f} s, "
                        f"{runs[k][-1]['messages']} messages stored (its JVMs' CPU {runs[k][-1]['other_cpu_s']:.2f} s)"
                        for k in ("a_rmq", "a_rmq0", "a2_rmq", "a2_rmq0") if k in runs)
              + f"   verified  (load {os.getloadavg()[0]:.2f})", flush=True)

    med = {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()}
    a_busy = statistics.median(x["busy_ms"] for x in runs["a"]) / 1000
    a_queue = {k: statistics.median(x["queue_ms"].get(k, 0) for x in runs["a"]) / 1000 for k in ("source", "shuffle")}
    b_dict = statistics.median(x["dict_loop"] for x in runs["b"])
    b_counter = statistics.median(x["counter"] for x in runs["b"])
    c_trigger = [x["spark_trigger_ms"] for x in runs["c"] if x["spark_trigger_ms"] is not None]
    a_trigger = [x["spark_trigger_ms"] for x in runs["a"] if x["spark_trigger_ms"] is not None]
    n = args.words
    print(f"\nresults (median of {args.repeat}; {n} words; all counts verified against (b))")
    print(f"  (a) rstream end to end         {med['a']:7.2f} s  {fmt_rate(n, med['a'])} words")
    print(f"      sum of batch busy time     {a_busy:7.2f} s  {fmt_rate(n, a_busy)} words  "
          f"({len(runs['a'][-1]['batches'])} batches)")
    if a_trigger:
        print(f"      Spark triggerExecution sum {statistics.median(a_trigger) / 1000:7.2f} s")
    print_phases(runs["a"])
    print(f"      task time, source queues   {a_queue['source']:7.2f} s  (sum over queues; 2 tasks run at once)")
    print(f"      task time, shuffle queues  {a_queue['shuffle']:7.2f} s")
    print(f"  (a0) rstream, build(combine=False) {med['a0']:6.2f} s  {fmt_rate(n, med['a0'])} words  (every word "
          f"shuffled; a0/a = {med['a0'] / med['a']:.2f})")
    a2_busy = statistics.median(x["busy_ms"] for x in runs["a2"]) / 1000
    print("  (a2) rstream, aggregate_emit=batch (combine before the shuffle, one update per key and batch)")
    print(f"      end to end                 {med['a2']:7.2f} s  {fmt_rate(n, med['a2'])} words")
    print(f"      sum of batch busy time     {a2_busy:7.2f} s  {fmt_rate(n, a2_busy)} words")
    print(f"  (b) python dict loop           {b_dict:7.3f} s  {fmt_rate(n, b_dict)} words")
    print(f"      python Counter.update      {b_counter:7.3f} s  {fmt_rate(n, b_counter)} words")
    print(f"  (c) spark native end to end    {med['c']:7.2f} s  {fmt_rate(n, med['c'])} words")
    if c_trigger:
        print(f"      Spark triggerExecution sum {statistics.median(c_trigger) / 1000:7.2f} s  "
              f"{fmt_rate(n, statistics.median(c_trigger) / 1000)} words")
    print_phases(runs["c"])
    speed_ab = med["b"] / med["a"]
    speed_ac = med["c"] / med["a"]
    def target(ratio: float, least: float) -> str:  # issue 8's targets
        return f"(target >= {least}: {'MET' if ratio >= least else 'NOT MET'})"

    speed_a2c = med["c"] / med["a2"]
    print(f"  speed a/b = {speed_ab:.3f}  (b = the faster of dict loop and Counter)")
    print(f"  speed a/c = {speed_ac:.3f}  {target(speed_ac, 0.5)}")
    print(f"  speed a2/b = {med['b'] / med['a2']:.3f}   speed a2/c = {speed_a2c:.3f}  (emit=batch)  {target(speed_a2c, 1.0)}")
    print(f"  (d) bytewax 0.21, running counts {med['d']:7.2f} s  {fmt_rate(n, med['d'])} words  ->  a/d = "
          f"{med['d'] / med['a']:.3f}  {target(med['d'] / med['a'], 1.0)}")
    print(f"  (d2) bytewax 0.21, count_final   {med['d2']:7.2f} s  {fmt_rate(n, med['d2'])} words  ->  "
          f"a2/d2 = {med['d2'] / med['a2']:.3f}  {target(med['d2'] / med['a2'], 1.0)}  (one process, one worker, run_main)")
    best = {k: min(x["seconds"] for x in v) for k, v in runs.items()}
    print(f"  best of {args.repeat}: (a) {best['a']:.2f} s  (b) {best['b']:.3f} s  (c) {best['c']:.2f} s  ->  "
          f"a/b = {best['b'] / best['a']:.3f}  a/c = {best['c'] / best['a']:.3f}")
    rocketmq: dict[str, Any] = {}
    if "a_rmq" in runs:
        rr = runs["a_rmq"]
        r_busy = statistics.median(x["busy_ms"] for x in rr) / 1000
        r_jvm = statistics.median(x["other_cpu_s"] for x in rr)
        r_queue = {k: statistics.median(x["queue_ms"].get(k, 0) for x in rr) / 1000 for k in ("source", "shuffle")}
        rocketmq = {"produce_s": t_produce_rmq, "a_rmq_busy_s": r_busy, "a_rmq_jvm_cpu_s": r_jvm,
                    "a_rmq_queue_s": r_queue, "speed_a_rmq_over_a": med["a"] / med["a_rmq"],
                    "speed_a_rmq_over_c": med["c"] / med["a_rmq"],
                    "rss_max_bytes": max(x["rocketmq_rss_bytes"] for x in rr)}
        print(f"  (a-rmq) rstream on RocketMQ (LocalRocketMQ), the same job   {med['a_rmq']:7.2f} s  "
              f"{fmt_rate(n, med['a_rmq'])} words  (best {best['a_rmq']:.2f} s)")
        print(f"      sum of batch busy time     {r_busy:7.2f} s;  task time, source queues {r_queue['source']:.2f} s, "
              f"shuffle queues {r_queue['shuffle']:.2f} s")
        print(f"      RocketMQ's JVMs' CPU during the run {r_jvm:7.2f} s (median)")
        ratio = rocketmq["speed_a_rmq_over_a"]
        print(f"  speed a-rmq/a = {ratio:.3f}  (RocketMQ over the embedded broker; target >= 0.5: "
              f"{'MET' if ratio >= 0.5 else 'NOT MET'})   speed a-rmq/c = {rocketmq['speed_a_rmq_over_c']:.3f} "
              "(over Spark native)", flush=True)
        r2 = runs["a2_rmq"]
        rocketmq.update({"a2_rmq_jvm_cpu_s": statistics.median(x["other_cpu_s"] for x in r2),
                         "speed_a2_rmq_over_a2": med["a2"] / med["a2_rmq"]})
        print(f"  (a2-rmq) the same, aggregate_emit=batch     {med['a2_rmq']:7.2f} s  {fmt_rate(n, med['a2_rmq'])} words  "
              f"(best {best['a2_rmq']:.2f} s; its JVMs' CPU {rocketmq['a2_rmq_jvm_cpu_s']:.2f} s); a2-rmq/a2 = "
              f"{rocketmq['speed_a2_rmq_over_a2']:.3f}")
        for k, what in (("a_rmq", "per-record, shuffle packed"), ("a_rmq0", "per-record, shuffle not packed"),
                        ("a2_rmq", "emit=batch, shuffle packed"), ("a2_rmq0", "emit=batch, shuffle not packed")):
            m = statistics.median(x["messages_per_s"] for x in runs[k])
            rec = statistics.median(x["records_written"] / x["seconds"] for x in runs[k])
            rocketmq[f"{k}_seconds"] = med[k]
            rocketmq[f"{k}_messages_per_s"] = m
            rocketmq[f"{k}_records_per_s"] = rec
            rocketmq[f"{k}_messages"] = runs[k][-1]["messages"]
            rocketmq[f"{k}_records_written"] = runs[k][-1]["records_written"]
            rocketmq[f"{k}_stored"] = runs[k][-1]["stored"]
            print(f"  ({k.replace('_', '-')}) {what}: {med[k]:6.2f} s (best {best[k]:.2f} s), "
                  f"{runs[k][-1]['records_written']} records written in {runs[k][-1]['messages']} messages "
                  f"RocketMQ stored ({', '.join(f'{t} {c}' for t, c in runs[k][-1]['stored'].items())}); "
                  f"{m:,.0f} messages/s, {rec:,.0f} records/s over the run (medians)", flush=True)
    print(f"  busy-time speed a/b = {med['b'] / a_busy:.3f};  busy-time speed a/c(trigger) = "
          f"{(statistics.median(c_trigger) / 1000 / a_busy) if c_trigger else float('nan'):.3f}", flush=True)
    return {"words": n, "sentences": len(sentences), "distinct": len(expected), "produce_s": t_produce,
            "median_s": med, "best_s": best, "a_busy_s": a_busy, "a_queue_s": a_queue, "b_dict_s": b_dict, "b_counter_s": b_counter,
            "c_trigger_s": statistics.median(c_trigger) / 1000 if c_trigger else None,
            "a_trigger_s": statistics.median(a_trigger) / 1000 if a_trigger else None,
            "speed_a_over_b": speed_ab, "speed_a_over_c": speed_ac, "a2_busy_s": a2_busy,
            "speed_a2_over_b": med["b"] / med["a2"], "speed_a2_over_c": med["c"] / med["a2"],
            "speed_a_over_d": med["d"] / med["a"], "speed_a2_over_d2": med["d2"] / med["a2"],
            "rocketmq": rocketmq, "runs": runs}


def bench_windows(args: argparse.Namespace, spark: Any, broker: Any, root: Path) -> dict[str, Any]:
    t = time.perf_counter()
    clicks = make_clicks(args.clicks, args.pages, args.page_zipf, args.click_rate, args.seed)
    bodies = [json.dumps(e) for e in clicks]
    n = len(clicks)
    span_s = (max(e["ts"] for e in clicks) - min(e["ts"] for e in clicks)) / 1000
    print(f"\nwindow count: {n} clicks over {args.pages} pages (Zipf s={args.page_zipf}), {args.click_rate:g} clicks "
          f"per s of event time ({span_s:.0f} s from the earliest to the latest ts), seed {args.seed}; tumbling "
          f"{WINDOW_MS // 1000} s windows, allowed lateness {LATENESS_MS} ms (generated in {time.perf_counter() - t:.1f} s)",
          flush=True)
    source = "clicks"
    t_produce = produce(broker, bodies, source, args.queues)
    # (b) and the expected result: the records per queue in offset order, as rstream reads them
    t = time.perf_counter()
    per_queue = [[m.body for m in broker.read(source, q)] for q in range(args.queues)]
    t_read = time.perf_counter() - t
    parsed = [[json.loads(b) for b in bodies_q] for bodies_q in per_queue]
    expected, expected_late = python_windows(per_queue, LATENESS_MS, WINDOW_MS)
    assert sum(expected.values()) + len(expected_late) == n
    folder = root / "clicks-json"
    sentinel_ts = max(e["ts"] for e in clicks) + 10 * WINDOW_MS
    chunks = write_click_files(bodies, folder, args.click_files, sentinel_ts)
    batches_c2 = [[json.loads(b) for b in chunk] for chunk in chunks]
    model = {"c1": spark_rule_model([[e for b in batches_c2 for e in b]], LATENESS_MS, WINDOW_MS),
             "c2": spark_rule_model(batches_c2, LATENESS_MS, WINDOW_MS)}
    print(f"  produced into the broker ({args.queues} queues, round robin) in {t_produce:.2f} s, read back per queue "
          f"in {t_read:.2f} s (neither timed below); {len(chunks) - 1} JSON files + 1 sentinel file for Spark native")
    print(f"  expected (b): {len(expected)} (page, window) counts, {sum(expected.values())} clicks on time, "
          f"{len(expected_late)} late ({len(expected_late) / n:.2%})", flush=True)

    if not args.no_warmup:
        t = time.perf_counter()
        m = max(1, n // 50)
        warm_clicks = clicks[:m]
        produce(broker, [json.dumps(e) for e in warm_clicks], "warm-clicks", args.queues)
        warm_q = [[mm.body for mm in broker.read("warm-clicks", q)] for q in range(args.queues)]
        warm_expected, warm_late = python_windows(warm_q, LATENESS_MS, WINDOW_MS)
        run_rstream_windows(spark, broker, root, "warm-clicks", "warmwin", m, warm_expected, warm_late)
        write_click_files([json.dumps(e) for e in warm_clicks], root / "warm-clicks-json", 2,
                          max(e["ts"] for e in warm_clicks) + 10 * WINDOW_MS)
        run_spark_windows(spark, root, root / "warm-clicks-json", "warm_native_win", None)
        print(f"  warm-up of (a) and (c) on {m} clicks: {time.perf_counter() - t:.1f} s", flush=True)

    runs: dict[str, list[dict[str, Any]]] = {"a": [], "a0": [], "b": [], "c1": [], "c2": []}
    spark_diff: dict[str, Any] = {}
    for r in range(args.repeat):
        order = ("b", "a", "a0", "c1", "c2") if r % 2 == 0 else ("b", "c1", "c2", "a0", "a")
        for part in order:
            if part == "b":
                res = run_python_windows(per_queue, parsed, expected)
            elif part in ("a", "a0"):
                res = run_rstream_windows(spark, broker, root, source, f"win{part[1:]}-r{r}", n, expected,
                                          expected_late, combine=part == "a")
            else:
                res = run_spark_windows(spark, root, folder, f"native_win_{part}_r{r}", None if part == "c1" else 1)
                got = res.pop("counts")
                cmp = compare_windows(got, expected)
                cmp["dropped"] = n - cmp["records"]
                cmp["matches_rule_model"] = got == model[part]
                if r == 0:
                    spark_diff[part] = cmp
                else:  # same input, same deterministic plan: the same answer every run
                    assert cmp == spark_diff[part], (part, cmp, spark_diff[part])
            runs[part].append(res)
        a, a0, b, c1, c2 = runs["a"][-1], runs["a0"][-1], runs["b"][-1], runs["c1"][-1], runs["c2"][-1]
        print(f"  run {r + 1}/{args.repeat}: (a) rstream {a['seconds']:.2f} s (busy {a['busy_ms'] / 1000:.2f} s)  "
              f"(a0) not combined {a0['seconds']:.2f} s  (b) python {b['seconds']:.3f} s  (c1) spark native, 1 batch {c1['seconds']:.2f} s  "
              f"(c2) {c2['batches']} batches {c2['seconds']:.2f} s   (a) = (b) verified", flush=True)

    med = {k: statistics.median(x["seconds"] for x in v) for k, v in runs.items()}
    best = {k: min(x["seconds"] for x in v) for k, v in runs.items()}
    a_busy = statistics.median(x["busy_ms"] for x in runs["a"]) / 1000
    a_queue = {k: statistics.median(x["queue_ms"].get(k, 0) for x in runs["a"]) / 1000 for k in ("source", "shuffle")}
    b_nojson = statistics.median(x["without_json_s"] for x in runs["b"])
    b_bytes = statistics.median(x["loads_bytes_s"] for x in runs["b"])
    b_str = statistics.median(x["loads_str_s"] for x in runs["b"])
    late_a = runs["a"][0]["late"]
    print(f"\nwindow count results (median of {args.repeat}; {n} clicks; (a) verified equal to (b): "
          f"{len(expected)} window counts and {late_a} late records)")
    print(f"  (a) rstream end to end            {med['a']:7.2f} s  {fmt_rate(n, med['a'])} clicks")
    print(f"      sum of batch busy time        {a_busy:7.2f} s  {fmt_rate(n, a_busy)} clicks  "
          f"({len(runs['a'][-1]['batches'])} batches)")
    print(f"      task time, source queues      {a_queue['source']:7.2f} s  (sum over queues; 2 tasks run at once)")
    print(f"      task time, shuffle queues     {a_queue['shuffle']:7.2f} s")
    print(f"  (a0) rstream, build(combine=False) {med['a0']:5.2f} s  {fmt_rate(n, med['a0'])} clicks  (every click "
          f"shuffled with its frame; a0/a = {med['a0'] / med['a']:.2f})")
    print(f"  (b) python, json.loads(bytes)     {b_bytes:7.3f} s  {fmt_rate(n, b_bytes)} clicks  (as JsonDeserializer)")
    print(f"      python, json.loads(str)       {b_str:7.3f} s  {fmt_rate(n, b_str)} clicks  "
          f"(b = the faster of the two: {med['b']:.3f} s)")
    print(f"      same loop on parsed dicts     {b_nojson:7.3f} s  {fmt_rate(n, b_nojson)} clicks  (no JSON)")
    for part, label in (("c1", "all files, 1 batch"), ("c2", "1 file per batch")):
        c = runs[part]
        trig = [x["spark_trigger_ms"] for x in c if x["spark_trigger_ms"] is not None]
        print(f"  ({part}) spark native, {label:18s} {med[part]:6.2f} s  {fmt_rate(n, med[part])} clicks  "
              f"({c[-1]['batches']} data batches, {c[-1]['triggers']} triggers"
              + (f"; triggerExecution sum {statistics.median(trig) / 1000:.2f} s)" if trig else ")"))
    speed_c1 = med["c1"] / med["a"]
    print(f"  speed a/b = {med['b'] / med['a']:.3f}   speed a/c1 = {speed_c1:.3f} "
          f"(target >= 1.0: {'MET' if speed_c1 >= 1.0 else 'NOT MET'})   speed a/c2 = {med['c2'] / med['a']:.3f}")
    print(f"  best of {args.repeat}: (a) {best['a']:.2f} s  (a0) {best['a0']:.2f} s  (b) {best['b']:.3f} s  (c1) {best['c1']:.2f} s  "
          f"(c2) {best['c2']:.2f} s  ->  a/b = {best['b'] / best['a']:.3f}  a/c1 = {best['c1'] / best['a']:.3f}  "
          f"a/c2 = {best['c2'] / best['a']:.3f}")
    print("\n  late / dropped records (same input; Spark's rule differs, so no equality is asserted):")
    print(f"    (a) = (b) rstream, per source queue: {late_a} declared late ({late_a / n:.2%}), "
          f"{sum(expected.values())} counted in {len(expected)} (page, window) counts")
    for part in ("c1", "c2"):
        d = spark_diff[part]
        print(f"    ({part}) Spark, global watermark:   {d['dropped']} dropped ({d['dropped'] / n:.2%}), "
              f"{d['records']} counted in {d['windows']} counts; vs (b): {d['windows_differ']} counts differ "
              f"({d['only_here']} windows only in Spark), {d['records'] - d['records_expected']:+d} clicks counted; "
              f"matches the model of Spark's rule: {d['matches_rule_model']}; Spark's own "
              f"numRowsDroppedByWatermark: {runs[part][0]['rows_dropped_by_watermark']}")
    return {"clicks": n, "pages": args.pages, "windows": len(expected), "late": late_a, "produce_s": t_produce,
            "median_s": med, "best_s": best, "a_busy_s": a_busy,
            "a_queue_s": a_queue, "b_loads_bytes_s": b_bytes, "b_loads_str_s": b_str, "b_without_json_s": b_nojson,
            "spark_vs_python": spark_diff,
            "speed_a_over_b": med["b"] / med["a"], "speed_a_over_c1": med["c1"] / med["a"],
            "speed_a_over_c2": med["c2"] / med["a"], "runs": runs}
