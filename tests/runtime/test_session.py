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
    ``stop_spark()`` ends the JVM, after which ``get_spark()`` starts a new one."""
    script = textwrap.dedent(f"""
        import psutil
        from pyspark import SparkContext
        from rstream import get_spark, stop_spark
        spark = get_spark("local[1]", tmp_dir={str(tmp_path / "spark-tmp")!r})
        print(spark.range(7).count())
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
    assert done.stdout.split() == ["7", "False", "3", "True"]
    assert done.stderr == "", f"the JVM wrote into stderr: {done.stderr!r}"
    log = (tmp_path / "spark-tmp" / "spark-driver.log").read_text()
    assert "incubator" in log  # Spark 4 on Java 17 always says it: it went here instead
