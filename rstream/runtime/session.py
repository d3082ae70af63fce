"""The one SparkSession rstream runs on: the notebook's own, or a quiet ``local[*]`` one."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from rstream.runtime.warm_up import WARM_UP_TIMEOUT_S, await_warm_up, begin_warm_up

_LOG4J = Path(__file__).with_name("log4j2.properties")
_REGISTERED: set[int] = set()
_REGISTERING = threading.Lock()


def _worker_environment(local: bool, zygote: bool) -> bool:
    """Set the workers' interpreter and import path; True if they can start warm (a local master,
    and workers running this interpreter, which has rstream: ``WARM_WORKERS``). With ``zygote``, the
    Python processes Spark starts on this machine are forked from a warm zygote (a LocalCluster's
    executors excepted: rstream.runtime.zygote)."""
    # Workers must run this interpreter (with rstream and the user's packages) and see the same
    # import path as the driver, or they cannot unpickle the job's functions.
    from rstream.runtime.zygote import real_python, spark_python

    real = real_python(os.environ.get("PYSPARK_PYTHON"))
    # a local session's per-query Python process starts warm (rstream.runtime.zygote)
    zygote = zygote and os.environ.get("RSTREAM_ZYGOTE", "1") != "0"
    local = local and zygote
    os.environ["PYSPARK_PYTHON"] = spark_python(real) if zygote else real
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    known = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    merged = [p for p in known if p] + [p for p in paths if p not in known]
    os.environ["PYTHONPATH"] = os.pathsep.join(merged)
    return local and os.path.realpath(real) == os.path.realpath(sys.executable)


def get_spark(master: str | None = None, tmp_dir: str | os.PathLike[str] | None = None, warm_up: bool = True,
              zygote: bool | None = None, **conf: Any) -> Any:
    """The active SparkSession, or a new one (``local[N]`` unless ``master`` or ``$RSTREAM_SPARK_MASTER``
    says otherwise; N = ``usable_cores()``: each task slot costs a Python worker's memory).

    A new session is quiet (warnings only, no progress bars, no UI), keeps Python workers alive
    between batches, writes streaming checkpoints without forking processes (``FAST_LOCAL_FILES``;
    a session made elsewhere keeps its own settings), and keeps its temporary files under
    ``tmp_dir`` (default ``./rstream-data/spark-tmp``).
    A new local session warms itself up in the background (``warm_up``): a small rstream job of its
    own runs to its end while the notebook's next cells are read, so the first job's first result
    comes in well under a second instead of 5 to 6 s; a job started before the warm-up ended waits
    for it. A script that starts its job at once gains nothing from it: ``warm_up=False``.
    The JVM's own output (its log, and warnings it prints at start-up such as "Using incubator
    modules") goes to ``<tmp_dir>/spark-driver.log``, not into a notebook's cells. Extra settings are
    Spark properties, with ``__`` for ``.`` (``spark__driver__memory="1g"``).
    ``zygote``: whether the Python processes Spark starts on this machine are forked from a warm
    zygote (``rstream.runtime.zygote``); by default for a local master only. ``LocalCluster.spark()``
    says True: its executors run the real interpreter all the same. Never for a cluster with
    executors on other machines, which would not find the zygote's script.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        register(active)
        return active
    master = master or os.environ.get("RSTREAM_SPARK_MASTER", f"local[{usable_cores()}]")
    local = master.startswith("local")
    warm = _worker_environment(local, local if zygote is None else zygote)
    tmp = Path(tmp_dir or Path("rstream-data") / "spark-tmp").absolute()
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_DIRS", str(tmp))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only, and no warning about it
    java_opts = f"-Dlog4j2.configurationFile={_LOG4J.as_uri()} -Djava.io.tmpdir={tmp}"
    options = {
        "spark.master": master,
        "spark.app.name": "rstream",
        # the serial collector: a notebook's driver heap is small, and G1's regions, remembered sets and
        # threads cost about 100 MB more of the JVM's memory (notebook 03's peak PSS: 1345 -> 1171 MB);
        # a small first heap (the JVM's default is 1/64 of the machine's memory, whose young generation
        # a streaming query then fills and keeps: 30 MB more on a 23 GB machine); defaultJavaOptions, so
        # a user's extraJavaOptions can still choose otherwise
        "spark.driver.defaultJavaOptions": "-XX:+UseSerialGC -Xms64m",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.python.worker.reuse": "true",
        # the RDD jobs' workers get the same environment as the SQL ones (which Spark gives this): one
        # daemon of Python workers for both instead of two (about 120 MB less in a notebook)
        "spark.executorEnv.SPARK_SIMPLIFIED_TRACEBACK": "1",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.noDataProgressEventInterval": "100",
        "spark.sql.warehouse.dir": str(tmp / "warehouse"),
        **FAST_LOCAL_FILES,
        **(WARM_WORKERS if warm else {}),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        **{key.replace("__", "."): str(value) for key, value in conf.items()},
    }
    _launch_jvm(options, tmp / "spark-driver.log")
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from rstream.runtime.zygote import launch_zygote

    launch_zygote()
    register(spark)  # once the zygote serves: the data source lookup's daemon lives as long as the JVM
    if warm and warm_up:
        _start_warm_up(spark, tmp)
    return spark


#: Spark properties that make the checkpoint's offset and commit log writes cheap on a local disk.
#: Without Hadoop's native library (pip's pyspark has none), Hadoop's local file system runs a
#: ``readlink`` process for every path a ``FileContext`` rename looks at and a ``chmod`` process for
#: every file it creates (its ``.crc`` checksum file included): about 20 processes forked by the
#: JVM per micro-batch, 100+ ms of every batch (measured with ``strace -f -e trace=execve`` on the
#: JVM; ``bench/probe.py``). The ``FileSystem``-based checkpoint manager renames with a plain
#: ``rename(2)`` (atomic on a local disk: what the offset log relies on), and the raw local file
#: system writes no ``.crc`` files, which leaves one ``chmod`` per log file.
FAST_LOCAL_FILES = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}


#: Python workers forked warm: the daemon they are forked from has imported what an rstream task
#: needs (``rstream.runtime.daemon``). Local sessions whose workers run this interpreter only: the
#: daemon is a module of this environment, and executors elsewhere may run another.
WARM_WORKERS = {"spark.python.daemon.module": "rstream.runtime.daemon"}


#: Task slots of the default local master at most: a notebook machine (a laptop, a Binder box)
#: gains little from more, and each slot holds a Python worker of about 150 MB.
MAX_LOCAL_CORES = 4


def usable_cores() -> int:
    """The CPUs this process may really use (its affinity, and a container's CPU quota, which
    ``os.cpu_count()`` does not see), at most ``MAX_LOCAL_CORES``."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, min(cores, MAX_LOCAL_CORES))


def _launch_jvm(options: dict[str, str], log: Path) -> None:
    """Start Spark's JVM (once per process) with these settings and its stdout and stderr in ``log``:
    what the JVM prints itself would otherwise land in a notebook cell as a red stderr box.

    With the zygote's script as the session's Python, the JVM gets it as ``PYSPARK_DRIVER_PYTHON`` too
    (only the JVM: this process's own stays as it was). Spark runs the Python data source lookup, once
    per JVM, with that one (``PythonUtils.defaultPythonExec``), not with the session's ``pythonExec``:
    its daemon, which lives as long as the JVM, is then forked from the zygote as well."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    from rstream.runtime.zygote import is_zygote_script

    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return  # a JVM is already there (an earlier session in this process, or a pyspark shell)
    python = os.environ.get("PYSPARK_PYTHON", "")
    driver_python = os.environ.get("PYSPARK_DRIVER_PYTHON")
    try:
        if is_zygote_script(python):
            os.environ["PYSPARK_DRIVER_PYTHON"] = python  # launch_gateway gives the JVM this environment
        with open(log, "ab") as out:
            gateway = launch_gateway(SparkConf(loadDefaults=False).setAll(list(options.items())),
                                     popen_kwargs={"stdout": out, "stderr": out})
    finally:
        if driver_python is None:
            os.environ.pop("PYSPARK_DRIVER_PYTHON", None)
        else:
            os.environ["PYSPARK_DRIVER_PYTHON"] = driver_python
    SparkContext._ensure_initialized(gateway=gateway)


def _start_warm_up(spark: Any, folder: Path) -> None:
    """In the background, while the notebook is read: run a small rstream job of its own to its end
    (``_warm_up_job``), then an RDD job, so that a new session's first query finds the JVM's
    streaming code loaded, the Python workers of a source's tasks and of the RDD jobs that run a
    batch's shuffle side forked, and the data source looked up. A first query without it took 5.5 s
    where later ones take 0.4 s; started while the warm-up still runs, it waits for it
    (``await_warm_up``): both at once would share the cores, and the first would still find Spark cold."""

    def run() -> None:
        try:
            _warm_up_job(spark, folder)
            slots = spark.sparkContext.defaultParallelism
            spark.sparkContext.parallelize(range(slots), slots).map(_identity).collect()  # the RDD API's workers
        except Exception:  # the session stopped meanwhile: nothing to warm
            pass

    begin_warm_up(run)


#: The job id of the session's warm-up job (its topics and folders are its own, deleted after it).
WARM_UP_JOB = "rstream-warm-up"


def _warm_up_job(spark: Any, folder: Path) -> None:
    """A word count through one shuffle, on a broker, state and checkpoint of its own under a
    temporary folder in ``folder`` (deleted after it), run until idle: every part of a query that is
    slow the first time in a JVM (Spark's streaming code, the Python data source, ``foreachBatch``,
    the source's planner process, the Python workers of its tasks, a state store)."""
    import shutil
    import tempfile

    from rstream.broker.embedded import EmbeddedBroker
    from rstream.dsl import StreamBuilder
    from rstream.runtime.job_core import JobCore
    from rstream.runtime.job_progress import ProgressLog
    from rstream.runtime.job_query import QueryDriver
    from rstream.serde import TextDeserializer, TextSerializer

    root = Path(tempfile.mkdtemp(prefix="warm-up-", dir=folder))
    try:
        broker = EmbeddedBroker(root / "broker")
        broker.create_topic("sentences", queues=2)
        for queue in range(2):
            broker.send_batch("sentences", ["to warm up a session"] * 2, queue=queue, progress=False)
        builder = StreamBuilder(WARM_UP_JOB, shuffle_queues=2)
        (builder.source("sentences", TextDeserializer()).flat_map(str.split).key_by(_identity).count()
         .to_rstream().sink("counts", TextSerializer(with_key=True)))
        core = JobCore.of(builder.build(), {"data_dir": str(root)}, broker)  # a job's parts: no facade needed
        QueryDriver(core, ProgressLog(core), spark).run_until_idle(timeout=WARM_UP_TIMEOUT_S, progress=False)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _identity(x: Any) -> Any:
    return x


def register(spark: Any) -> None:
    """Make ``format("rstream")`` known to ``spark`` (once per session).

    The first registration in a JVM makes Spark look up the Python data sources installed, in a
    daemon of its own (``pyspark.daemon pyspark.sql.worker.lookup_data_sources``) that then lives as
    long as the JVM: with the session's zygote launched but not serving yet (its imports take a
    second or two), it would start cold and keep its own imports (about 70 MB where a fork from the
    zygote takes 30). So this waits for the zygote first: about as long as the cold daemon's own
    imports took, and whatever comes next (the warm-up, a query) needs the zygote anyway."""
    if id(spark) in _REGISTERED:
        return
    from rstream.runtime.source import RStreamDataSource
    from rstream.runtime.zygote import await_zygote

    with _REGISTERING:
        if id(spark) in _REGISTERED:
            return
        context = getattr(spark, "sparkContext", None)
        await_zygote(str(getattr(context, "pythonExec", "")))
        spark.dataSource.register(RStreamDataSource)
        # progress for idle triggers within 100 ms, not 10 s: run_until_idle() in continuous mode reads it
        spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "100")
        _REGISTERED.add(id(spark))


def stop_spark() -> None:
    """Stop every streaming query, the SparkSession and the JVM under it, so a notebook that ends gives
    its memory back to the machine (a stopped session alone keeps its JVM). The next ``get_spark()``
    starts a new one."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    await_warm_up(timeout=60)  # a session stopped under its warm-up job would log the cancel
    active = SparkSession.getActiveSession()
    if active is not None:
        for query in active.streams.active:
            query.stop()
        active.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    try:
        gateway.shutdown()
    except Exception:  # a JVM that is already gone
        pass
    if proc is not None:
        if proc.stdin is not None:
            proc.stdin.close()  # the JVM exits when its stdin closes
        try:
            proc.wait(timeout=30)
        except Exception:
            proc.kill()
            proc.wait(timeout=30)
    SparkContext._gateway = None
    SparkContext._jvm = None
    _REGISTERED.clear()
