"""Every notebook in ``notebooks/`` runs top to bottom without a cell error.

The kernel is this interpreter (``sys.executable -m ipykernel_launcher``), named by a kernelspec written
into the test's temporary folder and found through a ``KernelSpecManager`` that looks only there. So the
test needs no installed kernelspec and cannot pick up another Python's ``python3`` kernel from the user's
or the system's Jupyter folders: it works in any venv where ``pip install -e .[dev]`` was done.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "rstream-test-python"
CELL_TIMEOUT = 300  # seconds for one cell; the first Spark cell starts a JVM

# The environment as it was before any test started Spark in this process: get_spark() sets
# SPARK_LOCAL_DIRS and PYTHONPATH for its own workers, and the kernel must not inherit those.
CLEAN_ENV = dict(os.environ)


def notebooks() -> list[Path]:
    found = sorted(NOTEBOOKS.glob("*.ipynb"))
    assert found, f"no notebooks in {NOTEBOOKS}"
    return found


def kernel_manager(folder: Path) -> KernelManager:
    """A kernel manager that starts this interpreter's ipykernel."""
    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"rstream tests ({sys.executable})",
        "language": "python",
    }))
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(spec.parent)]))


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        km=kernel_manager(tmp_path),
        timeout=CELL_TIMEOUT,
        startup_timeout=120,
        allow_errors=False,  # the first failing cell raises CellExecutionError with its traceback
        resources={"metadata": {"path": str(NOTEBOOKS)}},  # the notebook's folder is the kernel's cwd
    )
    try:
        client.execute(env=CLEAN_ENV)
    finally:
        nbformat.write(nb, tmp_path / path.name)  # the executed notebook, to look at when it failed
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert ran and all(c.get("execution_count") for c in ran), "some code cells did not run"
