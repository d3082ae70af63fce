"""A warm start for the Python process Spark starts for every streaming query.

Spark runs a Python streaming source's ``initialOffset``/``latestOffset``/``partitions`` in a
process of its own per query (``python -m pyspark.sql.streaming.python_streaming_source_runner``,
started afresh, never from Spark's forking daemon). Most of ``start()`` -> first result, and of the
fixed cost of every ``run_until_idle()``, was that process importing pyspark, pyarrow and numpy:
0.7 to 1.7 s on a 2-core machine whose JVM is busy starting the query at the same moment.

Sessions made by ``get_spark()`` with a local master therefore get a *zygote*: one process per
driver that has imported all of it once and forks a copy of itself, already warm, for each query.
The same zygote forks the daemons Spark keeps for the whole session (``SERVED``: the tasks' daemon and
the Python data source planners' daemons), so they share its imports instead of each loading its own.
One of them, the data source lookup's, Spark starts with ``PYSPARK_DRIVER_PYTHON``, not the session's
Python, the first time a data source is registered: ``rstream.runtime.session`` gives the JVM the
script under that name too, and registers rstream's source once the zygote serves (``await_zygote``).
Spark still starts what it believes is Python (``PYSPARK_PYTHON`` is a small script that runs the
real interpreter for everything else): for the modules in ``SERVED`` that script runs ``launch.py``, which
hands its standard streams, environment and working directory to the zygote over a Unix socket,
forwards signals to the forked runner and exits with its exit code. Everything the runner reads
from its environment (how to connect back to the JVM) is read after the fork, from the launcher's.

Whenever the zygote cannot serve (not started, gone, refusing), ``launch.py`` runs the real
interpreter in its place: the query starts as it would without it, only slower. The zygote exits
when the driver process does (its stdin is a pipe from the driver).

A cluster's executors never use it. Only a local master's sessions get the script, and the
sessions of a ``rstream.cluster.LocalCluster`` (``get_spark(zygote=True)``, which its ``spark()``
says): there Spark gives the driver's Python processes (the source runner, the data source planners)
and the executors' (the tasks' daemon and workers) the same ``pythonExec``, the script's path, and
the script runs the real interpreter itself wherever ``CLUSTER_ENV`` is set. A LocalCluster sets it
in its daemons' environment, which its executors and their Python processes inherit (the driver,
which runs in the notebook's kernel, has none), so an executor's Python processes stay its own
children, as on a cluster of many machines. A cluster on other machines must not get the script:
its executors have no such file.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

#: The module Spark runs per streaming query.
RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"

#: The modules whose processes the zygote starts: the runner, and the daemons Spark keeps for the
#: whole session (the tasks' one, ``rstream.runtime.daemon``, and one per planner of a Python data
#: source: its lookup, creation and read planning). Forked from the zygote, a daemon shares its
#: imports (pyspark, pyarrow, numpy, rstream) with every other process forked from it.
SERVED = (RUNNER, "pyspark.daemon", "rstream.runtime.daemon")

#: Modules the zygote imports before it forks: the runner's, what rstream's reader loads in it, and
#: what the daemons import before they fork their workers.
PRELOAD = (RUNNER, "rstream.runtime.source", "rstream.broker.embedded", "rstream.runtime.config", "pyspark.daemon",
           "rstream.runtime.daemon")

_LAUNCH = Path(__file__).with_name("launch.py")

#: Set in every process of a ``rstream.cluster.LocalCluster`` (its daemons, executors and their Python
#: workers), never in its driver: where it is set, the script runs the real interpreter itself.
CLUSTER_ENV = "RSTREAM_CLUSTER_DIR"

_SCRIPT = """#!/bin/sh
# Made by rstream (rstream/runtime/zygote.py): Spark's Python for this session.
# A LocalCluster's executor ({cluster_env} set) starts its Python processes itself, as its children.
if [ "$1" = "-m" ] && [ -z "${cluster_env}" ]; then
  case "$2" in
    {served}) exec {real} -I -S {launch} {sock} {real} "$@" ;;
  esac
fi
exec {real} "$@"
"""


class Zygote:
    """The driver's handle on its zygote process: the script Spark should run as Python, and the
    process, once ``launch()`` started it (until then the script runs the plain interpreter)."""

    def __init__(self, real_python: str) -> None:
        self.real_python = real_python
        self.dir = Path(tempfile.mkdtemp(prefix="rstream-zygote-"))
        self.socket = self.dir / "zygote.sock"
        self.script = self.socket.with_name("python")  # what _remove_folder removes with the socket
        self.script.write_text(_SCRIPT.format(served="|".join(SERVED), cluster_env=CLUSTER_ENV,
                                              real=_quote(real_python), launch=_quote(str(_LAUNCH)),
                                              sock=_quote(str(self.socket))))
        self.script.chmod(self.script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready = False
        self._reading = threading.Lock()  # one reader of its stderr: a second would wait out its timeout

    def launch(self) -> None:
        """Start the zygote process (its imports take a core for about a second)."""
        if self.proc is not None:
            return
        from rstream.runtime.daemon import NO_THREADS

        # no threads before the fork (the runners get Spark's environment, not this one)
        env = {**os.environ, **NO_THREADS}
        self.proc = subprocess.Popen([self.real_python, "-m", __name__, str(self.socket)], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                     start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def ready(self, timeout: float = 60.0) -> bool:
        """Whether the zygote serves (it says so on its stderr once its imports are done)."""
        assert self.proc is not None and self.proc.stderr is not None
        if not self._reading.acquire(timeout=timeout):
            return False
        try:
            if not self._ready:
                # poll, not select: a driver with more than 1024 open files (a long notebook) is fine
                poller = select.poll()
                poller.register(self.proc.stderr, select.POLLIN)
                ready = poller.poll(timeout * 1000)
                self._ready = ready != [] and self.proc.stderr.readline().strip() == b"ready"
        finally:
            self._reading.release()
        return self._ready and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _remove_folder(self.socket)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


_ZYGOTE: Zygote | None = None
_LOCK = threading.Lock()


def spark_python(real_python: str) -> str:
    """What ``PYSPARK_PYTHON`` should be for a local session (or a LocalCluster's): the zygote's script
    (``launch_zygote()`` starts the process it asks, once the JVM is up), or ``real_python`` where no
    zygote can run."""
    global _ZYGOTE
    with _LOCK:
        if _ZYGOTE is not None and _ZYGOTE.alive and _ZYGOTE.real_python == real_python:
            return str(_ZYGOTE.script)
        if _ZYGOTE is not None:  # gone, or for another interpreter
            _ZYGOTE.stop()
            _ZYGOTE = None
        if not hasattr(socket, "AF_UNIX") or not hasattr(os, "fork"):
            return real_python
        made = None
        try:
            made = Zygote(real_python)
            # a temporary folder on a noexec mount would leave Spark with no Python at all
            subprocess.run([str(made.script), "-c", "pass"], check=True, timeout=60, capture_output=True)
        except (OSError, subprocess.SubprocessError):
            if made is not None:
                made.stop()
            return real_python
        import atexit

        atexit.register(made.stop)
        _ZYGOTE = made
        return str(made.script)


def launch_zygote() -> None:
    """Start the zygote process ``spark_python()`` made the script for, if not yet: after the JVM's
    start, which its imports would slow down (both want the cores of a small machine)."""
    with _LOCK:
        if _ZYGOTE is not None:
            _ZYGOTE.launch()


def is_zygote_script(python: str) -> bool:
    """Whether ``python`` is the script of this driver's zygote."""
    warm = _ZYGOTE
    return warm is not None and python == str(warm.script)


def await_zygote(python: str, timeout: float = 60.0) -> bool:
    """Wait until the zygote serves, if ``python`` (a session's ``pythonExec``) is its script and it
    was launched; whether it serves. A Python process Spark starts before then runs the real
    interpreter, cold, with imports of its own; a daemon that lives as long as the session (a data
    source planner's) keeps them all along: about 70 MB where a fork from the zygote takes 30."""
    warm = _ZYGOTE
    if warm is None or warm.proc is None or not is_zygote_script(python):
        return False
    return warm.ready(timeout)


def zygote() -> Zygote | None:
    return _ZYGOTE


def real_python(python: str | None) -> str:
    """The interpreter ``PYSPARK_PYTHON`` runs: the real one behind this driver's zygote script, the
    value itself otherwise (or this interpreter when unset). What a cluster's executors, which
    never use the zygote, must run."""
    warm = _ZYGOTE
    if warm is not None and python == str(warm.script):
        return warm.real_python
    return python or sys.executable


# ------------------------------------------------------------------ the zygote process itself


def _single_threaded() -> bool:
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _set_name(argv: list[str]) -> None:
    """Name this forked process after what it became (its command line stays the zygote's): ``ps``,
    ``top`` and ``psutil.Process.name()`` show ``pyspark.worker`` for the tasks' daemon and its
    workers, the worker module's last part for a planner's daemon, ``source_runner`` for a runner."""
    module, args = argv[0], argv[1:]
    if module == RUNNER:
        name = "source_runner"
    else:
        worker = args[0] if args else module
        name = worker if worker == "pyspark.worker" else worker.rsplit(".", 1)[-1]
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME (Linux)
    except (OSError, AttributeError):
        pass


def _child(conn: socket.socket, fds: list[int], request: dict[str, Any], closing: list[Any]) -> None:
    """In the forked process: become the process Spark asked for (``python -m <one of SERVED> ...``),
    then exit with its code."""
    code = 1
    try:
        for obj in closing:
            obj.close()
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        conn.close()
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        module = request["argv"][1]
        if module not in SERVED:
            raise ValueError(f"the zygote starts {SERVED}, not {module!r}")
        sys.argv = [module, *request["argv"][2:]]
        _set_name(sys.argv)
        import runpy

        code = 0
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # what a runner that starts normally would print before it dies
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str) -> None:
    import gc
    import importlib

    from rstream.runtime.launch import recv_exact

    for module in PRELOAD:
        importlib.import_module(module)
    gc.freeze()
    if not _single_threaded():
        sys.stderr.write("threads\n")  # forking now could copy a lock some thread holds
        sys.stderr.flush()
        return
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(16)
    sys.stderr.write("ready\n")
    sys.stderr.flush()
    waiting: dict[int, socket.socket] = {}  # runner pid -> its launcher's connection
    control = sys.stdin.buffer
    while True:
        readable, _, _ = select.select([listener, control], [], [], 0.2)
        if control in readable and not os.read(control.fileno(), 1024):
            _remove_folder(Path(path))  # the driver is gone, killed maybe: nobody else would remove it
            break
        if listener in readable:
            conn, _ = listener.accept()
            fds: list[int] = []
            try:
                head, fds, _, _ = socket.recv_fds(conn, 4, 3)
                if len(head) < 4 or len(fds) != 3:
                    raise EOFError
                request = json.loads(recv_exact(conn, struct.unpack("!I", head)[0]))
            except (OSError, EOFError, ValueError):  # a broken request: its launcher starts Python itself
                for fd in fds:
                    os.close(fd)
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(conn, fds, request, [listener, *waiting.values()])
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(struct.pack("!i", pid))
                waiting[pid] = conn
            except OSError:
                conn.close()
        while waiting:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            done = waiting.pop(pid, None)
            if done is not None:
                try:
                    done.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
                except OSError:
                    pass
                done.close()


def _remove_folder(sock: Path) -> None:
    """Remove the zygote's folder (its socket and script, ``Zygote.__init__``): ``Zygote.stop()`` in the
    driver, or the zygote itself once its driver is gone."""
    for path in (sock, sock.with_name("python")):
        path.unlink(missing_ok=True)
    try:
        sock.parent.rmdir()
    except OSError:  # something else in it: not ours to remove
        pass


if __name__ == "__main__":
    serve(sys.argv[1])
