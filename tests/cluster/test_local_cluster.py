"""A real Spark standalone cluster on loopback: start, run a job, lose an executor, stop, leave nothing.

The test session already holds a local[2] SparkContext (tests/conftest.py) and a process can hold
only one, so every Spark driver here runs in a subprocess against ``cluster.master_url``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rstream.cluster import ClusterError, ExecutorProcess, LocalCluster
from tests.support.processes import (
    TIMEOUT,
    gone_within,
    kill_group,
    log_tail,
    running,
    spawn,
    strays,
    wait_until,
)

ROOT = Path(__file__).parents[2]

# A driver in its own process. Its tasks block until the test creates ``release`` in the control
# folder, so the test sees (and may kill) executors while a job is running, without guessing times.
_DRIVER = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from rstream.runtime.session import get_spark

    master, conf, ctl = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
    # zygote=True as cluster.spark() says: the driver's Python processes are forked from its zygote
    spark = get_spark(master=master, tmp_dir=str(ctl / "spark-tmp"), zygote=True, **conf)
    control = str(ctl)

    def probe(index, rows):
        import os, time
        from pathlib import Path
        import rstream
        here = Path(control)
        (here / f"started-{index}-{os.getpid()}").write_text(os.getcwd())
        while not (here / "release").exists():
            time.sleep(0.05)
        env = {k: v for k, v in os.environ.items()
               if k.startswith(("SPARK_", "PYSPARK_", "RSTREAM_")) or k == "PYTHONPATH"}
        ancestors, pid = [], os.getpid()
        for _ in range(3):  # the worker's daemon, and the daemon's parent
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            ancestors.append(pid)
        yield {"index": index, "rows": sum(1 for _ in rows), "cwd": os.getcwd(), "pid": os.getpid(),
               "rstream": rstream.__file__, "env": env, "exe": os.readlink("/proc/self/exe"), "ancestors": ancestors}

    probes = spark.sparkContext.parallelize(range(int(sys.argv[4])), 2).mapPartitionsWithIndex(probe).collect()
    count = spark.range(100, numPartitions=2).count()
    from rstream.runtime.zygote import zygote
    print(json.dumps({"count": count, "probes": probes, "python": spark.sparkContext.pythonExec,
                      "zygote": [str(zygote().script), zygote().proc.pid]}), flush=True)
    spark.stop()
""")


def _memory(cluster: LocalCluster) -> str:
    rss = pss = 0
    parts = []
    for proc in cluster.processes():
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        rss, pss = rss + info.rss, pss + info.pss
        parts.append(f"{proc.name()} {info.rss // 2**20}")
    return f"RSS {rss / 2**20:.0f} MB, PSS {pss / 2**20:.0f} MB over {len(parts)} processes ({', '.join(parts)})"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    made = LocalCluster(workers=2, work_dir=tmp_path / "cluster")
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def control(tmp_path: Path) -> Path:
    folder = tmp_path / "control"
    folder.mkdir()
    return folder


def _driver(cluster: LocalCluster, control: Path, rows: int) -> subprocess.Popen[str]:
    return spawn(["-c", _DRIVER, cluster.master_url, json.dumps(cluster.spark_conf()), str(control), str(rows)],
                  control / "driver.log")


def test_two_workers_run_a_job_and_stop_leaves_nothing(cluster: LocalCluster, control: Path) -> None:
    began = time.monotonic()
    cluster.start()
    print(f"\nstart: {cluster.start_seconds:.1f} s; daemons only: {_memory(cluster)}")
    assert cluster.master_url.startswith("spark://127.0.0.1:")
    state = cluster.master_state()
    workers = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2 and all(w["host"] == "127.0.0.1" and w["cores"] == 1 for w in workers)
    assert cluster.start() is cluster  # idempotent
    assert (cluster.log_dir / "master.log").is_file() and (cluster.log_dir / "worker-1.log").is_file()

    driver = _driver(cluster, control, rows=10)
    try:
        wait_until(lambda: len(list(control.glob("started-*"))) == 2, "both tasks run", driver, control / "driver.log")
        running = cluster.executors()
        print(f"job running: {_memory(cluster)}")
        assert len(running) == 2
        assert {e.worker for e in running} == {"worker-0", "worker-1"}
        assert len({e.app_id for e in running}) == 1 and len({e.executor_id for e in running}) == 2
        for e in running:
            assert e.cwd == cluster.work_dir / "workers" / e.worker / e.app_id / e.executor_id
        (control / "release").touch()
        out, _ = driver.communicate(timeout=TIMEOUT)
        assert driver.returncode == 0, log_tail(control / "driver.log")
    finally:
        kill_group(driver)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["count"] == 100
    probes = result["probes"]
    assert sum(p["rows"] for p in probes) == 10
    print("a Python task on an executor sees:")
    for p in probes:
        print(f"  cwd={p['cwd']}\n  env={json.dumps(p['env'], indent=4, sort_keys=True)}")
    executor_dirs = {str(e.cwd) for e in running}
    assert {p["cwd"] for p in probes} == executor_dirs  # one task per executor, in its own folder
    for p in probes:
        assert p["env"]["RSTREAM_CLUSTER_DIR"] == str(cluster.work_dir)
        assert p["env"]["RSTREAM_CLUSTER_WORKER"] in {"worker-0", "worker-1"}
        assert p["env"]["PYSPARK_PYTHON"] == sys.executable
        assert p["rstream"] == str(ROOT / "rstream" / "__init__.py")
    # the driver's Python is its zygote's script, and so is the executors' pythonExec; in an executor the
    # script runs the real interpreter: its Python workers are the executor's own, never the zygote's
    script, zygote_pid = result["zygote"]
    assert result["python"] == script
    for p in probes:
        assert Path(p["exe"]).resolve() == Path(sys.executable).resolve()
        assert zygote_pid not in p["ancestors"]
        assert {e.pid for e in running} & set(p["ancestors"][:2]), f"{p['ancestors']} holds no executor"

    ports = [int(cluster.master_url.rsplit(":", 1)[1]), int(cluster.web_ui_url.rsplit(":", 1)[1])]
    ports += [w["port"] for w in workers]
    stop_began = time.monotonic()
    cluster.stop()
    print(f"stop: {time.monotonic() - stop_began:.1f} s; whole test {time.monotonic() - began:.0f} s")
    assert not cluster.running and cluster.processes() == [] and cluster.executors() == []
    assert strays(cluster.work_dir, ports) == []
    cluster.stop()  # idempotent
    with pytest.raises(ClusterError, match="start"):
        _ = cluster.master_url


def test_lost_executor_is_replaced_and_the_job_still_finishes(cluster: LocalCluster, control: Path) -> None:
    cluster.start()
    driver = _driver(cluster, control, rows=4)
    try:
        wait_until(lambda: len(list(control.glob("started-*"))) == 2, "both tasks run", driver, control / "driver.log")
        before = cluster.executors()
        assert len(before) == 2
        with pytest.raises(ClusterError, match="no live executor"):
            cluster.kill_executor(os.getpid())  # never kills a process outside the cluster
        t0 = time.monotonic()
        killed = cluster.kill_executor(before[0].executor_id)
        t1 = time.monotonic()
        assert isinstance(killed, ExecutorProcess) and killed.pid == before[0].pid
        assert not running(killed.pid)
        replacement = cluster.wait_for_executors(2, exclude=[killed.executor_id], timeout=TIMEOUT)
        t2 = time.monotonic()
        assert killed.executor_id not in {e.executor_id for e in replacement}
        assert killed.pid not in {e.pid for e in replacement}
        (control / "release").touch()
        out, _ = driver.communicate(timeout=TIMEOUT)
        assert driver.returncode == 0, log_tail(control / "driver.log")
        print(f"\nkill {t1 - t0:.2f} s, replacement process after {t2 - t1:.1f} s, job done {time.monotonic() - t2:.1f} s later")
    finally:
        kill_group(driver)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["count"] == 100
    assert sum(p["rows"] for p in result["probes"]) == 4  # the lost task ran again elsewhere
    assert killed.cwd is not None and str(killed.cwd) not in {p["cwd"] for p in result["probes"]}
    cluster.stop()
    assert cluster.processes() == []


_ABANDON = textwrap.dedent("""
    import json, os, sys, threading
    from rstream.cluster import LocalCluster
    cluster = LocalCluster(workers=1, work_dir=sys.argv[1])
    if sys.argv[2] == "thread-crash":  # started from a helper thread: its daemons outlive the kernel (rstream.owned)
        helper = threading.Thread(target=cluster.start)
        helper.start()
        helper.join()
    else:
        cluster.start()
    print(json.dumps([p.pid for p in cluster.processes()]), flush=True)
    if sys.argv[2].endswith("crash"):
        os._exit(0)   # a kernel that dies: no atexit, no stop()
    sys.exit(0)       # a kernel that exits normally: atexit stops the cluster
""")


def _abandon(work_dir: Path, how: str) -> list[int]:
    log = work_dir.parent / f"abandon-{how}.log"
    proc = spawn(["-c", _ABANDON, str(work_dir), how], log)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    finally:
        kill_group(proc)
    assert proc.returncode == 0, log_tail(log)
    return [int(pid) for pid in json.loads(out.strip().splitlines()[-1])]


def test_a_killed_kernel_s_cluster_stops_by_itself(tmp_path: Path) -> None:
    """A kernel killed (JupyterLab's shut-down after 5 s, or a crash) takes its daemons with it: each got
    SIGTERM from the kernel (rstream.owned), and the worker stopped its executors on its way out."""
    work_dir = tmp_path / "cluster"
    old = _abandon(work_dir, "crash")
    try:
        assert len(old) == 2  # master + worker
        assert gone_within(old, 60)
        assert strays(work_dir, []) == []
    finally:
        LocalCluster(work_dir=work_dir).stop()  # clean up even if the assertion failed


def test_start_stops_what_a_dead_kernel_left_behind(tmp_path: Path) -> None:
    work_dir = tmp_path / "cluster"
    old = _abandon(work_dir, "thread-crash")
    assert len(old) == 2 and all(psutil.pid_exists(pid) for pid in old)  # master + worker still up
    rerun = LocalCluster(workers=1, work_dir=work_dir)
    try:
        rerun.start()
        assert set(old) <= set(rerun.leftovers_stopped)
        assert not any(running(pid) for pid in old)
        assert rerun.alive_workers() == 1
    finally:
        rerun.stop()
    assert rerun.processes() == [] and strays(work_dir, []) == []


def test_a_kernel_that_exits_without_stop_leaves_nothing(tmp_path: Path) -> None:
    work_dir = tmp_path / "cluster"
    old = _abandon(work_dir, "exit")
    assert len(old) == 2
    try:
        assert not any(running(pid) for pid in old)
        assert strays(work_dir, []) == []
    finally:
        LocalCluster(work_dir=work_dir).stop()  # clean up even if the assertion failed


def test_rerunning_the_cell_replaces_the_cluster_and_the_stale_object_cannot_stop_it(tmp_path: Path) -> None:
    work_dir = tmp_path / "cluster"
    first, second = LocalCluster(workers=1, work_dir=work_dir), LocalCluster(workers=1, work_dir=work_dir)
    try:
        first.start()
        old = [p.pid for p in first.processes()]
        second.start()  # the notebook cell ran again: a new object, same work_dir
        assert set(old) <= set(second.leftovers_stopped)
        first.stop()  # the stale object finds nothing of its own to stop
        assert second.alive_workers() == 1 and len(second.processes()) == 2
        assert len(list((work_dir / "pids").glob("*.json"))) == 2  # nor deletes the new run's pid files
    finally:
        first.stop()
        second.stop()
    assert second.processes() == [] and strays(work_dir, []) == []


def _listen(port: int) -> socket.socket | None:
    """A socket listening on loopback ``port``, or None where something else already listens there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.listen()
    return sock


def test_two_clusters_run_side_by_side_with_spark_s_fixed_ports_taken(tmp_path: Path) -> None:
    # Two notebooks on one machine (a workshop's shared server) each start a cluster. Spark's master
    # binds 6066 for REST submissions unless told not to; the second master then never became ALIVE.
    held = [sock for sock in (_listen(6066), _listen(7077), _listen(8080)) if sock is not None]
    clusters = [LocalCluster(workers=1, work_dir=tmp_path / name, start_timeout=90) for name in ("a", "b")]
    try:
        for cluster in clusters:
            cluster.start()
        assert [c.alive_workers() for c in clusters] == [1, 1]
        assert clusters[0].master_url != clusters[1].master_url
        assert "6066" not in (clusters[1].log_dir / "master.log").read_text()
    finally:
        for cluster in clusters:
            cluster.stop()
        for sock in held:
            sock.close()
    assert all(c.processes() == [] for c in clusters)


def test_a_port_taken_before_the_master_binds_it_gets_new_ports(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import rstream.cluster as cluster_module

    real = cluster_module._free_ports
    taken = _listen(0)
    assert taken is not None
    picks: list[list[int]] = []

    def racy(count: int, host: str = "127.0.0.1") -> list[int]:  # the first pick loses its port, as in a race
        ports = real(count, host)
        if not picks:
            ports[0] = taken.getsockname()[1]
        picks.append(ports)
        return ports

    monkeypatch.setattr(cluster_module, "_free_ports", racy)
    cluster = LocalCluster(workers=1, work_dir=tmp_path / "cluster", start_timeout=90)
    try:
        cluster.start()
        assert len(picks) == 2 and cluster.master_url == f"spark://127.0.0.1:{picks[1][0]}"
        assert cluster.alive_workers() == 1
    finally:
        cluster.stop()
        taken.close()
    assert cluster.processes() == [] and strays(tmp_path / "cluster", []) == []


def test_a_start_that_times_out_points_at_the_logs_and_leaves_nothing(tmp_path: Path) -> None:
    work_dir = tmp_path / "cluster"
    slow = LocalCluster(workers=1, work_dir=work_dir, start_timeout=0.5)
    with pytest.raises(ClusterError, match="logs") as raised:
        slow.start()
    assert str(slow.log_dir) in str(raised.value) and "start_timeout" in str(raised.value)
    assert not slow.running and slow.processes() == [] and strays(work_dir, []) == []


def test_bad_settings_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="450m"):
        LocalCluster(worker_memory="256m", work_dir=tmp_path)
    with pytest.raises(ClusterError, match="512m"):
        LocalCluster(worker_memory="lots", work_dir=tmp_path)
    with pytest.raises(ClusterError, match="worker"):
        LocalCluster(workers=0, work_dir=tmp_path)
    assert LocalCluster(worker_memory="1g", daemon_memory="96", work_dir=tmp_path).worker_memory == "1024m"
    with pytest.raises(ClusterError, match="IPv4"):
        LocalCluster(host="localhost", work_dir=tmp_path)
    with pytest.raises(ClusterError, match="as a list"):
        LocalCluster(worker_prefix="ip netns exec ns1", work_dir=tmp_path)
    apart = LocalCluster(host="10.210.0.1", worker_host="10.210.0.2", worker_prefix=("ip", "netns", "exec", "ns1"),
                         work_dir=tmp_path)
    assert (apart.worker_host, apart.worker_prefix) == ("10.210.0.2", ["ip", "netns", "exec", "ns1"])
    assert apart.spark_conf()["spark.driver.bindAddress"] == "10.210.0.1"  # where executors elsewhere reach it
    assert LocalCluster(work_dir=tmp_path).worker_host == "127.0.0.1"
    idle = LocalCluster(work_dir=tmp_path)
    with pytest.raises(ClusterError, match="start"):
        idle.spark()
    with pytest.raises(ClusterError, match="start"):
        idle.add_worker()
    idle.stop()  # never started: nothing to do, no error
    with pytest.raises(ClusterError, match="max_workers=1 is below workers=2"):
        LocalCluster(workers=2, max_workers=1, work_dir=tmp_path)
    growing = LocalCluster(workers=1, max_workers=3, cores_per_worker=2, work_dir=tmp_path).spark_conf()
    # the session asks for the cores of every worker the cluster may grow to, and waits for those it has
    assert (growing["spark.cores.max"], growing["spark.scheduler.minRegisteredResourcesRatio"]) == ("6", str(1 / 3))
