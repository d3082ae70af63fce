"""Servers that end with the process that started them.

A ``LocalCluster``'s daemons and ``LocalRocketMQ``'s JVMs run in sessions of their own, and an
``atexit`` hook stops them when the Python process that started them exits. A notebook's kernel
often does not exit that way: JupyterLab's "Shut Down Kernel" and "Restart Kernel" ask it to quit,
then send it SIGTERM after 2.5 s and SIGKILL after 5 (jupyter_client's ``shutdown_wait_time``), and
stopping a cluster or a broker can take longer than that. Without more, its servers would then live
on, unowned (notebook 06's cluster with its executors: about 1 GB, in a Binder pod of 2 GB).

So rstream starts them under ``setpriv --pdeathsig TERM`` (util-linux): the kernel sends such a
process SIGTERM when the thread that started it ends, which a killed process's threads all do.
The JVMs handle SIGTERM as a stop (Spark's worker kills its executors on the way out). This is
Linux's ``PR_SET_PDEATHSIG`` (``PR_SET_PDEATHSIG(2const)``: kept across ``execve``, so by the JVM that
``setpriv`` and ``spark-class`` exec into; not passed to forked children).
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections.abc import Sequence


def ended_with_this_process(command: Sequence[str]) -> list[str]:
    """``command`` made to get SIGTERM once this process ends, however it ends (killed included).

    Only when called from the main thread: the signal follows the thread that starts the process,
    and a helper thread ending would stop a server that its process still uses. Unchanged where
    ``setpriv`` is missing (not Linux): there, the ``atexit`` hooks remain the only stop."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or not sys.platform.startswith("linux"):
        return list(command)
    if threading.current_thread() is not threading.main_thread():
        return list(command)
    return [setpriv, "--pdeathsig", "TERM", "--", *command]
