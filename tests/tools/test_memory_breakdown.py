"""The browser suite's memory breakdown: a kernel tree's PSS per kind of process, on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from tools.browser import kernel_tree_memory, process_kind


def test_a_process_is_named_by_its_java_main_class_its_python_module_or_its_program() -> None:
    java = ["/usr/lib/jvm/bin/java", "-cp", "/a/b.jar:/c", "-Xmx1g", "org.apache.spark.deploy.SparkSubmit", "pyspark-shell"]
    assert process_kind(java) == "java SparkSubmit"
    assert process_kind(["/v/bin/python", "-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"]) == \
        "python -m pyspark.daemon pyspark.sql.worker.plan_data_source_read"
    assert process_kind(["/v/bin/python", "-m", "rstream.runtime.zygote", "/tmp/z/zygote.sock"]) == \
        "python -m rstream.runtime.zygote"
    zygote = ["/v/bin/python", "-m", "rstream.runtime.zygote", "/tmp/z/zygote.sock"]
    assert process_kind(zygote, "pyspark.worker") == "forked by the zygote: pyspark.worker"
    assert process_kind(zygote, "python") == "python -m rstream.runtime.zygote"  # the zygote itself
    assert process_kind(["/usr/bin/sleep", "5"]) == "sleep"
    assert process_kind([]) == "?"


def test_the_parts_of_a_real_tree_add_up_to_its_pss() -> None:
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "kid = subprocess.Popen(['sleep', '30'])\n"
        "time.sleep(30)\n")])
    try:
        root = psutil.Process(parent.pid)
        deadline = time.monotonic() + 10
        while len(root.children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        parts: dict[str, int] = {}
        rss, pss = kernel_tree_memory(root, parts=parts)
        assert pss > 0 and rss >= pss
        assert "kernel" in parts and "sleep" in parts
        assert sum(parts.values()) == pss
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_a_child_that_shares_its_parents_memory_is_counted_once() -> None:
    """A JVM starts every process by a ``vfork``-like clone: until its ``exec`` the child shares the
    JVM's address space, and its PSS is the JVM's again. Told apart by ``kcmp(2)``; a forked child
    (its own address space, copy on write) is counted."""
    from tools.browser import same_memory, shares_parents_memory

    assert same_memory(os.getpid(), os.getpid())
    kid = subprocess.Popen(["sleep", "30"])
    try:
        assert not same_memory(os.getpid(), kid.pid)
        assert not shares_parents_memory(psutil.Process(kid.pid))
    finally:
        kid.kill()
        kid.wait()
