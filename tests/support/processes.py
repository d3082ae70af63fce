"""Subprocesses in a process group of their own (Spark drivers against a local cluster), killed whole,
with their log's tail for a failure's message; and what a cluster may have left running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240.0  # generous: 2 shared cores; nothing below depends on how fast things are


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def spawn(args: list[str], log: Path) -> subprocess.Popen[str]:
    """A Python subprocess in its own process group; stderr (Spark's warnings) goes to ``log``."""
    with open(log, "w") as err:
        return subprocess.Popen([sys.executable, *args], env=child_env(), cwd=str(ROOT), start_new_session=True,
                                stdout=subprocess.PIPE, stderr=err, text=True)


def kill_when(args: list[str], ready: Callable[[], bool], timeout: float = 120.0) -> None:
    """Run ``python *args`` (a job) in a process group of its own and SIGKILL the whole group (the
    driver, its JVM, its Python workers) as soon as ``ready()`` holds: mid-batch, as a crash would.
    Fails if the job died first, or made no progress within ``timeout`` seconds."""
    proc = subprocess.Popen([sys.executable, *args], env=child_env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert proc.poll() is None, "the job process died on its own"
            if time.monotonic() > deadline:
                raise AssertionError(f"the job made no progress in {timeout:.0f} s")
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else ""


def kill_group(proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    """SIGKILL the whole process group of ``proc`` and wait until none of it is left.

    Also after ``proc`` exited by itself: its children (a PySpark driver's JVM, which ends only once
    it notices its parent is gone) may outlive it for a moment, in the same group.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + timeout
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (exited, not yet reaped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone_within(pids: list[int], seconds: float) -> bool:
    """Whether every process of ``pids`` is gone (or a zombie) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while any(running(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _group_alive(pgid: int) -> bool:
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def wait_until(condition: Any, what: str, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the driver exited ({proc.returncode}) before {what}:\n{log_tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def processes_mentioning(marks: list[str]) -> list[str]:
    """Every live process but this one whose command line contains one of ``marks`` (a folder, an address)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.pid != os.getpid() and any(m in line for m in marks):
            found.append(f"{proc.pid}: {line[:200]}")
    return found


def strays(work_dir: Path, ports: list[int]) -> list[str]:
    """Any live process, ours or not, whose command line mentions the cluster's folder or ports."""
    return processes_mentioning([str(work_dir)] + [f"127.0.0.1:{p}" for p in ports])
