"""Every workshop notebook and every solution runs top to bottom, and shows what the lesson says.

The learner notebooks run in a real JupyterLab in ``tests/browser`` where Chromium is present; here they run
headless only where it is not (so no notebook runs twice). The solutions (``notebooks/solutions``: each
notebook with its exercises filled in) always run here, and every exercise check in them must say "right".
Both read the facts each notebook's hidden ``verify`` cell prints (``tests/support/notebooks.py``).

How a notebook runs, and why the solutions run in the background while the browser suite runs, is in
``tests/support/notebook_runs.py``.

Each run's kernel works in a new temporary folder, so a notebook's ``rstream-data/`` (its broker, its
jobs, and the ledger of its graded exercises) starts empty: neither a learner's session in ``notebooks/``
nor an earlier run of the tests can change what a run shows. The notebooks are the repository's own
(``tests/support/files.py``): a copy JupyterLab or a learner left beside them is not one.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.exercises import SHORTCUTS, hints_shown, runs_shown_before_a_prediction, shortcut_verdicts
from tests.support.files import repository_files
from tests.support.notebook_runs import (
    CELL_TIMEOUT,
    EXECUTED,
    NOTEBOOKS,
    SOLUTIONS,
    execute,
    kernel_manager,
    solution_run,
    working_folder,
)
from tests.support.notebooks import CLEAN_ENV, checks_of, problems


def notebooks() -> list[Path]:
    """The workshop's notebooks (the repository's: not a copy a learner saved beside them)."""
    found = repository_files(NOTEBOOKS, "*.ipynb")
    assert found, f"no notebooks in {NOTEBOOKS}"
    return found


def solutions() -> list[Path]:
    return repository_files(SOLUTIONS, "*.ipynb")


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
    nb = solution_run(path, tmp_path)  # run in the background while the browser suite ran, if it did
    assert problems(name, nb, solved=True) == []
    if name in SHORTCUTS:
        verdicts = shortcut_verdicts(nb)
        assert len(verdicts) == sum(len(v) for v in SHORTCUTS[name].values())
        passed = {what: verdict for what, verdict in verdicts.items() if verdict != "not quite"}
        assert not passed, f"shortcuts that were not refused: {passed}"


def test_the_solutions_site_shows_every_solution_that_ran_with_its_outputs() -> None:
    """The static site of the solutions (``tools/solutions_site.py``), built into ``build/site`` from the
    solutions this session ran: a page per solution showing its outputs (every check "right", the
    pictures inline), without the hidden cells or the shortcuts the tests spliced in, and an index."""
    import re

    from tools.solutions_site import SITE, write_site

    ran = {name: nb for name, nb in EXECUTED.items() if problems(Path(name).stem, nb, solved=True) == []}
    if not ran:
        pytest.skip("no solution ran clean in this session: the site is built from those that did")
    pages = write_site(ran, SITE)
    index = pages[-1].read_text()
    for name, nb in ran.items():
        page = SITE / f"{Path(name).stem}.html"
        assert f'href="{page.name}"' in index
        text = page.read_text().split("<body", 1)[1]  # the page's content, not its style sheet
        verdicts = checks_of(nb)
        assert verdicts and all(f"{exercise}: right" in text for exercise in verdicts), (name, verdicts)
        assert "Traceback" not in text and 'data-mime-type="application/vnd.jupyter.stderr"' not in text
        assert "shortcut" not in text and "ReleaseButton.shown.click" not in text
        sources = re.findall(r'<img[^>]*src="([^"]+)"', text)
        assert all(src.startswith("data:") for src in sources), [src[:60] for src in sources]
        outputs = text.count('class="jp-OutputArea-child')
        shown = sum(len(c.get("outputs", [])) for c in nb.cells if c.cell_type == "code"
                    and not {"verify", "harness", "shortcut", "shortcut-try"} & set(c.metadata.get("tags", [])))
        assert outputs == shown, (name, outputs, shown)  # every output the reader would have seen


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
    with client.setup_kernel(env=CLEAN_ENV, cleanup_kc=True):
        for index in range(streaming + 1):
            client.execute_cell(nb.cells[index], index)
        kernel = psutil.Process(km.provisioner.pid)  # type: ignore[union-attr]
        orphans = [p for p in psutil.process_iter() if _cluster_process(p, folder)]
        assert orphans, "the cluster should be running before the kernel is lost"
        kernel.kill()
        kernel.wait(timeout=30)
    assert any(p.is_running() for p in orphans), "nothing outlived the kernel: the test would prove nothing"

    # from the top again, to the same streaming cell, then what its release button does to the job and the
    # cluster (the rest of the notebook runs in the browser suite)
    again = nb.cells[:streaming + 1] + [nbformat.v4.new_code_cell(RELEASE_JOB_AND_CLUSTER)]
    km = kernel_manager(tmp_path / "second")
    client = NotebookClient(nbformat.v4.new_notebook(cells=again), km=km, timeout=CELL_TIMEOUT,
                            startup_timeout=120, resources={"metadata": {"path": str(folder)}})
    with client.setup_kernel(env=CLEAN_ENV, cleanup_kc=True):
        for index, cell in enumerate(again):
            client.execute_cell(cell, index)  # raises on an error
    stderr = [o["text"] for c in again for o in c.get("outputs", []) if o.get("name") == "stderr"]
    assert not stderr, f"stderr reached a cell on the second run: {stderr}"
    released = "".join(o.get("text", "") for o in again[-1].get("outputs", []))
    assert "Spark stopped" in released, released
    left = [p for p in psutil.process_iter() if _cluster_process(p, folder)]
    assert not left, f"processes of the notebook's cluster are still running: {left}"


RELEASE_JOB_AND_CLUSTER = "print(release_button(job, cluster).click())"


def _cluster_process(proc: Any, folder: Path) -> bool:
    """Whether ``proc`` belongs to a LocalCluster working under ``folder`` (its marker variable)."""
    try:
        return proc.environ().get("RSTREAM_CLUSTER_DIR", "").startswith(str(folder)) and proc.status() != "zombie"
    except Exception:  # gone, or not ours to read
        return False


def test_a_notebook_run_leaves_no_kernel_behind(tmp_path: Path) -> None:
    """``execute`` shuts its kernel down (nbclient keeps a kernel it did not start alive until the test
    session ends: with a notebook's Spark JVM in it, a leaked kernel costs every later test)."""
    import psutil

    path = tmp_path / "pid.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import os\nprint(os.getpid())")]), path)
    pid = int(execute(path, tmp_path / "run").cells[0].outputs[0]["text"])
    try:
        psutil.Process(pid).wait(timeout=10)
    except psutil.NoSuchProcess:
        pass  # gone already
    except psutil.TimeoutExpired:
        pytest.fail(f"the kernel {pid} still runs 10 s after its notebook ran")
