"""The warm start of Spark's per-query Python process (``rstream.runtime.zygote``) and of its task
workers (``rstream.runtime.daemon``).

Without Spark, this file plays the JVM's part for Spark's real source runner module: it starts the
zygote's script as Spark does (``<python> -m pyspark.sql.streaming.python_streaming_source_runner``,
connect-back address in the environment) and reads what the runner says on the socket."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rstream.runtime.zygote import CLUSTER_ENV, RUNNER, Zygote, real_python

PYTHON_EXCEPTION_THROWN = -2


@pytest.fixture()
def zygote() -> Iterator[Zygote]:
    z = Zygote(sys.executable)
    z.launch()
    try:
        assert z.ready(timeout=120), "the zygote did not get ready"
        yield z
    finally:
        z.stop()


class FakeJvm:
    """The JVM's end of a Python worker's connection (Spark's Unix-socket mode: no secret)."""

    def __init__(self, folder: Path) -> None:
        self.path = str(folder / "jvm.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(1)
        self.server.settimeout(60)

    def start(self, python: str | Path, **extra_env: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHON_WORKER_FACTORY_SECRET"}
        env["PYTHON_WORKER_FACTORY_SOCK_PATH"] = self.path
        env.update(extra_env)
        return subprocess.Popen([str(python), "-m", RUNNER], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    def accept(self) -> tuple[socket.socket, int]:
        conn, _ = self.server.accept()
        conn.settimeout(60)
        return conn, struct.unpack("!i", _recv(conn, 4))[0]


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        assert chunk, "the runner closed its connection"
        data += chunk
    return data


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _send_utf(conn: socket.socket, text: str) -> None:
    data = text.encode()
    conn.sendall(struct.pack("!i", len(data)) + data)


def _runner_error(conn: socket.socket) -> str:
    assert struct.unpack("!i", _recv(conn, 4))[0] == PYTHON_EXCEPTION_THROWN
    return _recv(conn, struct.unpack("!i", _recv(conn, 4))[0]).decode()


def test_the_runner_spark_starts_is_forked_from_the_zygote_and_speaks_sparks_protocol(
        zygote: Zygote, tmp_path: Path) -> None:
    jvm = FakeJvm(tmp_path)
    launcher = jvm.start(zygote.script)
    conn, pid = jvm.accept()
    assert zygote.proc is not None
    assert pid != launcher.pid and _parent(pid) == zygote.proc.pid  # a warm fork, not a new interpreter
    _send_utf(conn, "2.7")  # the version check is the runner's first step
    assert "PYTHON_VERSION_MISMATCH" in _runner_error(conn)
    assert launcher.wait(timeout=60) == 255  # the runner's sys.exit(-1), passed on by the launcher
    conn.close()


def test_without_a_zygote_the_script_runs_the_interpreter_itself(zygote: Zygote, tmp_path: Path) -> None:
    script = tmp_path / "python"
    script.write_bytes(zygote.script.read_bytes())
    script.chmod(0o755)
    zygote.stop()  # its socket is gone: the script's launcher must start Python as Spark would
    jvm = FakeJvm(tmp_path)
    launcher = jvm.start(script)
    conn, pid = jvm.accept()
    assert pid == launcher.pid  # the launcher became the runner (exec keeps the pid)
    _send_utf(conn, "2.7")
    assert "PYTHON_VERSION_MISMATCH" in _runner_error(conn)
    assert launcher.wait(timeout=60) == 255
    conn.close()


def test_under_a_local_clusters_executor_the_script_runs_the_interpreter_itself(zygote: Zygote,
                                                                               tmp_path: Path) -> None:
    """A LocalCluster's session gives its executors the zygote's script too (Spark gives a Python data
    source's driver side and executor side the same ``pythonExec``): where ``CLUSTER_ENV`` is set, as
    in every process of the cluster, the script must run the real interpreter, its caller's own child,
    even though the zygote serves."""
    jvm = FakeJvm(tmp_path)
    launcher = jvm.start(zygote.script, **{CLUSTER_ENV: str(tmp_path / "cluster")})
    conn, pid = jvm.accept()
    assert pid == launcher.pid  # the script exec'd the interpreter: no launcher, no fork from the zygote
    assert Path(f"/proc/{pid}/exe").resolve() == Path(sys.executable).resolve()
    _send_utf(conn, "2.7")
    assert "PYTHON_VERSION_MISMATCH" in _runner_error(conn)
    assert launcher.wait(timeout=60) == 255
    conn.close()
    assert zygote.proc is not None and _children(zygote.proc.pid) == []


def test_the_runners_output_and_exit_code_are_the_launchers(zygote: Zygote, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_WORKER_FACTORY_SECRET"}
    env["PYTHON_WORKER_FACTORY_SOCK_PATH"] = str(tmp_path / "nobody-listens.sock")
    done = subprocess.run([str(zygote.script), "-m", RUNNER], env=env, capture_output=True, timeout=60)
    assert done.returncode == 1
    assert b"CANNOT_OPEN_SOCKET" in done.stderr  # the forked runner wrote to the launcher's stderr


def test_spark_stopping_the_launcher_stops_the_runner(zygote: Zygote, tmp_path: Path) -> None:
    jvm = FakeJvm(tmp_path)
    launcher = jvm.start(zygote.script)
    conn, pid = jvm.accept()
    launcher.terminate()  # what Spark does to a query's Python process when the query stops
    assert launcher.wait(timeout=60) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()  # killed, and reaped by the zygote
    conn.close()


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent(int(entry.name)) == pid:
                    out.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass  # gone meanwhile
    return out


def test_a_launcher_stopped_at_any_moment_leaves_no_runner(zygote: Zygote, tmp_path: Path) -> None:
    """SIGTERM at any point of the launcher's start: before it asks the zygote, between the fork and
    the pid's arrival, or after. Its runner must never outlive it (the launcher's handlers are in place
    from its first line; a signal that comes before the runner's pid is passed on once it comes)."""
    jvm = FakeJvm(tmp_path)
    jvm.server.listen(64)  # runners that get that far connect and wait for the JVM, which never answers
    assert zygote.proc is not None
    for i in range(24):
        launcher = jvm.start(zygote.script)
        time.sleep(i * 0.002)
        launcher.terminate()
        assert launcher.wait(timeout=60) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while _children(zygote.proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children(zygote.proc.pid) == []  # every runner it forked is gone, and reaped


def test_the_zygote_ends_with_the_driver(tmp_path: Path) -> None:
    # started by a driver that holds more than 1024 files (a kernel after many jobs): its pipes' descriptors
    # are above what ``select.select`` takes
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        z = Zygote(sys.executable)
        z.launch()
    finally:
        for fd in held:
            os.close(fd)
    try:
        assert z.proc is not None and z.proc.stderr is not None and z.proc.stderr.fileno() > 1024
        assert z.ready(timeout=120)
        assert z.proc is not None and z.proc.stdin is not None
        z.proc.stdin.close()  # what the driver's exit does to the pipe
        assert z.proc.wait(timeout=30) == 0
        assert not z.dir.exists()  # a driver killed cannot remove it: the zygote does
    finally:
        z.stop()


def test_a_local_sessions_queries_and_workers_start_warm(spark: Any, broker: Any, make_job: Any) -> None:
    from rstream.runtime.zygote import zygote as current
    from tests.support.jobs import assert_exact_counts, job_id, wordcount

    z = current()
    assert z is not None and z.proc is not None and os.environ["PYSPARK_PYTHON"] == str(z.script)
    assert z.ready(timeout=120)  # launched when the session was made: a query made before falls back
    assert spark.conf.get("spark.python.daemon.module") == "rstream.runtime.daemon"
    broker.create_topic("sentences", queues=2)
    job = make_job(wordcount(job_id("zygote")))
    job.start()
    try:
        sentences = ["a b a", "c a"]
        broker.send_batch("sentences", sentences)
        job.run_until_idle(timeout=120)
        children = Path(f"/proc/{z.proc.pid}/task/{z.proc.pid}/children")  # the query runs: so does its runner
        assert children.read_text().split(), "the query's source runner is not the zygote's child"
        assert_exact_counts(broker, "counts", sentences)
    finally:
        job.stop()
    daemons = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p).startswith(
        (sys.executable, "python")) and "rstream.runtime.daemon" in _cmdline(p)]
    assert daemons, "Spark's Python workers were not forked from rstream's daemon"
    # the Python data source lookup's daemon too, which Spark starts with PYSPARK_DRIVER_PYTHON, not the
    # session's Python, when the source is registered: it lives as long as the JVM
    forked = [p for p in psutil.Process(z.proc.pid).children() if p.name() == "lookup_data_sou"]
    assert len(forked) == 1, "the data source lookup's daemon is not the zygote's child"
    cold = [p for p in psutil.Process().children(recursive=True) if _started_cold(p, "lookup_data_sources")]
    assert cold == [], "a data source lookup daemon started cold"
    # a cluster started after it (rstream.cluster) gives its executors the real interpreter: the
    # script is this driver's alone, and goes with it
    assert real_python(os.environ["PYSPARK_PYTHON"]) == sys.executable
    assert real_python("/opt/other/python") == "/opt/other/python" and real_python(None) == sys.executable


def _started_cold(proc: psutil.Process, module: str) -> bool:
    """Whether ``proc`` is Spark's ``python -m pyspark.daemon <...module>`` run by the interpreter itself
    (a fork from the zygote keeps the zygote's command line; its launcher runs ``launch.py``)."""
    try:
        argv = proc.cmdline()
    except psutil.Error:
        return False
    return argv[1:3] == ["-m", "pyspark.daemon"] and any(arg.endswith(module) for arg in argv[3:])


def _cmdline(proc: Path) -> str:
    try:
        return (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_daemon_spark_starts_is_forked_from_the_zygote_and_ends_when_spark_closes_its_stdin(
        zygote: Zygote) -> None:
    """The daemons Spark keeps for a session (the tasks' one, and one per planner of a Python data
    source) start warm too: forked from the zygote, so they share its imports, named after what they
    became. Spark stops a daemon by closing its stdin."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON_WORKER_FACTORY")}
    launcher = subprocess.Popen([str(zygote.script), "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert launcher.stdout is not None and launcher.stdin is not None and zygote.proc is not None
    port = struct.unpack("!i", launcher.stdout.read(4))[0]  # a daemon's first words: where it listens
    assert 0 < port < 65536
    daemons = [p for p in psutil.Process(zygote.proc.pid).children() if p.name() == "plan_data_sourc"]
    assert [d.pid != launcher.pid for d in daemons] == [True]  # a warm fork, not a new interpreter
    launcher.stdin.close()
    # the daemon's own exit, passed on: pyspark 4's daemon ends with 1 here (its finally shuts down again)
    assert launcher.wait(timeout=60) == 1
    deadline = time.monotonic() + 30
    while Path(f"/proc/{daemons[0].pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{daemons[0].pid}").exists()  # ended, and reaped by the zygote
