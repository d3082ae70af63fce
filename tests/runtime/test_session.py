"""The SparkSession rstream makes: quiet in a notebook cell (the JVM's own output goes to a log file)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.notebooks.test_notebooks import CLEAN_ENV


def test_the_jvm_prints_nothing_into_the_callers_stderr_and_stop_spark_ends_it(tmp_path: Path) -> None:
    """A fresh process (the test session's own Spark is already running): what the JVM prints at
    start-up, such as "WARNING: Using incubator modules", reaches the log file, never stderr; and
    ``stop_spark()`` ends the JVM, after which ``get_spark()`` starts a new one. The session's warm-up
    leaves a Python worker the next SQL task uses."""
    script = textwrap.dedent(f"""
        import psutil
        from pyspark import SparkContext
        from rstream import get_spark, stop_spark
        spark = get_spark("local[1]", tmp_dir={str(tmp_path / "spark-tmp")!r})
        print(spark.range(7).count())
        from rstream.runtime import session
        session._WARM_UP.join(120)  # the Python workers a source's tasks need, forked in the background
        def workers():
            found = set()
            for p in psutil.Process().children(recursive=True):
                try:
                    if "pyspark.worker" in " ".join(p.cmdline()):
                        found.add(p.pid)
                except psutil.Error:  # a short-lived process, gone already
                    pass
            return found
        warm = workers()
        spark.range(0, 1, 1, 1).mapInArrow(lambda batches: batches, "id long").collect()
        print(len(warm) >= 2, workers() == warm)  # their daemon and a worker; the task forked none
        jvm = SparkContext._gateway.proc.pid
        stop_spark()  # the JVM itself goes, and its memory with it
        print(psutil.pid_exists(jvm) and psutil.Process(jvm).status() != psutil.STATUS_ZOMBIE)
        again = get_spark("local[1]", tmp_dir={str(tmp_path / "spark-tmp")!r})  # a new one starts
        print(again.range(3).count(), SparkContext._gateway.proc.pid != jvm)
        stop_spark()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=CLEAN_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "True", "True", "False", "3", "True"]
    assert done.stderr == "", f"the JVM wrote into stderr: {done.stderr!r}"
    log = (tmp_path / "spark-tmp" / "spark-driver.log").read_text()
    assert "incubator" in log  # Spark 4 on Java 17 always says it: it went here instead
