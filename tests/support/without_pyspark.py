"""tests/processors and tests/time run without pyspark (``tests/test_layout.py`` checks it): in a
subprocess where ``import pyspark`` fails, every module they import imports and their tests pass.

The run takes about 40 s of one core, most of it the operators' own tests. ``tests/conftest.py`` orders its
check last and starts the run (``start``) in the background when the session's RocketMQ tests begin, whose
time goes mostly to waiting on RocketMQ's JVMs; the check then only collects the result (``result``). Run on
its own, the check starts the run itself."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
from typing import IO, Any

from tests.support.files import ROOT, imported_modules, repository_files

#: The check's node id (tests/conftest.py orders it last and starts its run early).
NODE = "tests/test_layout.py::test_processors_and_time_pass_without_pyspark"
TIMEOUT_S = 600

# A finder first on sys.meta_path that refuses pyspark, as if it were not installed; then the modules
# named in argv[1] (comma-separated) are imported and pytest runs with the rest of argv.
_WITHOUT_PYSPARK = textwrap.dedent("""
    import importlib, importlib.abc, sys

    class NoPyspark(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pyspark" or name.startswith("pyspark."):
                raise ImportError(f"pyspark is not installed here (blocked to test that): {name}")
            return None

    sys.meta_path.insert(0, NoPyspark())
    # what this run checks is that the tests run without pyspark, not their generated cases (the main run
    # has all of those): every hypothesis test tries a few examples here
    import hypothesis
    made = hypothesis.settings.__init__

    def few_examples(self, parent=None, **changes):
        changes["max_examples"] = min(changes.get("max_examples", 3), 3)
        made(self, parent, **changes)

    hypothesis.settings.__init__ = few_examples
    hypothesis.settings.register_profile("few", max_examples=3)
    hypothesis.settings.load_profile("few")
    for module in filter(None, sys.argv[1].split(",")):
        importlib.import_module(module)
    import pytest
    sys.exit(pytest.main(sys.argv[2:]))
""")


_RUN: dict[str, Any] = {}


def command() -> list[str]:
    """The subprocess: ``_WITHOUT_PYSPARK`` with every module the two folders import, then pytest on them."""
    tests = ROOT / "tests"
    files = repository_files(tests / "processors", "test_*.py") + repository_files(tests / "time", "test_*.py")
    modules = sorted({m for path in files for _, m in imported_modules(path) if m != "__future__"})
    run = [str(p.relative_to(ROOT)) for p in files]
    return [sys.executable, "-c", _WITHOUT_PYSPARK, ",".join(modules), *run, "-q", "-x", "-p", "no:cacheprovider"]


def start() -> None:
    """Start the run in the background (once a session)."""
    if _RUN:
        return
    out: IO[str] = tempfile.TemporaryFile("w+")
    err: IO[str] = tempfile.TemporaryFile("w+")
    _RUN.update(out=out, err=err, proc=subprocess.Popen(command(), cwd=ROOT, stdout=out, stderr=err, text=True))


def result() -> tuple[int, str, str]:
    """The run's exit code, stdout and stderr, once it ended (started now if nothing started it)."""
    start()
    proc: subprocess.Popen[str] = _RUN["proc"]
    try:
        code = proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = -9
    texts = []
    for stream in (_RUN["out"], _RUN["err"]):
        stream.seek(0)
        texts.append(stream.read())
    return code, texts[0], texts[1]


def stop() -> None:
    """End a run nobody collected (a session cut short), and free its files."""
    proc = _RUN.pop("proc", None)
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait()
    for name in ("out", "err"):
        stream = _RUN.pop(name, None)
        if stream is not None:
            stream.close()
