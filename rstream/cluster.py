"""A real Spark standalone cluster on loopback (one master, N workers) to show a job losing an executor.

    from rstream.cluster import LocalCluster

    cluster = LocalCluster(workers=2).start()   # Spark's own Master/Worker daemons, 127.0.0.1 only
    spark = cluster.spark()                     # a SparkSession on it (stop any local session first)
    ...
    cluster.kill_executor(cluster.executors()[0])   # SIGKILL: what losing an executor is
    cluster.stop()                              # everything it started is gone, verified

``host`` puts the master (and the driver, through ``spark_conf()``) on another address of this machine,
``worker_host`` and ``worker_prefix`` the workers, e.g. inside a network namespace, a second "host"
with an address of its own: ``LocalCluster(host="10.210.0.1", worker_host="10.210.0.2",
worker_prefix=["ip", "netns", "exec", "ns1"])`` (tests/rocketmq/test_executors_on_another_host.py).

The daemons come from the installed ``pyspark`` package (no separate Spark download). Everything
the cluster writes lives under ``work_dir`` (default ``./rstream-data/cluster``): ``logs/`` (one
log per daemon), ``workers/worker-N/<app-id>/<executor-id>/`` (each executor's working directory
with its ``stdout``/``stderr``), ``local/`` (executors' shuffle/spill files), ``pids/``.
One cluster per ``work_dir``: ``start()`` first stops whatever an earlier run (a kernel that died
or was restarted) left running there, so re-running a notebook from the top needs no clean-up.

Every process of the cluster (daemons, executors, the executors' Python workers) carries the
environment variable ``RSTREAM_CLUSTER_DIR=<work_dir>``; that is how ``stop()`` finds them all.
Inside a Python task on an executor, ``RSTREAM_CLUSTER_WORKER`` names the worker (``worker-0``...)
and ``os.getcwd()`` is that executor's own directory ``.../<app-id>/<executor-id>``.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from rstream.errors import RStreamError
from rstream.owned import ended_with_this_process
from rstream.runtime.session import WARM_WORKERS

# CLUSTER_ENV: the environment variable set (to the cluster's ``work_dir``) in every process of a
# LocalCluster, never in its driver. Where it is set, the driver's zygote script (rstream.runtime.zygote)
# runs the real interpreter: an executor's Python processes are its own children.
from rstream.runtime.zygote import CLUSTER_ENV as CLUSTER_ENV
from rstream.runtime.zygote import real_python

WORKER_ENV = "RSTREAM_CLUSTER_WORKER"
"""Environment variable naming the worker (``worker-0``, ...) in a worker and everything it launches."""
RUN_ENV = "RSTREAM_CLUSTER_RUN"
"""Environment variable telling one ``start()`` of a work_dir from the next (a random hex id)."""

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# Small JVMs: serial GC, the client compiler only, a small initial heap (measured: daemons ≈ 150 MB
# resident instead of ≈ 245 MB, executors ≈ 200 MB instead of ≈ 290 MB). The daemons (master, workers)
# allocate little: an 8 MB young generation keeps about 12 MB of a master's eden from being touched.
_DAEMON_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=32m -Xss512k -Xms16m -Xmn8m"
_EXECUTOR_JAVA_OPTS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=64m -Xms32m"
_MIN_EXECUTOR_MEMORY = 450 * 1024 * 1024  # Spark refuses executors with less (reserved 300 MB x 1.5)
_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgt]?)b?\s*$", re.IGNORECASE)
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback never goes via a proxy


class ClusterError(RStreamError):
    """The local Spark cluster could not be started, used or stopped (the message says what to do)."""


@dataclass(frozen=True)
class ExecutorProcess:
    """One live executor JVM of a LocalCluster (a ``CoarseGrainedExecutorBackend`` process).

    ``executor_id`` is Spark's id (``"0"``, ``"1"``... per application; a replacement after a loss
    gets a new one), ``worker`` the cluster's name for the worker that launched it, ``cwd`` its
    working directory (also the working directory of its Python workers).
    """

    pid: int
    executor_id: str
    app_id: str
    worker: str
    worker_url: str
    cwd: Path | None


def _parse_memory(text: str) -> int:
    match = _MEMORY.match(str(text))
    if not match:
        raise ClusterError(f"cannot read memory size {text!r}: write it as Spark does, e.g. '512m' or '1g'")
    number, unit = int(match.group(1)), match.group(2).lower() or "m"  # Spark reads a bare number as MB
    return number * 1024 ** {"k": 1, "m": 2, "g": 3, "t": 4}[unit]


def spark_home() -> Path:
    """The Spark installation inside the installed ``pyspark`` package (its ``bin/spark-class``)."""
    try:
        from pyspark.find_spark_home import _find_spark_home

        home = Path(_find_spark_home())
    except (Exception, SystemExit):  # it calls sys.exit(-1) when it finds nothing
        import pyspark

        home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise ClusterError(
            f"no Spark installation with bin/spark-class and jars/ at {home}: install pyspark with pip "
            "(the pip package contains Spark) or set SPARK_HOME to a full Spark distribution"
        )
    return home


def _java_available() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return True
    return shutil.which("java") is not None


def _free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _python_path() -> str:
    # Same rule as rstream.runtime.session: the executors' Python workers see the driver's import path.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    known = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(known + [p for p in paths if p not in known])


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join("    " + line for line in text[-lines:])


def _argument(cmdline: list[str], flag: str) -> str:
    try:
        return cmdline[cmdline.index(flag) + 1]
    except (ValueError, IndexError):
        return ""


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ipv4(name: str, address: str) -> str:
    try:
        socket.inet_aton(address)
    except OSError:
        raise ClusterError(f"{name}={address!r} is not an IPv4 address: give an address of this machine, "
                           "e.g. '127.0.0.1'") from None
    return address


class LocalCluster:
    """A Spark standalone cluster (master + ``workers`` workers) on 127.0.0.1 (or ``host``), run from the
    installed pyspark.

    ``start()`` returns once every worker is registered ALIVE with the master; ``stop()`` ends every
    process it started, executors and their Python workers included, and checks that none is left
    (it also runs at interpreter exit). Both are idempotent; ``with LocalCluster() as cluster:`` works.
    The daemons also stop when the process that started them dies without exiting (a kernel that
    JupyterLab's shut-down SIGKILLs after 5 s): ``rstream.owned``. A ``start()`` from a helper thread
    is not tied that way; the next ``start()`` in the same ``work_dir`` stops what such a run left.

    Memory sizes are Spark-style strings (``"512m"``, ``"1g"``; a bare number means MB).
    Each daemon JVM gets ``daemon_memory`` of heap (≈ 150 MB resident each); each worker
    offers ``worker_memory`` to one executor of ``cores_per_worker`` cores (Spark needs at least
    450m per executor). A 2-worker cluster with a running application takes about 1.1 GB resident
    (daemons 3 x 150 MB, executors 2 x 200 MB, their Python workers 4 x 50 MB).

    ``add_worker()`` starts one more worker while the cluster runs (scaling out): ``max_workers``
    (default ``workers``) is how many it may grow to, and a session from ``spark()`` asks for their cores.

    A Python process holds one SparkContext: to run on the cluster, stop a local session first
    (``spark.stop()``), then ``cluster.spark()``. ``stop()`` stops a session still attached to it.

    ``host`` is the address the master listens on (and the driver, see ``spark_conf()``); the workers
    and their executors listen on ``worker_host`` (default ``host``). ``worker_prefix`` is put before
    each worker's command (``["ip", "netns", "exec", "ns1"]`` runs the workers, and so the executors
    they launch, in network namespace ``ns1``, where ``worker_host`` is an address); it must run the
    rest of its command line in the same process (as ``ip netns exec`` does) with the environment it was
    given, or ``stop()`` cannot find the workers.
    """

    def __init__(
        self,
        workers: int = 2,
        cores_per_worker: int = 1,
        worker_memory: str = "512m",
        work_dir: str | os.PathLike[str] | None = None,
        daemon_memory: str = "128m",
        start_timeout: float = 180.0,
        host: str = "127.0.0.1",
        worker_host: str | None = None,
        worker_prefix: Sequence[str] = (),
        max_workers: int | None = None,
    ) -> None:
        if workers < 1 or cores_per_worker < 1:
            raise ClusterError(f"a cluster needs at least 1 worker with 1 core (got workers={workers}, "
                               f"cores_per_worker={cores_per_worker})")
        if _parse_memory(worker_memory) < _MIN_EXECUTOR_MEMORY:
            raise ClusterError(f"worker_memory={worker_memory!r} is too small: Spark needs at least 450m "
                               "per executor; use '512m' or more")
        self.host = _ipv4("host", host)
        self.worker_host = _ipv4("worker_host", worker_host) if worker_host is not None else self.host
        if isinstance(worker_prefix, str):
            raise ClusterError(f"worker_prefix={worker_prefix!r} is one string: give the command's words as a list, "
                               "e.g. ['ip', 'netns', 'exec', 'ns1']")
        self.worker_prefix = [str(word) for word in worker_prefix]
        self.workers = workers
        self.max_workers = workers if max_workers is None else max_workers
        if self.max_workers < workers:
            raise ClusterError(f"max_workers={max_workers} is below workers={workers}")
        self.cores_per_worker = cores_per_worker
        # in MB, spelled out: Spark reads a bare number as bytes in some places and as MB in others
        self.worker_memory = f"{_parse_memory(worker_memory) // 2**20}m"
        self.daemon_memory = f"{max(_parse_memory(daemon_memory) // 2**20, 32)}m"
        self.start_timeout = start_timeout
        self._work_dir = Path(work_dir if work_dir is not None else Path("rstream-data") / "cluster")
        self._work_dir = self._work_dir.expanduser().absolute().resolve()
        self._daemons: dict[str, subprocess.Popen[bytes]] = {}
        self._master_port: int | None = None
        self._ui_port: int | None = None
        self._at_exit = False
        self._run: str | None = None
        self.leftovers_stopped: list[int] = []
        """Pids of processes a previous run left in ``work_dir`` that the last ``start()`` stopped."""
        self.start_seconds: float | None = None
        self.stop_seconds: float | None = None

    # ------------------------------------------------------------------ properties

    @property
    def work_dir(self) -> Path:
        """The folder holding everything the cluster writes (logs, executor folders, pid files)."""
        return self._work_dir

    @property
    def log_dir(self) -> Path:
        """Daemon logs: ``master.log``, ``worker-0.log``...; executor logs are in ``workers/``."""
        return self._work_dir / "logs"

    @property
    def running(self) -> bool:
        """Whether this object started the cluster and has not stopped it."""
        return self._master_port is not None

    @property
    def master_url(self) -> str:
        """``spark://<host>:<port>``, the master a SparkSession connects to."""
        if self._master_port is None:
            raise ClusterError("the cluster is not running: call start() first")
        return f"spark://{self.host}:{self._master_port}"

    @property
    def web_ui_url(self) -> str:
        """The master's web UI (its JSON state is at ``<web_ui_url>/json/``)."""
        if self._ui_port is None:
            raise ClusterError("the cluster is not running: call start() first")
        return f"http://{self.host}:{self._ui_port}"

    def __repr__(self) -> str:
        where = self.master_url if self.running else "stopped"
        return f"LocalCluster(workers={self.workers}, {where}, work_dir={str(self._work_dir)!r})"

    # ------------------------------------------------------------------ start / stop

    def start(self) -> LocalCluster:
        """Start the master and the workers; return once all workers are ALIVE (``self``, for chaining).

        Stops leftovers of an earlier run in the same ``work_dir`` first. Raises ``ClusterError``
        pointing at the daemon logs if the cluster is not up within ``start_timeout`` seconds.
        """
        if self.running:
            return self
        if not _java_available():
            raise ClusterError("Java was not found: Spark's daemons need Java 17 or 21; install it or set JAVA_HOME")
        began = time.monotonic()
        home = spark_home()
        self.leftovers_stopped = [p.pid for p in self._terminate(self._find_processes(everything=True))]
        self._run = uuid.uuid4().hex
        for sub in ("workers", "local", "tmp", "pids"):
            shutil.rmtree(self._work_dir / sub, ignore_errors=True)
        for sub in ("logs", "workers", "local", "tmp", "pids", "conf"):
            (self._work_dir / sub).mkdir(parents=True, exist_ok=True)
        if not self._at_exit:
            atexit.register(self._stop_at_exit)
            self._at_exit = True
        deadline = began + self.start_timeout
        try:
            self._start_master(home, deadline)
            for i in range(self.workers):
                self._launch_worker(home, i)
            self._wait_for_workers(deadline)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began
        return self

    def add_worker(self) -> str:
        """Start one more worker, as ``start()`` starts each, and return its name (``worker-<n>``) once
        the master has it ALIVE. An application running on the cluster gets an executor there at once
        if its ``spark.cores.max`` leaves room: ``spark()`` asks for the cores of ``max_workers``
        workers. ``ClusterError`` when the cluster is not running, or already has ``max_workers``."""
        if not self.running:
            raise ClusterError("the cluster is not running: call start() first")
        if self.workers >= self.max_workers:
            raise ClusterError(f"the cluster has {self.workers} workers, its max_workers: an application asks "
                               f"for at most max_workers x cores_per_worker cores (spark.cores.max), so another "
                               "worker would get no executor; make the cluster with a larger max_workers")
        name = self._launch_worker(spark_home(), self.workers)
        self.workers += 1
        self._wait_for_workers(time.monotonic() + self.start_timeout)
        return name

    def _launch_worker(self, home: Path, i: int) -> str:
        name = f"worker-{i}"
        args = ["--host", self.worker_host, "--port", "0", "--webui-port", "0",
                "--cores", str(self.cores_per_worker), "--memory", self.worker_memory,
                "--work-dir", str(self._work_dir / "workers" / name), self.master_url]
        env = {WORKER_ENV: name, "SPARK_LOCAL_DIRS": str(self._work_dir / "local" / name),
               "SPARK_LOCAL_IP": self.worker_host}  # what its executors inherit and bind to
        self._launch(home, name, _WORKER_CLASS, args, env, prefix=self.worker_prefix)
        return name

    def stop(self, grace: float = 10.0) -> None:
        """Stop every process of the cluster (SIGTERM, SIGKILL after ``grace`` s) and check none is left.

        Stops this process's SparkSession first if it is attached to this cluster. Safe to call twice.
        An object that was never started stops whatever runs in its ``work_dir`` (a clean-up by hand);
        a started one only what its own ``start()`` launched, so a stale object from an earlier notebook
        cell cannot stop a newer cluster. Raises ``ClusterError`` if a process survives SIGKILL.
        """
        began = time.monotonic()
        self._stop_session()
        self._stop_processes(grace)
        self.stop_seconds = time.monotonic() - began

    def _stop_processes(self, grace: float) -> None:
        for _ in range(3):  # a worker may launch an executor while it is being stopped: look again
            found = self._find_processes()
            if not found:
                break
            self._terminate(found, grace)
        for proc in self._daemons.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        left = self._find_processes()
        if left:
            described = ", ".join(str(p.pid) for p in left)
            raise ClusterError(f"processes of the cluster in {self._work_dir} survived SIGKILL: {described}; "
                               "end them by hand (kill -9 <pid>) before starting again")
        self._daemons.clear()
        self._master_port = self._ui_port = None
        for pid_file in (self._work_dir / "pids").glob("*.json"):  # ours only: a newer run may share the folder
            try:
                if self._run is None or json.loads(pid_file.read_text()).get("run") == self._run:
                    pid_file.unlink()
            except (OSError, ValueError):
                continue
        if self._at_exit:
            atexit.unregister(self._stop_at_exit)
            self._at_exit = False

    def _stop_at_exit(self) -> None:
        try:
            self._stop_processes(grace=5.0)
        except Exception as exc:  # an exiting interpreter has nobody to tell but stderr
            print(f"rstream.cluster: {exc}", file=sys.stderr)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------ daemons

    def _start_master(self, home: Path, deadline: float) -> None:
        for _attempt in range(3):
            port, ui_port = _free_ports(2, self.host)
            proc = self._launch(home, "master", _MASTER_CLASS,
                                ["--host", self.host, "--port", str(port), "--webui-port", str(ui_port)], {})
            self._master_port, self._ui_port = port, ui_port
            while time.monotonic() < deadline:
                if proc.poll() is not None or self._master_failed_to_bind():
                    break
                state = self._master_json(quiet=True)
                if state is not None and state.get("url") == self.master_url and state.get("status") == "ALIVE":
                    return
                time.sleep(0.2)
            else:
                raise ClusterError(self._timeout_message("the Spark master did not answer"))
            if not self._master_failed_to_bind():
                break  # not a port race: retrying will not help
            # a port taken between _free_ports and the bind: the master may live on without serving; new ports
            self._terminate([psutil.Process(proc.pid)] if proc.poll() is None else [])
            proc.wait()
        log = self.log_dir / "master.log"
        raise ClusterError(f"the Spark master failed to start (exit code {self._daemons['master'].poll()}); "
                           f"see {log}:\n{_tail(log)}")

    def _master_failed_to_bind(self) -> bool:
        try:
            log = (self.log_dir / "master.log").read_text(errors="replace")
        except OSError:
            return False
        return "BindException" in log or "Address already in use" in log

    def _launch(self, home: Path, name: str, main_class: str, args: list[str],
                extra_env: dict[str, str], prefix: Sequence[str] = ()) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        for key in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "SPARK_LOCAL_DIRS", "SPARK_MASTER_OPTS",
                    "SPARK_WORKER_OPTS", "SPARK_DAEMON_JAVA_OPTS", "SPARK_WORKER_DIR", "SPARK_PUBLIC_DNS"):
            env.pop(key, None)
        env.update({
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(self._work_dir / "conf"),  # empty: no stray spark-defaults/spark-env
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_DAEMON_JAVA_OPTS": f"{_DAEMON_JAVA_OPTS} -Djava.io.tmpdir={self._work_dir / 'tmp'} "
                                      f"-Drstream.cluster.dir={self._work_dir} -Dspark.port.maxRetries=0 "
                                      # no REST submission server: it binds the fixed port 6066, so a second
                                      # cluster on the machine (another notebook) would hang without it
                                      "-Dspark.master.rest.enabled=false",
            "SPARK_LOCAL_IP": self.host,
            # the real interpreter, never a local session's zygote script (made for its driver alone)
            "PYSPARK_PYTHON": real_python(os.environ.get("PYSPARK_PYTHON")),
            "PYTHONPATH": _python_path(),
            CLUSTER_ENV: str(self._work_dir),
            RUN_ENV: self._run or "",
        })
        env.update(extra_env)
        with open(self.log_dir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(
                ended_with_this_process([*prefix, str(home / "bin" / "spark-class"), main_class, *args]),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self._work_dir,
                start_new_session=True,
            )
        self._daemons[name] = proc
        try:
            created = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            created = 0.0
        pid_file = {"name": name, "pid": proc.pid, "create_time": created, "run": self._run}
        (self._work_dir / "pids" / f"{name}.json").write_text(json.dumps(pid_file))
        return proc

    def _wait_for_workers(self, deadline: float) -> None:
        while True:
            for name, proc in self._daemons.items():
                if proc.poll() is not None:
                    log = self.log_dir / f"{name}.log"
                    raise ClusterError(f"the Spark {name} exited with code {proc.returncode} while starting; "
                                       f"see {log}:\n{_tail(log)}")
            if self.alive_workers() >= self.workers:
                return
            if time.monotonic() > deadline:
                raise ClusterError(self._timeout_message(
                    f"only {self.alive_workers()} of {self.workers} workers registered"))
            time.sleep(0.25)

    def _timeout_message(self, what: str) -> str:
        logs = ", ".join(sorted(p.name for p in self.log_dir.glob("*.log")))
        master = self.log_dir / "master.log"
        return (f"{what} within {self.start_timeout:.0f} s. See the daemon logs in {self.log_dir} ({logs}); "
                "a busy machine may need LocalCluster(start_timeout=...) larger. The end of master.log:\n"
                f"{_tail(master)}")

    def _master_json(self, quiet: bool = False) -> dict[str, Any] | None:
        try:
            with _NO_PROXY.open(f"{self.web_ui_url}/json/", timeout=5) as response:
                data: dict[str, Any] = json.loads(response.read())
                return data
        except (OSError, ValueError, urllib.error.URLError) as exc:
            if quiet:
                return None
            raise ClusterError(f"the Spark master at {self.web_ui_url} does not answer ({exc}); "
                               f"see {self.log_dir / 'master.log'}") from exc

    def master_state(self) -> dict[str, Any]:
        """The master's JSON state (workers, alive/used cores and memory, active and completed apps)."""
        state = self._master_json()
        assert state is not None
        return state

    def alive_workers(self) -> int:
        """How many workers the master reports ALIVE (0 if it does not answer)."""
        state = self._master_json(quiet=True) if self.running else None
        return sum(1 for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE")

    # ------------------------------------------------------------------ processes

    def _find_processes(self, everything: bool = False) -> list[psutil.Process]:
        """The live processes of this cluster's run (if it was started), else of its whole work_dir.

        Found by pid file (pid + creation time) and by the marker every process inherits.
        """
        run = None if everything else self._run
        me = os.getpid()
        marker = str(self._work_dir)
        found: dict[int, psutil.Process] = {}
        for pid_file in (self._work_dir / "pids").glob("*.json"):
            try:
                entry = json.loads(pid_file.read_text())
                proc = psutil.Process(int(entry["pid"]))
                same = abs(proc.create_time() - float(entry["create_time"])) < 1.0
                if same and (run is None or entry.get("run") == run) and _alive(proc):
                    found[proc.pid] = proc
            except (OSError, ValueError, KeyError, psutil.Error):
                continue
        for proc in psutil.process_iter():
            if proc.pid == me or proc.pid in found:
                continue
            try:
                env = proc.environ()
                if run is not None:
                    ours = env.get(RUN_ENV) == run and env.get(CLUSTER_ENV) == marker
                else:
                    ours = env.get(CLUSTER_ENV) == marker or f"-Drstream.cluster.dir={marker}" in proc.cmdline()
                if ours and _alive(proc):
                    found[proc.pid] = proc
            except psutil.Error:
                continue
        return sorted(found.values(), key=lambda p: p.pid)

    def _terminate(self, procs: list[psutil.Process], grace: float = 10.0) -> list[psutil.Process]:
        """SIGTERM ``procs`` (daemons: their whole process group), SIGKILL what is left after ``grace``."""
        daemon_pids = {p.pid for p in self._daemons.values()}
        for proc in procs:
            try:
                if proc.pid in daemon_pids or os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGTERM)  # with the launcher and whatever else is in its group
                else:
                    proc.terminate()
            except (OSError, psutil.Error):
                pass
        _gone, alive = psutil.wait_procs(procs, timeout=grace)
        for proc in alive:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=10)
        return procs

    def processes(self) -> list[psutil.Process]:
        """Every live process of the cluster: daemons, executors and the executors' Python workers."""
        return self._find_processes()

    def rss_bytes(self) -> int:
        """Resident memory of the whole cluster (daemons + executors + their Python workers), in bytes."""
        total = 0
        for proc in self._find_processes():
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def executors(self, app_id: str | None = None) -> list[ExecutorProcess]:
        """The live executor processes of this cluster (of one application if ``app_id`` is given).

        A process is listed as soon as its worker launched it, before it registers with the driver.
        """
        found = []
        for proc in self._find_processes():
            try:
                cmdline = proc.cmdline()
                if _EXECUTOR_CLASS not in cmdline:
                    continue
                env = proc.environ()
                try:
                    cwd: Path | None = Path(proc.cwd())
                except psutil.Error:
                    cwd = None
            except psutil.Error:
                continue
            executor = ExecutorProcess(
                pid=proc.pid, executor_id=_argument(cmdline, "--executor-id"), app_id=_argument(cmdline, "--app-id"),
                worker=env.get(WORKER_ENV, ""), worker_url=_argument(cmdline, "--worker-url"), cwd=cwd,
            )
            if app_id is None or executor.app_id == app_id:
                found.append(executor)
        return sorted(found, key=lambda e: (e.app_id, int(e.executor_id) if e.executor_id.isdigit() else -1))

    def wait_for_executors(self, count: int, app_id: str | None = None, timeout: float = 120.0,
                           exclude: Iterable[str] = ()) -> list[ExecutorProcess]:
        """Wait until at least ``count`` executors run (not counting ids in ``exclude``); return them all.

        With a session of this process on the cluster (``cluster.spark()``), an executor counts once
        Spark's driver has registered it too, so it gets tasks from the next job on: a worker starts an
        executor's JVM some seconds before that (longer on a busy machine), and a batch run in between
        still runs on the executors there were.
        For a replacement after ``kill_executor``: ``wait_for_executors(2, exclude=[killed.executor_id])``.
        """
        skip = set(exclude)
        deadline = time.monotonic() + timeout
        while True:
            live = [e for e in self.executors(app_id) if e.executor_id not in skip]
            registered = self._registered_with_driver()
            ready = [e for e in live if registered is None or e.executor_id in registered]
            if len(ready) >= count:
                return live
            if time.monotonic() > deadline:
                waiting = (f" ({len(live)} running, {len(ready)} of them registered with the driver)"
                           if registered is not None else "")
                raise ClusterError(f"{len(ready)} of {count} executors ready after {timeout:.0f} s{waiting}: is a "
                                   f"SparkSession attached (cluster.spark())? Executor logs are under "
                                   f"{self._work_dir / 'workers'}, daemon logs in {self.log_dir}")
            time.sleep(0.2)

    def _registered_with_driver(self) -> set[str] | None:
        """The ids of the live executors that this process's Spark driver has registered (its status
        store, what the scheduler places tasks by), or None without a session on this cluster."""
        if "pyspark" not in sys.modules or self._master_port is None:
            return None
        from pyspark import SparkContext

        context = SparkContext._active_spark_context
        if context is None or context.master != self.master_url:
            return None
        listed = context._jsc.sc().statusStore().executorList(True)
        return {str(listed.apply(i).id()) for i in range(listed.size())} - {"driver"}

    def kill_executor(self, executor: ExecutorProcess | str | int, *, app_id: str | None = None,
                      wait: bool = True, timeout: float = 30.0) -> ExecutorProcess:
        """SIGKILL one executor JVM, as a crashed machine would; return what was killed.

        ``executor`` is an ``ExecutorProcess``, an executor id (``str``, e.g. ``"1"``) or a pid
        (``int``); only executors of this cluster can be killed. The worker reports the loss and the
        master launches a replacement with a new executor id. With ``wait`` it returns once the
        process is gone. Its Python workers notice on their own and exit.
        """
        live = self.executors(app_id)
        if isinstance(executor, ExecutorProcess):
            matches = [e for e in live if e.pid == executor.pid]
        elif isinstance(executor, int):
            matches = [e for e in live if e.pid == executor]
        else:
            matches = [e for e in live if e.executor_id == str(executor)]
        if not matches:
            listed = ", ".join(f"id {e.executor_id} (pid {e.pid}, {e.app_id})" for e in live) or "none"
            raise ClusterError(f"no live executor {executor!r} in this cluster (live: {listed}); "
                               "pass one of cluster.executors()")
        if len(matches) > 1:
            raise ClusterError(f"executor id {executor!r} is running in several applications "
                               f"({', '.join(e.app_id for e in matches)}): pass app_id=...")
        target = matches[0]
        try:
            proc = psutil.Process(target.pid)
            proc.kill()
            if wait:
                deadline = time.monotonic() + timeout
                while _alive(proc) and time.monotonic() < deadline:
                    time.sleep(0.05)
        except psutil.NoSuchProcess:
            pass
        return target

    # ------------------------------------------------------------------ Spark

    def spark_conf(self) -> dict[str, str]:
        """The Spark settings ``spark()`` uses: one executor per worker, sized to fit the workers; the
        driver (on this machine) listens on ``host``, where the executors reach it."""
        return {
            "spark.driver.host": self.host,
            "spark.driver.bindAddress": self.host,
            "spark.executor.memory": self.worker_memory,
            "spark.executor.cores": str(self.cores_per_worker),
            "spark.cores.max": str(self.max_workers * self.cores_per_worker),
            "spark.executor.defaultJavaOptions": _EXECUTOR_JAVA_OPTS,
            # the driver only plans batches here (tasks run on the executors): a small JVM will do
            "spark.driver.memory": "512m",
            "spark.driver.defaultJavaOptions": _EXECUTOR_JAVA_OPTS,
            # the first job waits (up to 60 s) until every worker's executor registered, so tasks spread out
            "spark.scheduler.minRegisteredResourcesRatio": str(self.workers / self.max_workers),
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            # the executors run this environment's interpreter, which has rstream: their Python workers
            # are forked from a daemon that imported an rstream task's modules once (and froze them)
            **WARM_WORKERS,
        }

    def spark(self, **conf: Any) -> Any:
        """A SparkSession on this cluster with rstream's quiet settings (``get_spark`` + ``spark_conf()``).

        The driver's own Python processes (a streaming query's source runner, the Python data source's
        planners) are forked from its zygote as in a local session, sharing its imports
        (``get_spark(zygote=True)``); the executors' are not: each executor starts its own, the real
        interpreter (``CLUSTER_ENV`` is set in the executors, see ``rstream.runtime.zygote``).

        A process holds one SparkContext: if a session on another master (e.g. ``local[*]``) is active,
        this raises ``ClusterError``; call ``spark.stop()`` on it first. ``conf`` overrides settings.
        """
        from pyspark import SparkContext

        from rstream.runtime.session import get_spark

        master_url = self.master_url
        context = SparkContext._active_spark_context
        if context is not None and context.master != master_url:
            raise ClusterError(
                f"a SparkSession on {context.master} is already running in this process, and a process "
                "can hold only one: call spark.stop() on it first (e.g. rstream.get_spark().stop()), "
                "then cluster.spark()"
            )
        return get_spark(master=master_url, zygote=True, **{**self.spark_conf(), **conf})

    def _stop_session(self) -> None:
        if "pyspark" not in sys.modules or self._master_port is None:
            return
        try:
            from pyspark import SparkContext

            context = SparkContext._active_spark_context
            if context is not None and context.master == self.master_url:
                from pyspark.sql import SparkSession

                session = SparkSession.getActiveSession()
                (session or context).stop()
        except Exception:  # a session that cannot stop cleanly is about to lose its cluster anyway
            pass
