"""Every workshop notebook and every solution runs top to bottom, and shows what the lesson says.

The learner notebooks run in a real JupyterLab in ``tests/browser`` where Chromium is present; here they run
headless only where it is not (so no notebook runs twice). The solutions (``notebooks/solutions``: each
notebook with its exercises filled in) always run here, and every exercise check in them must say "right".
Both read the facts each notebook's hidden ``verify`` cell prints (``tests/support/notebooks.py``).

The kernel is this interpreter (``sys.executable -m ipykernel_launcher``), named by a kernelspec written
into the test's temporary folder and found through a ``KernelSpecManager`` that looks only there. So the
test needs no installed kernelspec and cannot pick up another Python's ``python3`` kernel from the user's
or the system's Jupyter folders: it works in any venv where ``pip install -e .[dev]`` was done.

Each run's kernel works in a new temporary folder, so a notebook's ``rstream-data/`` (its broker, its
jobs, and the ledger of its graded exercises) starts empty: neither a learner's session in ``notebooks/``
nor an earlier run of the tests can change what a run shows. The notebooks are the repository's own
(``tests/support/files.py``): a copy JupyterLab or a learner left beside them is not one.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.support.exercises import (
    SHORTCUTS,
    hints_shown,
    runs_shown_before_a_prediction,
    shortcut_verdicts,
    with_shortcuts,
)
from tests.support.files import repository_files
from tests.support.notebooks import CLEAN_ENV, problems

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
KERNEL = "rstream-test-python"
CELL_TIMEOUT = 300  # seconds for one cell; the first Spark cell starts a JVM



def notebooks() -> list[Path]:
    """The workshop's notebooks (the repository's: not a copy a learner saved beside them)."""
    found = repository_files(NOTEBOOKS, "*.ipynb")
    assert found, f"no notebooks in {NOTEBOOKS}"
    return found


def solutions() -> list[Path]:
    return repository_files(SOLUTIONS, "*.ipynb")


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


#: What a learner does last, by hand, once the exercises are done: click the release button that the
#: notebook's last cell only draws (``rstream.widgets.release_button``). Here no one can click, so one more
#: cell does what the click does (it stops what the button names: a job, a cluster, RocketMQ; then Spark).
CLICK_RELEASE = "from rstream.widgets import ReleaseButton\n\nprint(ReleaseButton.shown.click())"


def execute(path: Path, tmp_path: Path) -> Any:
    """Run ``path`` top to bottom in a new working folder (``tmp_path / "work"``: its ``rstream-data/``,
    with the exercises' ledger, starts empty, whatever a learner's or an earlier run left beside the
    notebook), then click its release button (as ``CLICK_RELEASE``); the first failing cell raises with
    its traceback."""
    return execute_as(path, working_folder(tmp_path), tmp_path)


def working_folder(tmp_path: Path) -> Path:
    """A new, empty working folder for a kernel: where a notebook's relative ``rstream-data`` goes."""
    folder = tmp_path / "work"
    folder.mkdir(parents=True)
    return folder


def execute_as(path: Path, folder: Path, tmp_path: Path) -> Any:
    """``execute``, with ``folder`` as the kernel's working folder."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(path, as_version=4)
    if any("release" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        nb.cells.append(nbformat.v4.new_code_cell(CLICK_RELEASE, metadata={"tags": ["harness"]}))
    client = NotebookClient(nb, km=kernel_manager(tmp_path), timeout=CELL_TIMEOUT, startup_timeout=120,
                            allow_errors=False, resources={"metadata": {"path": str(folder)}})
    try:
        client.execute(env=CLEAN_ENV)
    finally:
        nbformat.write(nb, tmp_path / path.name)  # the executed notebook, to look at when it failed
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert ran and all(c.get("execution_count") for c in ran), "some code cells did not run"
    stderr = [(i, o["text"]) for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
              if o.get("output_type") == "stream" and o.get("name") == "stderr"]
    assert not stderr, f"stderr reached a cell (a red box for a learner): {stderr}"
    if nb.cells[-1].get("metadata", {}).get("tags") == ["harness"]:
        released = "".join(o.get("text", "") for o in nb.cells[-1].get("outputs", []))
        assert "Spark stopped" in released, f"the release button did not release: {released!r}"
    return nb


def _browser_runs_them() -> str | None:
    if os.environ.get("RSTREAM_HEADLESS_NOTEBOOKS"):
        return None
    try:
        from tools.browser import browser_unavailable
    except Exception:
        return None
    return None if browser_unavailable() else "run in a real JupyterLab by tests/browser " \
        "(RSTREAM_HEADLESS_NOTEBOOKS=1 runs them here too)"


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path: Path, tmp_path: Path) -> None:
    reason = _browser_runs_them()
    if reason:
        pytest.skip(reason)
    nb = execute(path, tmp_path)
    assert problems(path.stem, nb, solved=False) == []
    assert runs_shown_before_a_prediction(nb) == []
    assert hints_shown(nb, path.stem) == [], "a hint shows before any answer"


@pytest.mark.parametrize("path", solutions(), ids=lambda p: p.name)
def test_solution_runs_and_every_check_says_right(path: Path, tmp_path: Path) -> None:
    """Every check of a solution says "right". In a notebook with graded exercises, the shortcuts that
    passed the look-up exercises without the skill (``tests/support/exercises.py``) are then spliced in
    after each check, each followed by the check again, which must not say "right": a value typed in, a
    plain Python count instead of a job, the broken job handed back, a job never run, a job that answers
    another question, a prediction written after the run was shown. (The learner's notebook, untouched,
    runs in the browser suite, where every check must say "not yet" and no run may show before a
    prediction.)"""
    name = path.stem
    if name in SHORTCUTS:
        spliced = tmp_path / path.name
        nbformat.write(with_shortcuts(nbformat.read(path, as_version=4), name), spliced)
        nb = execute_as(spliced, working_folder(tmp_path), tmp_path / "run")
    else:
        nb = execute(path, tmp_path)
    assert problems(name, nb, solved=True) == []
    if name in SHORTCUTS:
        verdicts = shortcut_verdicts(nb)
        assert len(verdicts) == sum(len(v) for v in SHORTCUTS[name].values())
        passed = {what: verdict for what, verdict in verdicts.items() if verdict != "not quite"}
        assert not passed, f"shortcuts that were not refused: {passed}"


def test_solutions_are_up_to_date() -> None:
    """``notebooks/solutions`` is what ``notebooks/make_solutions.py`` writes from the notebooks."""
    spec = importlib.util.spec_from_file_location("make_solutions", NOTEBOOKS / "make_solutions.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    want = maker.expected(notebooks())
    assert sorted(want) == [p.name for p in solutions()], "a notebook's solution is missing or left over"
    stale = [name for name, text in want.items() if (SOLUTIONS / name).read_text() != text]
    assert not stale, f"run `python notebooks/make_solutions.py`: {stale} differ from their notebooks"


def test_a_notebook_that_lost_its_kernel_mid_job_runs_again_from_the_top(tmp_path: Path) -> None:
    """Notebook 06 runs until its job is streaming on its Spark cluster; then the kernel is SIGKILLed
    (the cluster's daemons outlive it, as they would). Run from the top again, it must pass with no
    clean-up by hand, and afterwards no process of either run may be left."""
    import psutil

    path = NOTEBOOKS / "06_scaling_and_failure.ipynb"
    folder = working_folder(tmp_path)  # both runs in it, as a learner's two runs in the notebooks' folder
    nb = nbformat.read(path, as_version=4)
    streaming = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "for round_ in range(3):" in c.source)
    km = kernel_manager(tmp_path / "first")
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT, startup_timeout=120,
                            resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel(env=CLEAN_ENV):
        for index in range(streaming + 1):
            client.execute_cell(nb.cells[index], index)
        kernel = psutil.Process(km.provisioner.pid)  # type: ignore[union-attr]
        orphans = [p for p in psutil.process_iter() if _cluster_process(p, folder)]
        assert orphans, "the cluster should be running before the kernel is lost"
        kernel.kill()
        kernel.wait(timeout=30)
    assert any(p.is_running() for p in orphans), "nothing outlived the kernel: the test would prove nothing"

    again = execute_as(path, folder, tmp_path / "second")
    assert problems(path.stem, again, solved=False) == []
    left = [p for p in psutil.process_iter() if _cluster_process(p, folder)]
    assert not left, f"processes of the notebook's cluster are still running: {left}"


def _cluster_process(proc: Any, folder: Path) -> bool:
    """Whether ``proc`` belongs to a LocalCluster working under ``folder`` (its marker variable)."""
    try:
        return proc.environ().get("RSTREAM_CLUSTER_DIR", "").startswith(str(folder)) and proc.status() != "zombie"
    except Exception:  # gone, or not ours to read
        return False
