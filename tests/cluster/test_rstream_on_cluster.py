"""rstream on a real Spark standalone cluster: a keyed count survives an executor SIGKILLed mid-stream,
exactly, its queues' state replayed from the state topic on the executors that took them over; and
nothing of the cluster is left afterwards.

As in ``test_local_cluster.py``, the driver runs in a subprocess (this process already holds a local
SparkContext); the test owns the cluster and kills the executor while the job runs.
"""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path

from rstream.cluster import LocalCluster
from tests.support.cluster import ROUNDS, sentences
from tests.support.processes import TIMEOUT, kill_group, log_tail, spawn, strays, wait_until

_DRIVER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from rstream import EmbeddedBroker, RocketMQStream, StreamBuilder, TextDeserializer, TextSerializer, get_spark
    from tests.support.cluster import KILL_AFTER, ROUNDS, sentences

    master, conf, ctl = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
    # zygote=True as cluster.spark() says: the driver's Python processes are forked from its zygote
    spark = get_spark(master=master, tmp_dir=str(ctl / "spark-tmp"), zygote=True, **conf)
    broker = EmbeddedBroker(ctl / "broker")
    broker.create_topic("sentences", queues=4)
    b = StreamBuilder("cluster-count", shuffle_queues=4)
    (b.source("sentences", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()
     .to_rstream().sink("counts", TextSerializer(with_key=True)))
    job = RocketMQStream(b.build(), {"data_dir": str(ctl / "data"), "trigger_interval_ms": 100}, broker=broker,
                         spark=spark)
    job.start()
    forked = []
    for r in range(ROUNDS):
        if r == 1:  # what the zygote forked for the driver: the query's source runner, its planners' daemons
            import psutil
            from rstream.runtime.zygote import zygote
            forked = sorted(p.name() for p in psutil.Process(zygote().proc.pid).children())
        if r == KILL_AFTER:
            (ctl / "kill-now").write_text(str(job.history()[-1].batch_id))
            while not (ctl / "killed").exists():
                time.sleep(0.05)
        broker.send_batch("sentences", sentences(r), progress=False)
        job.run_until_idle(timeout=240, progress=False)
    job.stop()
    rows = [{"batch": p.batch_id, "topic": q.topic, "queue": q.queue, "executor": q.executor,
             "replayed_keys": q.replayed_keys} for p in job.history() for q in p.queues]
    sink = [m.body.decode() for m in sorted(broker.read("counts"), key=lambda m: (m.queue_id, m.offset))]
    print(json.dumps({"rows": rows, "sink": sink, "state": dict(zip(job.state()["key"], job.state()["value"])),
                      "folders": job.local_state_folders().to_dict("records"), "forked": forked},
                     default=str), flush=True)
    spark.stop()
""")


def test_a_keyed_count_survives_a_lost_executor_exactly(tmp_path: Path) -> None:
    cluster = LocalCluster(workers=2, work_dir=tmp_path / "cluster")
    control = tmp_path / "control"
    control.mkdir()
    driver = None
    try:
        cluster.start()
        ports = [int(cluster.master_url.rsplit(":", 1)[1]), int(cluster.web_ui_url.rsplit(":", 1)[1])]
        driver = spawn(["-c", _DRIVER, cluster.master_url, json.dumps(cluster.spark_conf()), str(control)],
                        control / "driver.log")
        wait_until(lambda: (control / "kill-now").exists(), "three rounds counted", driver, control / "driver.log")
        running = cluster.executors()
        assert len(running) == 2, running
        killed = cluster.kill_executor(running[0])  # SIGKILL, while the query runs
        (control / "killed").write_text(killed.executor_id)
        out, _ = driver.communicate(timeout=TIMEOUT * 2)
        assert driver.returncode == 0, log_tail(control / "driver.log")
    finally:
        if driver is not None:
            kill_group(driver)
        cluster.stop()
    assert strays(cluster.work_dir, ports) == [] and cluster.processes() == []  # every daemon and executor gone

    result = json.loads(out.strip().splitlines()[-1])
    # the driver's Python processes were forked from its zygote (the executors' are their own: the
    # executor killed took its Python workers with it, and nothing of the cluster is left, checked above)
    assert {"source_runner", "lookup_data_sou", "create_data_sou", "plan_data_sourc"} <= set(result["forked"])
    # exact: each word's running counts 1, 2, ..., n, each once, in order, whatever ran where
    words = Counter(w for r in range(ROUNDS) for s in sentences(r) for w in s.split())
    got: dict[str, list[int]] = {}
    for body in result["sink"]:
        word, _, n = body.rpartition(":")
        got.setdefault(word, []).append(int(n))
    assert got == {w: list(range(1, n + 1)) for w, n in words.items()}
    assert result["state"] == dict(words)

    dead = f"executor-{killed.executor_id}"
    kill_batch = int((control / "kill-now").read_text())
    rows = result["rows"]
    assert {r["executor"] for r in rows} >= {dead}  # the killed executor had done part of the work
    after = [r for r in rows if r["batch"] > kill_batch]
    assert after and dead not in {r["executor"] for r in after}
    # RIP-58's rebalance: queues it held moved, and their state was replayed from the state topic there
    assert sum(r["replayed_keys"] for r in after if r["topic"] != "sentences") > 0
    fresh = [f for f in result["folders"] if f["fresh"]]
    assert {f["queue"] for f in fresh} == set(range(4)) and dead not in {f["executor"] for f in fresh}
