"""Every notebook in ``notebooks/`` runs clean in a real JupyterLab, in a real Chromium.

One JupyterLab (over a temporary copy of ``notebooks/``) and one headless Chromium for the module. Per
top-level notebook: JupyterLab's own "Restart Kernel and Run All Cells", then what a person would see is
checked cell by cell: every code cell ran, no error output or traceback, no stderr box, no widget error,
no blank output, no output wider than the notebook, every ``.rstream-live`` widget changed while
cells ran, and every table of a ``WatermarkMonitor`` shows whole (none of it cut off at the output area's
right edge, nor scrolled out of sight) in the 1280 px window, and whole or in a box that scrolls in a
900 px one. No check shows a hint (no answer was given: a hint opens only once one is judged). Nothing may
leave loopback, and the kernel's whole process tree must exit on shutdown.

Screenshots per cell (``<stem>/cell-NN.png``, NN = the cell's index in the notebook; a
``WatermarkMonitor`` also in the narrow window, ``cell-NN-narrow.png``) and
``results.json`` (duration and peak kernel-tree RSS per notebook) go to ``$RSTREAM_BROWSER_ARTIFACTS``,
else to a temporary folder whose path is printed. The module is skipped, with the reason, where
``/usr/bin/chromium`` or playwright is missing. A notebook takes one to a few minutes (Spark starts).

    .venv/bin/python -m pytest tests/browser -x -q -s
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from html import escape
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import require_browser
from tests.support.exercises import hints_shown, runs_shown_before_a_prediction
from tests.support.files import repository_files
from tests.support.notebook_runs import start_solutions
from tests.support.notebooks import problems
from tools.browser import (
    NOTEBOOK_TIMEOUT,
    NOTEBOOKS,
    JupyterLab,
    run_notebook,
)

require_browser()

# Top level only: the solutions in notebooks/solutions/ are run headless elsewhere. The repository's own
# notebooks: not a copy a learner saved beside them.
NAMES = [p.name for p in repository_files(NOTEBOOKS, "*.ipynb")]
TEST_TIMEOUT = int(NOTEBOOK_TIMEOUT) + 600  # the run's own ceiling, plus opening, screenshots, shutdown
#: Views whose tables must show whole (``run_notebook(fit_tables=...)``): the ``WatermarkMonitor``'s.
FIT_TABLES = ".rstream-view-watermarks"


@pytest.fixture(scope="module")
def lab(request: pytest.FixtureRequest) -> Iterator[JupyterLab]:
    solved = [item.callspec.id for item in request.session.items
              if getattr(item, "originalname", "") == "test_solution_runs_and_every_check_says_right"]
    start_solutions(solved)  # while the learner notebooks run here (``tests/support/notebook_runs.py``)
    server = JupyterLab().start()
    yield server
    killed = server.stop()
    assert not killed, "processes of the JupyterLab server outlived it (killed):\n" + "\n".join(killed)


@pytest.fixture(scope="module")
def results(artifacts: Path) -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = {}
    yield found
    print(f"\nbrowser results ({artifacts / 'results.json'}):\n{json.dumps(found, indent=1)}")


def record(results: dict[str, Any], artifacts: Path, name: str, summary: dict[str, Any]) -> None:
    """Add one run to ``results.json`` (rewritten after every test, so a crash keeps what ran)."""
    results[name] = summary
    (artifacts / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{name}: {summary['duration_s']} s, peak kernel-tree RSS {summary['peak_kernel_tree_rss_mb']} MB, "
          f"PSS {summary['peak_kernel_tree_pss_mb']} MB (after: {summary['residual_kernel_tree_pss_mb']} MB), "
          f"{len(summary['problems'])} problem(s)")


# --------------------------------------------------------------------------------------------
# the harness itself: each check must be able to fail

SELF_CHECK = [
    ("markdown", "# harness self-check"),
    ("clean", "print('hello')"),
    ("stderr", "import sys\nprint('something went wrong', file=sys.stderr)"),
    ("wide", "from IPython.display import HTML\nHTML('<div style=\"width:3000px;background:#fcc\">wide</div>')"),
    ("scrolls", "HTML('<div style=\"overflow-x:auto\"><div style=\"width:3000px\">scrolls inside</div></div>')"),
    ("traceback", "import traceback\ntry:\n    {}['x']\nexcept KeyError:\n    traceback.print_exc(file=sys.stdout)"),
    ("live", "import threading, time, ipywidgets as w\n"
             "ticking, frozen = w.HTML('tick 0'), w.HTML('never changes')\n"
             "ticking.add_class('rstream-live'); frozen.add_class('rstream-live')\n"
             "def tick():\n"
             "    for i in range(1, 60):\n"
             "        time.sleep(0.2)\n"
             "        ticking.value = f'tick {i}'\n"
             "threading.Thread(target=tick, daemon=True).start()\n"
             "w.VBox([ticking, frozen])"),
    ("wait", "time.sleep(8)  # the ticking widget ticks meanwhile"),
    ("progress", "w.IntProgress(value=3, max=10)"),
    ("no model", "from IPython.display import display\n"
                 "display({'application/vnd.jupyter.widget-view+json': "
                 "{'model_id': 'deadbeef', 'version_major': 2, 'version_minor': 0}}, raw=True)"),
    ("blank", "w.Box()"),
    ("offsite", "HTML('<img alt=\"offsite\" src=\"http://offsite.invalid/pixel.png\">')"),
    ("fits", "fits = w.HTML('<table><caption>fits</caption><tr><td>a</td><td>1</td></tr></table>')\n"
             "fits.add_class('fit-check')\nfits"),
    ("cut", "cut = w.HTML('<table><caption>cut</caption><tr><td style=\"white-space:nowrap\">' + 'x' * 600\n"
            "             + '</td></tr></table>', layout=w.Layout(overflow='auto'))  # scrolls: reachable\n"
            "cut.add_class('fit-check')\ncut"),
    ("hidden", "hidden = w.HTML('<table><caption>hidden</caption><tr><td style=\"white-space:nowrap\">' + 'y' * 600\n"
               "                + '</td></tr></table>', layout=w.Layout(overflow='hidden'))  # not even that\n"
               "hidden.add_class('fit-check')\nhidden"),
    # tqdm's notebook bar made without a total is a full 20 px stub that shows no progress (what every
    # ``run_until_idle()`` bar was until it set its total through ``rstream.progressbar.set_total``): reported;
    # not a bar whose total came later that way, nor one made with its total
    ("stub bar", "from tqdm.notebook import tqdm\nbar = tqdm(total=None, desc='unknown total')\nbar.update(3)\nbar.close()"),
    ("bar set later", "from rstream.progressbar import set_total\nbar = tqdm(total=None, desc='total set later')\n"
                      "set_total(bar, 10)\nbar.update(10)\nbar.close()"),
    ("bar known", "bar = tqdm(total=10, desc='known total')\nbar.update(4)\nbar.close()"),
    ("raises", "1 / 0"),
    ("skipped", "print('never runs')"),
]


@pytest.mark.timeout(600)
def test_harness_reports_what_is_wrong(lab: JupyterLab, page: Any, artifacts: Path) -> None:
    """A generated notebook (in the server's temporary root, never in ``notebooks/``) with one problem of
    each kind: the harness must report each, in its cell, and nothing for the clean cells."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(src) if kind == "markdown" else nbformat.v4.new_code_cell(src)
                for kind, src in SELF_CHECK]
    folder = lab.root / "harness-self-check"
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / "self_check.ipynb")
    cell = {kind: i for i, (kind, _) in enumerate(SELF_CHECK)}

    run = run_notebook(page, "harness-self-check/self_check.ipynb", lab, artifacts=artifacts / "harness-self-check",
                       fit_tables=".fit-check")
    problems = run.problems()
    report = run.report()

    def about(kind: str) -> list[str]:
        return [p for p in problems if p.startswith((f"cell {cell[kind]} ", f"cell {cell[kind]}:"))]

    assert run.finished, report
    for kind in ("clean", "scrolls", "progress", "wait", "fits", "bar set later", "bar known"):
        assert about(kind) == [], f"{kind}: a clean cell was reported\n{report}"
    assert [p for p in about("stub bar") if "a progress bar only 20 px wide" in p] == about("stub bar") != [], report
    assert any("stderr box: 'something went wrong'" in p for p in about("stderr")), report
    assert any("output wider than the notebook: <div" in p for p in about("wide")), report
    assert any("a Traceback is visible" in p for p in about("traceback")), report
    # JupyterLab shows "Loading widget..." until the widget manager has restored, then the error.
    assert any("Loading widget..." in p or "Error displaying widget" in p for p in about("no model")), report
    assert any("blank output" in p for p in about("blank")), report
    assert any("error output: ZeroDivisionError" in p for p in about("raises")), report
    assert not any("stderr box" in p for p in about("raises")), f"an error output counted twice\n{report}"
    assert any("did not run" in p for p in about("skipped")), report
    assert any("table 'cut'" in p and "cut off at the right edge" in p for p in about("cut")), report
    assert not any("not even by scrolling" in p for p in about("cut")), report
    assert any("table 'hidden'" in p and "not even by scrolling" in p for p in about("hidden")), report
    assert {(t["caption"], t["window"]) for t in run.tables} == {(c, w) for c in ("fits", "cut", "hidden")
                                                                  for w in ("normal", "narrow")}, run.tables
    live = [p for p in problems if "live widget" in p]
    assert len(live) == 1 and live[0].startswith(f"cell {cell['live']} "), f"only the frozen widget\n{report}"
    assert len(run.live) == 2 and max(len(t) for t in run.live.values()) >= 2, run.live
    assert run.peak_rss_mb > 10, run.peak_rss_mb
    assert any("non-loopback URL (blocked): http://offsite.invalid/pixel.png" in p for p in problems), report
    assert not run.remote_connections, report
    assert not run.leftover_processes, report


@pytest.mark.timeout(300)
def test_a_check_shows_the_hints_earned_and_no_other(lab: JupyterLab, page: Any, artifacts: Path) -> None:
    """A graded check as a learner sees it (``harness-hints/hints/cell-NN.png``): unanswered, no hint; after
    a first attempt, the nudge, open; after ``exercises.hint``, the nudge collapsed and the concept open.
    The page never holds the text of a level still locked."""
    import nbformat

    from rstream.widgets.graded import exercises_of

    name, spec = next((n, s) for n, s in exercises_of("00").items.items() if s.kind != "predict")
    cells = [f'from rstream.widgets.graded import exercises_of\n\nexercises = exercises_of("00")\n'
             f'exercises.check("{name}")',
             f'exercises.check("{name}", {{"mug": 3}})  # a count typed in: judged, not right',
             f'exercises.hint("{name}")']
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    folder = lab.root / "harness-hints"
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / "hints.ipynb")
    run = run_notebook(page, "harness-hints/hints.ipynb", lab, artifacts=artifacts / "harness-hints",
                       shutdown_kernel=False)
    try:
        assert run.passed, run.report()
        levels = [page.locator(f'[data-rstream-cell="{i}"] details[data-rstream-hint]') for i in range(3)]
        assert [lv.count() for lv in levels] == [0, 1, 2], run.report()
        assert levels[1].first.get_attribute("open") is not None  # the newest level shows open
        assert levels[2].nth(0).get_attribute("open") is None and levels[2].nth(1).get_attribute("open") is not None
        html = page.content()
        assert spec.hints.concept in html or escape(spec.hints.concept) in html  # the page as read holds levels
        assert spec.hints.call not in html and escape(spec.hints.call) not in html, "a locked level is in the page"
    finally:
        lab.shutdown_kernel("harness-hints/hints.ipynb")


# --------------------------------------------------------------------------------------------
# the notebooks


@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs_clean_in_jupyterlab(name: str, lab: JupyterLab, page: Any, artifacts: Path,
                                           results: dict[str, Any]) -> None:
    run = run_notebook(page, name, lab, artifacts=artifacts, fit_tables=FIT_TABLES)
    record(results, artifacts, name, run.summary())
    assert run.passed, run.report()
    if "WatermarkMonitor(" in (NOTEBOOKS / name).read_text():
        # its tables were measured in both windows (a view that lost its class would pass unmeasured)
        assert {t["window"] for t in run.tables} == {"normal", "narrow"}, run.tables
    # what the lesson says it shows, read from the notebook's outputs (its teaching cells assert nothing)
    assert problems(Path(name).stem, run.notebook, solved=False) == [], run.report()
    # untouched, no prediction was made: no "predict, then run" exercise may show its run
    assert runs_shown_before_a_prediction(run.notebook) == []
    # nor was any answer judged: no check may show a hint, not even collapsed (the server's copy of notebooks/
    # leaves rstream-data/ out, so the exercises' ledger starts empty)
    assert hints_shown(run.notebook, Path(name).stem) == [], run.report()
    # Run All left the kernel up (its release button is only drawn); the harness then clicked the button, as
    # a learner does when done, and release() ended the kernel through the server: nothing of it keeps memory
    assert run.released and "shuts down now" in run.released, f"{name}: release button said {run.released!r}"
    assert run.residual_pss_mb == 0, f"{name}: its kernel still holds {run.residual_pss_mb:.0f} MB after release()"
