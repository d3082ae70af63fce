"""The workshop's time, as the README and notebook 00 show it, is what ``tools/workshop_time.py`` computes
from the notebooks as they are and the run times it recorded (``tools/workshop_runs.json``), and the core
path fits the two hours. No Spark: the run times come from the recorded file, which must know every core
code cell of 00 to 06 as it is now (a changed cell has no recorded time: run the solutions again and
``python tools/workshop_time.py --executed D --record``)."""

from __future__ import annotations

import json

import nbformat
import pytest

from tools.workshop_time import (
    ABOUT,
    CORE_BUDGET_MINUTES,
    NOTEBOOKS,
    SHOWN_IN,
    _key,
    about,
    cells_by_part,
    opening,
    recorded,
    shown_tables,
    table,
    workshop,
)

pytestmark = pytest.mark.unit

CORE = sorted(p for p in NOTEBOOKS.glob("0[0-6]_*.ipynb"))


def _text(path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join(c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown")
    return path.read_text()


@pytest.mark.parametrize("path", SHOWN_IN, ids=lambda p: p.name)
def test_the_table_shown_is_what_workshop_time_computes(path) -> None:
    shown = shown_tables(_text(path))
    assert shown == [table(workshop(runs=recorded()))], "run `python tools/workshop_time.py --recorded --write`"


def test_the_core_path_fits_two_hours() -> None:
    times = workshop(runs=recorded())
    assert sum(t.core_minutes for t in times) <= CORE_BUDGET_MINUTES
    assert all(t.optional.total > 0 for t in times), "every notebook has optional parts"


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_every_core_cell_that_runs_has_a_recorded_time(path) -> None:
    """A core code cell changed since the run times were recorded would count 0 s: record them again."""
    runs = recorded().get(path.name)
    assert runs is not None, f"no run times recorded for {path.name}"
    notebook = nbformat.read(path, as_version=4)
    missing = [cell.source[:60] for cell, optional in cells_by_part(notebook)
               if cell.cell_type == "code" and not optional and "exercise" not in cell.metadata.get("tags", [])
               and _key(cell) not in runs.cells]
    assert missing == []


def test_a_heading_marked_optional_makes_its_section_optional_to_the_next_heading_of_its_level() -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title\n\nwords words"),
        nbformat.v4.new_markdown_cell("## Side trip *(optional)*\n\none two three"),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("### Deeper\n\nstill optional"),
        nbformat.v4.new_markdown_cell("## Back\n\n**Exercise 1 (predict, then run).** guess"),
        nbformat.v4.new_markdown_cell("### More exercises *(optional)*\n\n**Exercise 2 (debug this).** fix it"),
    ])
    parts = [optional for _cell, optional in cells_by_part(nb)]
    assert parts == [False, True, True, True, False, True]
    from tools.workshop_time import time_of

    t = time_of("nb", nb)
    assert (t.core.exercises, t.optional.exercises) == (5, 10)


def test_recording_one_notebook_keeps_the_others_times(tmp_path) -> None:
    from tools.workshop_time import record

    def executed(seconds: float) -> nbformat.NotebookNode:
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["execution"] = {"iopub.execute_input": "2026-11-29T10:00:00Z",
                                      "shell.execute_reply": f"2026-11-29T10:00:{seconds:02.0f}Z"}
        return nbformat.v4.new_notebook(cells=[cell])

    path = tmp_path / "runs.json"
    record({"a.ipynb": executed(3), "b.ipynb": executed(4)}, path, how="both at r1")
    record({"b.ipynb": executed(9)}, path, how="b again at r2")
    times = recorded(path)
    assert [list(times[name].cells.values()) for name in ("a.ipynb", "b.ipynb")] == [[3.0], [9.0]]
    assert json.loads(path.read_text())["how"] == "both at r1; b again at r2"


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("0[0-7]_*.ipynb")), ids=lambda p: p.name)
def test_each_notebook_says_the_time_the_table_gives_it(path) -> None:
    """The issue's teacher read "About 10 minutes" in 00 where the table said 20: the opening cell's
    sentence is what ``about`` makes of the table's row."""
    [t] = [t for t in workshop(runs=recorded()) if t.name == path.stem]
    said = ABOUT.findall(opening(nbformat.read(path, as_version=4)).source)
    assert said == [about(t)], "run `python tools/workshop_time.py --recorded --write`"
