"""rstream.owned: a server started through ``ended_with_this_process`` ends when its starter dies,
however it dies (no Spark, no Java: a ``sleep`` stands in for the server)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from rstream.owned import ended_with_this_process
from tests.support.processes import child_env, gone_within, running

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# A kernel in a subprocess: starts a server (in its main thread, or in a helper thread that then
# ends), says the server's pid, and waits to be killed.
_STARTER = textwrap.dedent("""
    import json, subprocess, sys, threading, time
    from rstream.owned import ended_with_this_process

    started = []
    def start():
        command = ended_with_this_process(["sleep", "600"])
        started.append(subprocess.Popen(command, start_new_session=True, stdin=subprocess.DEVNULL))
    if sys.argv[1] == "thread":
        helper = threading.Thread(target=start)
        helper.start()
        helper.join()
    else:
        start()
    pid = started[0].pid
    # Popen returns once the fork has closed its close-on-exec pipe, which Linux does a moment
    # before it renames the process; then setpriv execs the server. Wait for the server's name
    # (at most 10 s): a setpriv that forked instead would keep its own name on this pid.
    for _ in range(200):
        name = open(f"/proc/{pid}/comm").read().strip()
        if name == "sleep":
            break
        time.sleep(0.05)
    print(json.dumps({"pid": pid, "name": name}), flush=True)
    time.sleep(600)
""")


def _start(how: str) -> tuple[subprocess.Popen[str], int, str]:
    starter = subprocess.Popen([sys.executable, "-c", _STARTER, how], stdout=subprocess.PIPE, text=True,
                               env=child_env(), start_new_session=True)
    assert starter.stdout is not None
    line = starter.stdout.readline()
    assert line, f"the starter printed nothing (exit code {starter.poll()})"
    said = json.loads(line)
    return starter, said["pid"], said["name"]


def test_a_server_ends_when_the_process_that_started_it_is_killed() -> None:
    starter, server, name = _start("main")
    try:
        assert name == "sleep"  # setpriv exec'd it: the pid Popen gave is the server's own
        assert running(server)
        os.kill(starter.pid, signal.SIGKILL)  # no atexit, no clean-up: a kernel killed after its 5 s
        starter.wait(timeout=30)
        assert gone_within([server], 10)
    finally:
        starter.kill()
        if running(server):
            os.kill(server, signal.SIGKILL)


def test_a_server_started_from_a_helper_thread_outlives_the_thread() -> None:
    """The signal follows the starting thread: from a thread that ends, the server is left as it was,
    and only atexit (or the next start's clean-up of leftovers) stops it."""
    starter, server, _ = _start("thread")
    try:
        time.sleep(1)  # the helper thread has ended
        assert running(server)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait(timeout=30)
        time.sleep(1)
        assert running(server)
    finally:
        starter.kill()
        if running(server):
            os.kill(server, signal.SIGKILL)


def test_the_command_is_kept_whole_behind_setpriv() -> None:
    command = ["java", "-cp", "a b", "Main", "--flag"]
    wrapped = ended_with_this_process(command)
    assert wrapped[-len(command):] == command and wrapped[-len(command) - 1] == "--"
    assert os.path.basename(wrapped[0]) == "setpriv" and wrapped[1:3] == ["--pdeathsig", "TERM"]
    from_thread: list[list[str]] = []
    helper = threading.Thread(target=lambda: from_thread.append(ended_with_this_process(command)))
    helper.start()
    helper.join()
    assert from_thread == [command]
