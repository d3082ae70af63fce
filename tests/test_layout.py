"""The tests as a toolbox: shared helpers live in ``tests/support/`` (no test module imports another),
the bench never imports the tests, and what runs without Spark keeps running without pyspark."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.files import repository_files

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports, anywhere in it (also inside functions), as absolute names."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's own package
                package = path.relative_to(ROOT).parent.parts
                base = ".".join(package[: len(package) - node.level + 1])
                out.append((node.lineno, f"{base}.{node.module}" if node.module else base))
            else:
                out.append((node.lineno, node.module or ""))
    return out


def test_no_test_module_imports_another_test_module_or_a_conftest() -> None:
    wrong = []
    for path in repository_files(TESTS, "*.py", recursive=True):
        for line, module in imported_modules(path):
            parts = module.split(".")
            if parts[0] == "tests" and parts[1:2] != ["support"]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert wrong == [], "shared helpers belong in tests/support/:\n" + "\n".join(wrong)


def test_every_test_module_has_a_name_of_its_own() -> None:
    """Test folders are not packages (``tests/rocketmq`` would shadow the official ``rocketmq``), so
    pytest imports each test module by its file name: two of one name stop the whole run at collection."""
    names: dict[str, list[str]] = {}
    for path in repository_files(TESTS, "test_*.py", recursive=True):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


def test_the_support_package_imports_no_test_module() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in repository_files(TESTS / "support", "*.py", recursive=True)
             for line, module in imported_modules(path)
             if module.split(".")[0] == "tests" and not module.startswith("tests.support")]
    assert wrong == []


def test_the_bench_and_the_tools_never_import_the_tests() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for folder in ("bench", "tools") for path in repository_files(ROOT / folder, "*.py", recursive=True)
             for line, module in imported_modules(path) if module.split(".")[0] == "tests"]
    assert wrong == [], "what the bench shares with the tests belongs in tools/"


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
def test_processors_and_time_pass_without_pyspark() -> None:
    """``tests/processors`` and ``tests/time`` run the operators in this process, with no Spark: in a
    subprocess where ``import pyspark`` fails, every module they import (anywhere in them, also inside a
    test) imports, and their tests pass, with three generated examples per hypothesis test (the main run
    tries them all), so that this check stays cheap."""
    files = repository_files(TESTS / "processors", "test_*.py") + repository_files(TESTS / "time", "test_*.py")
    modules = sorted({m for path in files for _, m in imported_modules(path) if m != "__future__"})
    run = [str(p.relative_to(ROOT)) for p in files]
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYSPARK, ",".join(modules), *run, "-q", "-x", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout
