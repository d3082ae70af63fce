"""What the distribution installs: every subpackage of rstream, and the toolkit as ``rstream.widgets``
(from the top-level ``widgets/`` folder), never a bare top-level ``widgets`` package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.files import repository_files

ROOT = Path(__file__).resolve().parents[1]


def test_every_subpackage_is_listed_in_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in repository_files(ROOT / "rstream", "__init__.py", recursive=True)}
    assert found | {"rstream.widgets"} == listed


def test_the_toolkit_is_rstream_widgets_and_no_top_level_widgets_is_installed(tmp_path: Path) -> None:
    probe = ("import importlib.util, rstream.widgets as w; "
             "print(importlib.util.find_spec('widgets') is None, w.__file__, w.StateInspector.__module__)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # get_spark() adds the repo for Spark's workers
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=env)
    assert done.returncode == 0, done.stderr
    missing, path, module = done.stdout.split()
    assert missing == "True"  # outside the repository, "import widgets" finds nothing of ours
    assert Path(path) == ROOT / "widgets" / "__init__.py" and module.startswith("rstream.widgets.")
