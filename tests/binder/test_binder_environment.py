"""The Binder image is the environment the tests run on: the same Python, the same pinned versions, and
notebook 00 runs in a virtual environment made from ``binder/requirements.txt`` alone."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.support.notebooks import problems

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"


def pins() -> dict[str, str]:
    found = {}
    for line in (BINDER / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            found[name] = version
    return found


def test_binder_runs_the_python_the_tests_run_on() -> None:
    assert (BINDER / "runtime.txt").read_text().strip() == f"python-{sys.version_info.major}.{sys.version_info.minor}"


def test_the_tests_run_on_the_pinned_versions() -> None:
    installed = {name: importlib.metadata.version(name) for name in pins()}
    assert installed == pins(), "run `bash setup.sh --no-demo` (it installs with binder/constraints.txt)"
    assert "-c constraints.txt" in (BINDER / "requirements.txt").read_text()
    apt = (BINDER / "apt.txt").read_text().split()
    assert "graphviz" in apt and any(re.fullmatch(r"openjdk-17-jre(-headless)?", p) for p in apt)


def test_notebook_00_runs_in_a_fresh_environment_made_from_binder_requirements(tmp_path: Path) -> None:
    """What repo2docker does (pip install -r binder/requirements.txt from the repository's root), in a new
    virtual environment; then notebook 00, with that environment's Python as its kernel."""
    env_dir = tmp_path / "binder-env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_LOCAL_DIRS", "VIRTUAL_ENV")}
    # --no-compile: the kernel compiles what it imports; byte-compiling all of pyspark up front is time only
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-compile", "-r", str(BINDER / "requirements.txt"), "ipykernel",
                           "-c", str(BINDER / "constraints.txt")], cwd=ROOT, env=clean, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = ("import importlib.metadata as m, json\n"
             "found = {}\n"
             f"for name in {sorted(pins())!r}:\n"
             "    try:\n"
             "        found[name] = m.version(name)\n"
             "    except m.PackageNotFoundError:\n"
             "        pass\n"
             "print(json.dumps(found))")
    versions = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=clean, timeout=120)
    installed = json.loads(versions.stdout)
    assert {"pyspark", "pandas", "rocksdict", "ipywidgets", "matplotlib"} <= set(installed)  # JupyterLab is Binder's own
    assert installed == {name: pins()[name] for name in installed}

    spec = tmp_path / "kernels" / "binder-python"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [str(python), "-m", "ipykernel_launcher", "-f",
                                                           "{connection_file}"], "display_name": "binder",
                                                  "language": "python"}))
    km = KernelManager(kernel_name="binder-python", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))
    notebook = ROOT / "notebooks" / "00_start_here.ipynb"
    work = tmp_path / "notebooks"
    work.mkdir()
    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, km=km, timeout=300, startup_timeout=120, allow_errors=False,
                            resources={"metadata": {"path": str(work)}})
    try:
        client.execute(env=clean, cleanup_kc=True)  # shut the kernel (and its JVM) down: a km passed in is kept
    finally:
        nbformat.write(nb, tmp_path / notebook.name)
    assert problems(notebook.stem, nb, solved=False) == []
