"""The tests as a toolbox: shared helpers live in ``tests/support/`` (no test module imports another),
the bench never imports the tests, and what runs without Spark keeps running without pyspark."""

from __future__ import annotations

from pathlib import Path

from tests.support import without_pyspark
from tests.support.files import imported_modules, repository_files

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


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


def test_processors_and_time_pass_without_pyspark() -> None:
    """``tests/processors`` and ``tests/time`` run the operators in this process, with no Spark: in a
    subprocess where ``import pyspark`` fails, every module they import (anywhere in them, also inside a
    test) imports, and their tests pass, with three generated examples per hypothesis test (the main run
    tries them all), so that this check stays cheap. It runs last, started in the background when the
    session's RocketMQ tests begin (``tests/support/without_pyspark.py``)."""
    code, out, err = without_pyspark.result()
    assert code == 0, out[-4000:] + err[-2000:]
    assert " passed" in out and "skipped" not in out
