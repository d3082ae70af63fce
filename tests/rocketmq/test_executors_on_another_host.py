"""Beyond one machine: Spark's executors on another host, reading and writing RocketMQ over the network.

The other host is a network namespace the test makes (``tests/support/netns.py``): an address of its
own (10.210.X.2), joined to this one (10.210.X.1) by a veth pair. RocketMQ (a ``LocalRocketMQ`` of two
brokers, so the job's topics have queues on both) and the Spark master listen on 10.210.X.1 only; the one Spark worker, and so its executor and the executor's
Python workers, run inside the namespace. A driver in a subprocess (the test session may hold a
local SparkContext, and a process holds one) runs a keyed word count on ``RocketMQBroker``: exact
counts, every task inside the namespace, ranges read from both brokers' queues. The same job on an ``EmbeddedBroker`` (a SQLite file the executors could not reach on a
real other host) fails at once with an error that names ``RocketMQBroker``, never reading nothing.
Afterwards no process, namespace or veth is left.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rstream.cluster import LocalCluster
from rstream.rocketmq.local import LocalRocketMQ
from tests.support.cluster import sentences
from tests.support.netns import (
    Namespace,
    address_exists,
    namespaces,
    net_inode,
    network_namespace,
    processes_inside,
)
from tests.support.processes import TIMEOUT, kill_group, log_tail, processes_mentioning, spawn, strays
from tests.support.rocketmq import leftovers

pytestmark = pytest.mark.e2e

ROUNDS = 2  # of tests/support/cluster.py's sentences: two runs until idle, one query
#: Seconds the job on the embedded broker may take to fail (measured: 3 to 6 s on 2 busy cores, most of
#: it the query's start). Its tasks report the broker's refusal as a fatal row, which the driver raises;
#: raised in the task, Spark would try each task 4 times, each in a new Python worker (30 s here).
FAILS_WITHIN_S = 20.0


_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    import psutil
    from rstream import EmbeddedBroker, RocketMQStream, UnknownTopicError, get_spark
    from rstream.rocketmq import RocketMQBroker
    from tests.support.cluster import sentences
    from tests.support.jobs import sink_values, wordcount
    from tests.support.netns import net_inode

    master, conf, ctl, namesrv = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    rounds = int(sys.argv[5])
    began, seconds = time.monotonic(), {}

    def lap(what):
        seconds[what] = round(time.monotonic() - began - sum(seconds.values()), 1)

    spark = get_spark(master=master, tmp_dir=str(ctl / "spark-tmp"), warm_up=False, **conf)

    def where(_):
        import os, socket
        with socket.create_connection((namesrv.rsplit(":", 1)[0], int(namesrv.rsplit(":", 1)[1])), timeout=10) as s:
            address = s.getsockname()[0]  # the address this host reaches RocketMQ from
        return {"netns": os.stat("/proc/self/ns/net").st_ino, "address": address}

    probes = spark.sparkContext.parallelize(range(2), 2).map(where).collect()
    lap("spark and a first job")

    def jvm_netns(pid):  # the network namespace of the executor JVM that started Python worker pid
        try:
            for proc in psutil.Process(pid).parents():
                if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in proc.cmdline():
                    return net_inode(proc.pid)
        except psutil.Error:
            pass
        return None

    broker = RocketMQBroker(namesrv)
    broker.create_topic("sentences", queues=3)
    job = RocketMQStream(wordcount("far-wc").build(), {"data_dir": str(ctl / "data-rocketmq"),
                         "max_records_per_queue": 40, "trigger_interval_ms": 100}, broker=broker, spark=spark)
    job.start()
    lap("start")
    rows = []
    for r in range(rounds):
        broker.send_batch("sentences", sentences(r), progress=False)
        job.run_until_idle(timeout=240, progress=False)
        # where each range ran, looked up at once: Spark ends a Python worker idle for a minute
        rows += [{"batch": p.batch_id, "topic": q.topic, "queue": q.queue, "records_in": q.records_in,
                  "executor": q.executor, "pid": q.pid, "netns": net_inode(q.pid), "jvm_netns": jvm_netns(q.pid)}
                 for p in job.history() if p.batch_id not in {row["batch"] for row in rows} for q in p.queues]
        lap(f"round {r} on RocketMQ")
    job.stop()
    state = job.state()
    counts = {w: [int(v) for v in vs] for w, vs in sink_values(broker, "counts").items()}
    result = {"probes": probes, "rows": rows, "counts": counts, "state": dict(zip(state["key"], state["value"])),
              "brokers": {t: [b for b, _ in broker.queue_ids(t)] for t in {row["topic"] for row in rows}}}
    lap("stop, state and sink")

    embedded = EmbeddedBroker(ctl / "embedded")
    embedded.create_topic("sentences", queues=3)
    embedded.send_batch("sentences", sentences(0), progress=False)
    near = RocketMQStream(wordcount("near-wc").build(), {"data_dir": str(ctl / "data-embedded")}, broker=embedded,
                          spark=spark)
    try:
        near.run_until_idle(timeout=240, progress=False)
        result["embedded"] = {"error": None}
    except Exception as exc:
        result["embedded"] = {"error": f"{type(exc).__name__}: {exc}"}
    lap("the job on the embedded broker")
    result["embedded"]["seconds"] = seconds["the job on the embedded broker"]
    result["seconds"] = seconds
    try:
        result["embedded"]["sink"] = len(embedded.read("counts"))
    except UnknownTopicError:
        result["embedded"]["sink"] = 0
    print(json.dumps(result, default=str), flush=True)
    spark.stop()
""")


@pytest.fixture
def second_host() -> Iterator[Namespace]:
    """A network namespace with its own address, and its veth pair; gone afterwards (checked)."""
    with network_namespace() as ns:
        yield ns
    assert ns.name not in namespaces() and not ns.exists() and not address_exists(ns.host_ip)


def test_executors_on_another_host_count_exactly_on_rocketmq_and_refuse_an_embedded_broker(
        second_host: Namespace, tmp_path: Path) -> None:
    ns = second_host
    began = time.monotonic()
    mq = LocalRocketMQ(tmp_path / "rocketmq", host=ns.host_ip, brokers=2, broker_conf={"timerWheelEnable": "false"})
    cluster = LocalCluster(workers=1, work_dir=tmp_path / "cluster", host=ns.host_ip, worker_host=ns.ns_ip,
                           worker_prefix=ns.prefix)
    control = tmp_path / "control"
    control.mkdir()
    driver = None
    ports: list[int] = []
    try:
        with ThreadPoolExecutor(1) as pool:  # RocketMQ's broker idles ~10 s before it registers: start Spark meanwhile
            started = pool.submit(cluster.start)
            mq.start()
            started.result()
        ready = time.monotonic() - began
        ports = [int(cluster.master_url.rsplit(":", 1)[1]), int(cluster.web_ui_url.rsplit(":", 1)[1])]
        workers = [w for w in cluster.master_state()["workers"] if w["state"] == "ALIVE"]
        assert [w["host"] for w in workers] == [ns.ns_ip]
        worker_pid = next(p.pid for p in cluster.processes() if "org.apache.spark.deploy.worker.Worker" in p.cmdline())
        assert net_inode(worker_pid) == ns.inode != net_inode(os.getpid())
        driver = spawn(["-c", _DRIVER, cluster.master_url, json.dumps(cluster.spark_conf()), str(control),
                        mq.namesrv, str(ROUNDS)], control / "driver.log")
        out, _ = driver.communicate(timeout=TIMEOUT)
        assert driver.returncode == 0, log_tail(control / "driver.log")
    finally:
        stopping = time.monotonic()
        try:
            if driver is not None:
                kill_group(driver)
            cluster.stop()
        finally:
            mq.stop(grace=3.0)  # its store is thrown away: no need to wait for a clean stop
        stopped = time.monotonic() - stopping
    assert cluster.processes() == [] and leftovers(mq.home) == [] and strays(cluster.work_dir, ports) == []
    assert processes_inside(ns) == [] and processes_mentioning([ns.name, ns.host_ip, ns.ns_ip]) == []
    result = json.loads(out.strip().splitlines()[-1])
    print(f"\nRocketMQ and the cluster ready in {ready:.1f} s; the driver: {result['seconds']}; "
          f"stopping everything {stopped:.1f} s; whole test {time.monotonic() - began:.0f} s")

    # the executors ran on the other host: their Python workers in the namespace, reaching RocketMQ from its address
    assert result["probes"] == [{"netns": ns.inode, "address": ns.ns_ip}] * 2
    rows = [r for r in result["rows"] if r["records_in"]]
    assert "sentences" in {r["topic"] for r in rows} and len({r["topic"] for r in rows}) > 1  # source and shuffle
    assert all(r["executor"].startswith("executor-") for r in rows), rows
    assert {(r["netns"], r["jvm_netns"]) for r in rows} == {(ns.inode, ns.inode)}, rows
    # ...from both brokers: the source's and the shuffle's queues are on broker-a and broker-b
    for topic in {r["topic"] for r in rows}:
        assert {result["brokers"][topic][r["queue"]] for r in rows if r["topic"] == topic} == {"broker-a", "broker-b"}

    # exact: each word's running counts 1, 2, ..., n, each once, in order
    words = Counter(w for r in range(ROUNDS) for s in sentences(r) for w in s.split())
    assert result["counts"] == {w: list(range(1, n + 1)) for w, n in words.items()}
    assert result["state"] == dict(words)

    # the embedded broker refuses to be unpickled there: the job fails at once, naming RocketMQBroker
    embedded = result["embedded"]
    assert embedded["error"] is not None and embedded["error"].startswith("BrokerError: "), embedded
    assert "RocketMQBroker" in embedded["error"] and f"network namespace {ns.inode}" in embedded["error"]
    assert embedded["seconds"] < FAILS_WITHIN_S and embedded["sink"] == 0, embedded
