"""Bench parts on a real Apache RocketMQ: a ``LocalRocketMQ`` (name server + broker JVMs on 127.0.0.1)
started by the bench in its temporary folder, the JVMs' CPU (per thread, by RocketMQ's thread names),
and an in-process profile of the word count on it (no Spark: rstream's Python, RocketMQ's JVM, waits)."""

from __future__ import annotations

import collections
import cProfile
import io
import json
import os
import pickle
import pstats
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.report import print_top, top_rows


def missing() -> str | None:
    """Why LocalRocketMQ cannot start here (its jars missing), or None."""
    from rstream.rocketmq.local import ROCKETMQ_VERSION, default_lib

    lib = default_lib()
    jars = [f"rocketmq-{name}-{ROCKETMQ_VERSION}.jar" for name in ("namesrv", "broker", "proxy")]
    if all((lib / jar).is_file() for jar in jars):
        return None
    return (f"RocketMQ {ROCKETMQ_VERSION}'s jars are not in {lib} (LocalRocketMQ runs them): run `bash setup.sh` "
            "once (it fetches them with Maven), or leave the RocketMQ part out with --skip rocketmq")


def start(root: Path, broker_conf: dict[str, str] | None = None, brokers: int = 1) -> tuple[Any, dict[str, Any]]:
    """A LocalRocketMQ of ``brokers`` brokers in ``root / "rocketmq"`` (with ``broker_conf``, e.g.
    ``timerWheelEnable=false``), started; ``(mq, facts)``: start time, pids, RSS."""
    from rstream.rocketmq import LocalRocketMQ

    mq = LocalRocketMQ(root / "rocketmq", broker_conf=broker_conf, brokers=brokers)
    try:
        mq.start()
    except BaseException:
        mq.stop()
        raise
    facts = {"start_s": mq.start_seconds, "rss_after_start_bytes": mq.rss_bytes(), "pids": dict(mq.pids)}
    return mq, facts


def jvm_cpu(mq: Any) -> float:
    """CPU seconds (user + system) the LocalRocketMQ's JVMs used so far."""
    import psutil

    total = 0.0
    for pid in mq.pids.values():
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def thread_cpu(mq: Any) -> collections.Counter[tuple[str, str]]:
    """CPU seconds per (JVM, thread name with digits as #) of the LocalRocketMQ's JVMs (Linux)."""
    import psutil

    out: collections.Counter[tuple[str, str]] = collections.Counter()
    for jvm, pid in mq.pids.items():
        try:
            threads = psutil.Process(pid).threads()
        except psutil.Error:
            continue
        for t in threads:
            try:
                name = Path(f"/proc/{pid}/task/{t.id}/comm").read_text().strip()
            except OSError:
                name = "?"
            out[(jvm, re.sub(r"\d+", "#", name))] += t.user_time + t.system_time
    return out


def _thread_rows(before: collections.Counter[tuple[str, str]], after: collections.Counter[tuple[str, str]],
                 top: int = 8) -> list[dict[str, Any]]:
    used = collections.Counter({k: v - before.get(k, 0.0) for k, v in after.items()})
    return [{"jvm": jvm, "thread": name, "cpu_s": round(s, 2)} for (jvm, name), s in used.most_common(top) if s > 0.005]


#: The calls whose cumulative time a profile reports apart: the waits on RocketMQ and the codec.
_WAITS = {
    "remoting.py(send_batch)": "send requests, to the broker's reply (RocketMQ stores the batch)",
    "broker.py(_await)": "waits until a commit record is readable (RocketMQ's reput)",
    "remoting.py(pull)": "pull requests, to the reply",
    "<method 'recv' of '_socket.socket' objects>": "socket recv (waiting for any reply)",
    "<method 'sendall' of '_socket.socket' objects>": "socket sendall",
    "broker.py(_send_queue)": "encoding and sending records (broker._send_queue)",
    "remoting.py(decode_messages)": "decoding pulled messages",
}


def _waits(prof: cProfile.Profile) -> dict[str, dict[str, Any]]:
    stats = pstats.Stats(prof, stream=io.StringIO())
    out = {}
    for (file, _line, fn), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        name = fn if file == "~" else f"{os.path.basename(file)}({fn})"
        if name in _WAITS:
            out[name] = {"what": _WAITS[name], "calls": nc, "cumtime_s": round(ct, 3), "tottime_s": round(tt, 3)}
    return out


def profile_wordcount(mq: Any, broker: Any, embedded: Any, root: Path, source: str, words: int,
                      expected: dict[str, int], top: int) -> dict[str, Any]:
    """The word count's tasks in this process (``InProcessJob``, no Spark), on RocketMQ and on the
    embedded broker, over the same source topic:

    1. on RocketMQ, no profiler: wall, this process's CPU, the JVMs' CPU by thread; sink verified;
    2. on the embedded broker, no profiler: wall and CPU (the same Python work without RocketMQ);
    3. on RocketMQ under cProfile: the top functions, and the waits on RocketMQ apart.
    """
    from bench.workloads import read_sink_counts, wordcount_topology
    from rstream.runtime.inprocess import InProcessJob

    props = {"max_records_per_queue": words}

    def job(b: Any, name: str) -> Any:
        return InProcessJob(wordcount_topology(name, source, f"{name}-counts"), b, root / "profile-rmq" / name, props)

    out: dict[str, Any] = {}
    j = job(broker, "wc-rmq-plain")
    th0, jvm0, cpu0, t0 = thread_cpu(mq), jvm_cpu(mq), time.process_time(), time.perf_counter()
    j.run_until_idle()
    wall, cpu, jvm = time.perf_counter() - t0, time.process_time() - cpu0, jvm_cpu(mq) - jvm0
    threads = _thread_rows(th0, thread_cpu(mq))
    got = read_sink_counts(broker, "wc-rmq-plain-counts")
    assert got == expected, "the in-process word count on RocketMQ is wrong"
    out["rocketmq"] = {"wall_s": round(wall, 3), "python_cpu_s": round(cpu, 3), "jvm_cpu_s": round(jvm, 3),
                       "jvm_threads": threads,
                       "source_task_s": round(sum(i["millis"] for i in j.infos if i["topic"] == source) / 1000, 3),
                       "shuffle_task_s": round(sum(i["millis"] for i in j.infos if i["topic"] != source) / 1000, 3)}
    j = job(embedded, "wc-emb-plain")
    cpu0, t0 = time.process_time(), time.perf_counter()
    j.run_until_idle()
    out["embedded"] = {"wall_s": round(time.perf_counter() - t0, 3), "python_cpu_s": round(time.process_time() - cpu0, 3)}
    j = job(broker, "wc-rmq-prof")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    j.run_until_idle()
    prof.disable()
    out["cprofile"] = {"wall_profiled_s": round(time.perf_counter() - t0, 3), "top": top_rows(prof, top),
                       "waits": _waits(prof)}
    return out


def print_profile(p: dict[str, Any], words: int) -> None:
    r, e, c = p["rocketmq"], p["embedded"], p["cprofile"]
    print(f"\n[rocketmq] the word count's tasks in this process (InProcessJob, no Spark, one core), {words} words:")
    print(f"  on RocketMQ      wall {r['wall_s']:6.2f} s   this process's CPU {r['python_cpu_s']:5.2f} s   "
          f"RocketMQ's JVMs' CPU {r['jvm_cpu_s']:5.2f} s   (source tasks {r['source_task_s']:.2f} s, "
          f"shuffle tasks {r['shuffle_task_s']:.2f} s; sink verified)")
    print(f"  on the embedded  wall {e['wall_s']:6.2f} s   this process's CPU {e['python_cpu_s']:5.2f} s")
    print("  RocketMQ's JVM threads, CPU during the run: "
          + ", ".join(f"{t['thread']} {t['cpu_s']:.2f} s" for t in r["jvm_threads"]))
    print(f"\n[rocketmq] under cProfile ({c['wall_profiled_s']} s): waits and codec, cumulative")
    for w in sorted(c["waits"].values(), key=lambda w: -w["cumtime_s"]):
        print(f"  {w['cumtime_s']:8.3f} s  {w['calls']:7d} calls  {w['what']}")
    print_top(c["top"])


def request_counts(broker: Any, topology: Any, source: str, root: Path, records: int = 3) -> dict[str, Any]:
    """Synchronous remoting requests per record on RocketMQ, counted in this process (no Spark, no
    timing: load-independent): a started job's tasks in-process (``InProcessJob``) over ``records``
    single records, each sent to ``source`` and run through every stage (the source range, then the
    shuffle range); per stage and request code, the mean per record. Also one look of the idle watch
    (``data_version()`` where the broker has it, else the input topics' end offsets) and one
    ``end_offsets`` of the source topic. A first record warms the caches (routes, topic configs)."""
    from rstream.rocketmq.remoting import REQUESTS
    from rstream.runtime import inprocess
    from rstream.settings import JobProperties

    job = inprocess.InProcessJob(topology, broker, root / "request-counts", JobProperties.of({}))
    stages: dict[str, collections.Counter[int]] = {}
    run_queue = inprocess.run_queue

    def counted(cfg: Any, topic: str, queue: int, start: int, end: int, batch: int) -> Any:
        before = collections.Counter(REQUESTS)
        try:
            return run_queue(cfg, topic, queue, start, end, batch)
        finally:
            used = collections.Counter(REQUESTS)
            used.subtract(before)
            stage = "source" if topic == source else "shuffle"
            stages.setdefault(stage, collections.Counter()).update(+used)

    whole: collections.Counter[int] = collections.Counter()

    def one(key: str) -> None:
        broker.send(source, key, key=key)
        before = collections.Counter(REQUESTS)
        job.run_until_idle(fire_idle=False)
        used = collections.Counter(REQUESTS)
        used.subtract(before)
        whole.update(+used)

    inprocess.run_queue = counted  # type: ignore[assignment]
    try:
        one("warm-up")
        stages.clear()
        whole.clear()
        for i in range(records):
            one(f"r{i}")
    finally:
        inprocess.run_queue = run_queue  # type: ignore[assignment]

    def per_record(c: collections.Counter[int]) -> dict[str, float]:
        return {_code_name(code): round(n / records, 2) for code, n in sorted(c.items())}

    def look(fn: Any) -> dict[str, int]:
        before = collections.Counter(REQUESTS)
        fn()
        used = collections.Counter(REQUESTS)
        used.subtract(before)
        return {_code_name(code): n for code, n in sorted((+used).items())}

    # the watch as a started job's source has it: a broker object of its own that read the inputs' ends
    watcher = pickle.loads(pickle.dumps(broker))
    for topic in topology.input_topics:
        watcher.end_offsets(topic)
    version = getattr(watcher, "data_version", None)
    watch = look(version if version is not None else
                 lambda: [watcher.end_offsets(t) for t in topology.input_topics])
    watcher.close()
    out = {"records": records, "per_stage": {s: per_record(c) for s, c in stages.items()},
           "per_record": round(sum(sum(c.values()) for c in stages.values()) / records, 2),
           "per_record_with_planning": round(sum(whole.values()) / records, 2),
           "watch_look": watch, "watch_look_total": sum(watch.values()),
           "end_offsets_source": look(lambda: broker.end_offsets(source))}
    out["per_stage_total"] = {s: round(sum(c.values()) / records, 2) for s, c in stages.items()}
    return out


def _code_name(code: int) -> str:
    from rstream.rocketmq import remoting

    names = {v: k for k, v in vars(remoting).items() if k.isupper() and isinstance(v, int) and k not in
             ("SUCCESS", "SYSTEM_BUSY", "TOPIC_NOT_EXIST", "PULL_NOT_FOUND", "PULL_RETRY_IMMEDIATELY",
              "PULL_OFFSET_MOVED", "QUERY_NOT_FOUND")}
    return names.get(code, str(code))


# -- (k): the broker's own write rate ---------------------------------------------------------------

#: (threads, messages per send) of the Java producer's runs in (k): RocketMQ's benchmark Producer's
#: default (64 threads, one message a send), then batches as its BatchProducer sends them, larger and
#: larger, until the broker (not the client's sends) is what limits.
RATE_CONFIGS = ((64, 1), (8, 64), (4, 256), (2, 1024), (2, 4096))
_JAVA_SOURCE = Path(__file__).resolve().parent / "BrokerRate.java"


def compile_broker_rate(root: Path) -> Path:
    """``bench/BrokerRate.java`` compiled (``javac``) against LocalRocketMQ's jars (rocketmq-client among
    them) into ``root / "broker-rate"``; the classes folder. Raises ``RuntimeError`` saying what is missing."""
    from rstream.rocketmq.local import default_lib

    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("(k) needs javac (a JDK, as Java 17's openjdk-17-jdk-headless has it) to compile "
                           "bench/BrokerRate.java: install one, or leave (k) out with --skip broker-rate")
    out = root / "broker-rate"
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([javac, "-nowarn", "-d", str(out), "-cp", f"{default_lib()}/*", str(_JAVA_SOURCE)],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"javac could not compile {_JAVA_SOURCE}: {done.stderr[-2000:]}")
    return out


def stored_messages(broker: Any) -> dict[str, int]:
    """Messages RocketMQ holds now, per topic (system topics included), summed over every master: its own
    per-queue end offsets (``GET_TOPIC_STATS_INFO``), which count every message it stored, whoever sent it
    and whether rstream's readers count it or not (a lost attempt's records included)."""
    client = broker._client  # the remoting client: the broker's own numbers, not rstream's view of them
    out: collections.Counter[str] = collections.Counter()
    for addr in broker.masters().values():
        for topic in client.topic_configs(addr):
            stats = client.topic_offsets(addr, topic)
            if stats:
                out[topic] += sum(end for _first, end in stats)
    return dict(out)


def written(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Messages stored between two ``stored_messages``, per topic that grew."""
    return {t: n - before.get(t, 0) for t, n in sorted(after.items()) if n > before.get(t, 0)}


def records_written(broker: Any, stored: dict[str, int]) -> int:
    """The records in the messages of ``stored`` (``written``; topics made by the run): a message each,
    a packed topic's (a shuffle topic with ``pack_shuffle``) counted by reading them back."""
    from rstream.broker.base import BrokerError

    total = 0
    for topic, messages in stored.items():
        try:
            found = broker._get(topic)  # rstream's view of it: whether it is packed
        except BrokerError:  # a name rstream refuses (RocketMQ's system topics)
            found = None
        if found is not None and found.packed:
            total += sum(sum(1 for _ in broker.read_records(topic, q, 0, end))
                         for q, end in enumerate(broker.end_offsets(topic)))
        else:
            total += messages
    return total


def broker_rate(mq: Any, broker: Any, classes: Path, seconds: float = 8.0, body_bytes: int = 16,
                configs: tuple[tuple[int, int], ...] = RATE_CONFIGS, queues: int = 8) -> dict[str, Any]:
    """(k): messages per second this RocketMQ stores from the official Java client (``BrokerRate.java``,
    shaped like RocketMQ's own benchmark producers) in one JVM, for each (threads, messages per send) of
    ``configs``, into a topic of ``queues`` queues spread over every master; each message ``body_bytes``
    of body and a key (``KEYS``, which the broker indexes), like a record of rstream's word count.

    Two rates per run: *acknowledged*, the client's sends acknowledged in its timed window (RocketMQ
    acknowledges once a message is in its commit log), and *readable*, the same messages over the
    window plus the time the broker then took until every message it acknowledged was readable (in its
    consume queues, its reput service behind: what a reader, and rstream's commit, waits for). The
    broker's own count checks the client's (``stored_messages``, whole run). ``best``: the highest
    readable rate, the broker's limit as rstream meets it (rstream waits until what it wrote is readable)."""
    from rstream.rocketmq.local import default_lib

    java = shutil.which("java") or "java"
    runs = []
    for threads, batch in configs:
        topic = f"broker-rate-{threads}x{batch}"
        broker.create_topic(topic, queues=queues)
        before = stored_messages(broker).get(topic, 0)
        cpu0 = jvm_cpu(mq)
        done = subprocess.run([java, "-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-cp",
                               f"{default_lib()}/*:{classes}", "BrokerRate", mq.namesrv, topic, str(threads),
                               str(batch), str(body_bytes), str(seconds)],
                              capture_output=True, text=True, timeout=seconds + 120)
        ended = time.perf_counter()
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            raise RuntimeError(f"BrokerRate {threads}x{batch} failed ({done.returncode}): {done.stderr[-2000:]}")
        res = json.loads(lines[-1])
        acked = res["acknowledged_whole_run"]
        while True:  # until every acknowledged message is readable
            stored = stored_messages(broker).get(topic, 0) - before
            if stored >= acked:
                break
            if time.perf_counter() - ended > 120:
                raise RuntimeError(f"BrokerRate {threads}x{batch}: RocketMQ acknowledged {acked} messages, "
                                   f"{stored} of them readable after 2 min")
            time.sleep(0.01)
        catch_up = time.perf_counter() - ended
        res.update({"threads": threads, "batch": batch, "stored_whole_run": stored, "catch_up_s": round(catch_up, 3),
                    "messages_per_s": res["messages"] / res["seconds"],
                    "readable_per_s": res["messages"] / (res["seconds"] + catch_up),
                    "broker_jvm_cpu_s": jvm_cpu(mq) - cpu0, "load": os.getloadavg()[0]})
        runs.append(res)
        print(f"  (k) {threads:2d} threads x {batch:4d} messages a send: {res['messages_per_s']:9,.0f} messages/s "
              f"acknowledged, {res['readable_per_s']:9,.0f} readable ({res['messages']} in {res['seconds']:.1f} s, "
              f"send {res['send_ms_mean']:.1f} ms; all readable {catch_up:.2f} s after the client's end; its JVMs' "
              f"CPU {res['broker_jvm_cpu_s']:.1f} s; load {res['load']:.1f})", flush=True)
    best = max(runs, key=lambda r: r["readable_per_s"])
    return {"body_bytes": body_bytes, "seconds": seconds, "queues": queues, "runs": runs,
            "best_messages_per_s": best["readable_per_s"], "best": f"{best['threads']}x{best['batch']}",
            "best_acknowledged_per_s": max(r["messages_per_s"] for r in runs)}
