"""The one SparkSession rstream runs on: the notebook's own, or a quiet ``local[*]`` one."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

_LOG4J = Path(__file__).with_name("log4j2.properties")
_REGISTERED: set[int] = set()


def _worker_environment() -> None:
    # Workers must run this interpreter (with rstream and the user's packages) and see the same
    # import path as the driver, or they cannot unpickle the job's functions.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    known = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    merged = [p for p in known if p] + [p for p in paths if p not in known]
    os.environ["PYTHONPATH"] = os.pathsep.join(merged)


def get_spark(master: str | None = None, tmp_dir: str | os.PathLike[str] | None = None, **conf: Any) -> Any:
    """The active SparkSession, or a new one (``local[*]`` unless ``master`` says otherwise).

    A new session is quiet (warnings only, no progress bars, no UI), keeps Python workers alive
    between batches, and keeps its temporary files under ``tmp_dir`` (default ``./rstream-data/spark-tmp``).
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    _worker_environment()
    tmp = Path(tmp_dir or Path("rstream-data") / "spark-tmp").absolute()
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, and no warning about it
    java_opts = f"-Dlog4j2.configurationFile={_LOG4J.as_uri()} -Djava.io.tmpdir={tmp}"
    builder = (
        SparkSession.builder.master(master or os.environ.get("RSTREAM_SPARK_MASTER", "local[*]"))
        .appName("rstream")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.noDataProgressEventInterval", "100")
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def register(spark: Any) -> None:
    """Make ``format("rstream")`` known to ``spark`` (once per session)."""
    if id(spark) in _REGISTERED:
        return
    from rstream.runtime.source import RStreamDataSource

    spark.dataSource.register(RStreamDataSource)
    # progress for idle triggers within 100 ms, not 10 s: run_until_idle() in continuous mode reads it
    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100")
    _REGISTERED.add(id(spark))
