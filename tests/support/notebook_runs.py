"""Running a workshop notebook headless in a real kernel (``nbclient``), and the solutions run in the
background while the browser suite runs the learner notebooks.

The kernel is this interpreter (``sys.executable -m ipykernel_launcher``), named by a kernelspec written
into the run's temporary folder and found through a ``KernelSpecManager`` that looks only there. So a run
needs no installed kernelspec and cannot pick up another Python's ``python3`` kernel from the user's or
the system's Jupyter folders: it works in any venv where ``pip install -e .[dev]`` was done.

Why in the background: a notebook run keeps this 2-core machine less than half busy (it waits on Spark's
triggers, its JVMs' start, the broker), and every notebook runs twice, the learner's in a real browser
(``tests/browser``) and its solution here. ``start_solutions`` runs the solutions one after another in a
thread while the browser suite runs, and each solution test then takes its run's outcome
(``solution_run``); the tests judge exactly what they judged when they ran the solution themselves.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

from tests.support.exercises import SHORTCUTS, with_shortcuts
from tests.support.notebooks import CLEAN_ENV

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
KERNEL = "rstream-test-python"
CELL_TIMEOUT = 300  # seconds for one cell; the first Spark cell starts a JVM

#: What a learner does last, by hand, once the exercises are done: click the release button that the
#: notebook's last cell only draws (``rstream.widgets.release_button``). Here no one can click, so one more
#: cell does what the click does (it stops what the button names: a job, a cluster, RocketMQ; then Spark).
CLICK_RELEASE = "from rstream.widgets import ReleaseButton\n\nprint(ReleaseButton.shown.click())"


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
        client.execute(env=CLEAN_ENV, cleanup_kc=True)  # a kernel manager passed in is kept alive otherwise
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


def run_solution(path: Path, tmp_path: Path) -> Any:
    """Run the solution ``path`` in a new working folder; in a notebook with graded exercises, with its
    shortcuts (``tests/support/exercises.py``) spliced in after each check."""
    name = path.stem
    if name not in SHORTCUTS:
        return execute(path, tmp_path)
    tmp_path.mkdir(parents=True, exist_ok=True)
    spliced = tmp_path / path.name
    nbformat.write(with_shortcuts(nbformat.read(path, as_version=4), name), spliced)
    return execute_as(spliced, working_folder(tmp_path), tmp_path / "run")


_RUNS: dict[str, Future[Any]] = {}
#: The solutions that ran in this session, executed, by file name (``solution_run``): the solutions' site
#: (``tools/solutions_site.py``) is built from them.
EXECUTED: dict[str, Any] = {}
_LOCK = threading.Lock()


def start_solutions(names: list[str]) -> None:
    """Start running the solutions ``names`` (file names in ``notebooks/solutions``), one after another, in
    a thread of this process (once a session; none if ``names`` is empty)."""
    with _LOCK:
        if _RUNS or not names:
            return
        paths = [SOLUTIONS / name for name in sorted(names)]
        _RUNS.update({p.name: Future() for p in paths})
    threading.Thread(target=_run_all, args=(paths,), name="solutions", daemon=True).start()


def _run_all(paths: list[Path]) -> None:
    for path in paths:
        future = _RUNS[path.name]
        if not future.set_running_or_notify_cancel():
            continue
        folder = Path(tempfile.mkdtemp(prefix=f"rstream-solution-{path.stem}-"))
        try:
            future.set_result(run_solution(path, folder))
        except BaseException as exc:  # the test of this solution raises it
            exc.add_note(f"the executed notebook is kept in {folder}")
            future.set_exception(exc)
            continue
        shutil.rmtree(folder, ignore_errors=True)


def solution_run(path: Path, tmp_path: Path) -> Any:
    """The executed solution ``path``: the background run's (``start_solutions``) if one was started,
    else run here and now."""
    future = _RUNS.get(path.name)
    nb = run_solution(path, tmp_path) if future is None else future.result()
    EXECUTED[path.name] = nb
    return nb
