"""The SparkSession rstream makes: quiet in a notebook cell (the JVM's own output goes to a log file)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.notebooks import CLEAN_ENV

# Each test starts a fresh interpreter that starts its own JVM, as a notebook's kernel does (about a minute
# each on 2 shared cores): end to end, out of ``pytest -m "not e2e"``.
pytestmark = pytest.mark.e2e

#: Put in front of a test's script: the pids of this process's Python workers (Spark's daemons' forks).
WORKERS = textwrap.dedent("""
    import psutil
    def workers():
        found = set()
        for p in psutil.Process().children(recursive=True):
            try:
                # a daemon or worker the zygote forked keeps the zygote's command line, under this name
                if "pyspark.worker" in " ".join(p.cmdline()) or p.name() == "pyspark.worker":
                    found.add(p.pid)
            except psutil.Error:  # a short-lived process, gone already
                pass
        return found
""")


def test_the_jvm_prints_nothing_into_the_callers_stderr_and_stop_spark_ends_it(tmp_path: Path) -> None:
    """A fresh process (the test session's own Spark is already running): what the JVM prints at
    start-up, such as "WARNING: Using incubator modules", reaches the log file, never stderr; and
    ``stop_spark()`` ends the JVM, after which ``get_spark()`` starts a new one. The session's warm-up
    leaves a Python worker the next SQL task uses."""
    script = WORKERS + textwrap.dedent(f"""
        from pyspark import SparkContext
        from rstream import get_spark, stop_spark
        spark = get_spark("local[1]", tmp_dir={str(tmp_path / "spark-tmp")!r})
        print(spark.range(7).count())
        from rstream.runtime import warm_up
        warm_up._WARM_UP.join(120)  # the Python workers a source's tasks need, forked in the background
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


def test_a_new_session_warms_up_and_its_first_job_waits_for_it_then_runs_warm(tmp_path: Path) -> None:
    """A fresh process: ``get_spark()`` runs a small job of its own in the background. A job started
    at once waits for it (two first queries of a new session at once can fail in Spark), counts
    right, and a job after it finds the Python workers its tasks need already forked; the warm-up
    leaves no query or folder behind."""
    script = WORKERS + textwrap.dedent(f"""
        from collections import Counter
        from pathlib import Path
        from rstream import EmbeddedBroker, RocketMQStream, StreamBuilder, TextDeserializer, TextSerializer, get_spark
        from rstream.runtime import warm_up
        tmp = Path({str(tmp_path / "spark-tmp")!r})
        spark = get_spark("local[2]", tmp_dir=tmp)
        print(warm_up._WARM_UP.is_alive())  # it runs while the next cells are read
        broker = EmbeddedBroker({str(tmp_path / "broker")!r})
        broker.create_topic("sentences", queues=2)
        text = ["a rose is a rose", "is it", "a b c"] * 5
        broker.send_batch("sentences", text)
        def job(name):
            b = StreamBuilder(name)
            (b.source("sentences", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()
             .to_rstream().sink(name + "-counts", TextSerializer(with_key=True)))
            return RocketMQStream(b.build(), {{"data_dir": {str(tmp_path / "data")!r}}}, broker=broker, spark=spark)
        def counts(name):
            out = {{}}
            for m in broker.read(name + "-counts"):
                word, _, n = m.body.decode().rpartition(":")
                out[word] = int(n)
            return out
        job("first").run_until_idle(progress=False)  # started at once: it waits for the warm-up
        print(warm_up._WARM_UP.is_alive(), counts("first") == Counter(w for s in text for w in s.split()))
        before = workers()
        job("second").run_until_idle(progress=False)
        print(len(before) > 0, workers() == before)  # no Python worker forked for it
        print(len(spark.streams.active), sorted(p.name for p in tmp.iterdir() if p.name.startswith("warm-up")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=CLEAN_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "True", "True", "True", "0", "[]"], done.stdout
