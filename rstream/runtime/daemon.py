"""Spark's Python worker daemon, with the imports every rstream task needs done before it forks.

Spark starts one daemon per Python executable and forks a worker from it whenever a task finds
no idle worker: the first tasks of a session, every task slot beyond the idle workers, and a
worker to replace one that was killed with its task (a job stopped in the middle of a batch).
``pyspark.daemon`` imports the worker module in each forked child, and then the child imports
rstream's task code: about 0.5 s before the first record is read, on a loaded 2-core machine.
Sessions made by ``get_spark()`` with a local master run this module as the daemon
(``spark.python.daemon.module``): it imports all of that once, then is ``pyspark.daemon``.

Nothing in it may start a thread before the fork (a forked child would inherit a lock some
thread holds): numpy's OpenBLAS and pyarrow's jemalloc would, so they are told not to while the
imports run. Spark gives Python workers ``OMP_NUM_THREADS`` = the task's CPUs (one) anyway.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

#: What a worker imports for an rstream task, before its first record.
PRELOAD = ("pyspark.worker", "rstream.runtime.source", "rstream.runtime.shuffle_share", "rstream.processors.catalog",
           "rocksdict", "numpy", "pandas")  # numpy: a framed shuffle sink's watermarks (``sink.running_marks``)

#: Environment under which numpy and pyarrow import without starting threads (OpenBLAS's pool,
#: pyarrow's jemalloc background thread): for a process that forks after importing them (this
#: daemon, and the zygote of ``rstream.runtime.zygote``).
NO_THREADS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "JE_ARROW_MALLOC_CONF": "background_thread:false"}


def preload() -> None:
    added = [key for key in NO_THREADS if key not in os.environ]
    os.environ.update({key: NO_THREADS[key] for key in added})
    try:
        for module in PRELOAD:
            try:
                importlib.import_module(module)
            except ImportError:  # a worker that needs it will say so, as without this daemon
                pass
    finally:
        for key in added:
            del os.environ[key]


if __name__ == "__main__":
    if sys.argv[1:2] == ["pyspark.worker"]:  # the tasks' daemon; Spark's planners have daemons too
        preload()
        # what the imports made stays out of the collector's sight: a collection in a forked worker
        # would otherwise write to (and so copy) every page holding those objects
        gc.freeze()
    from pyspark.daemon import manager

    manager()
