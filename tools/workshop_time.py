"""How long the workshop takes a learner: per notebook, its core path and its optional sections.

    python tools/workshop_time.py               # reading and exercises only (no run): a lower bound
    python tools/workshop_time.py --executed D  # with the run times of the executed notebooks in folder D
    python tools/workshop_time.py --executed D --record  # ... and keep those run times in RECORDED
    python tools/workshop_time.py --recorded    # with the run times kept in RECORDED (what the tables show)
    python tools/workshop_time.py --recorded --write  # ... written into the README and notebook 00

The estimate, stated so a teacher can check it:

* **reading**: the words of the markdown cells at ``WORDS_PER_MINUTE`` (technical prose read with care,
  the code it talks about in view), plus ``SECONDS_PER_CODE_CELL`` for each code cell (read it, run it,
  look at what it shows);
* **running**: each code cell's own run time, from an executed notebook (nbclient's timing metadata, as
  the test suite's runs of the solutions record it), the time a learner waits; ``--record`` keeps them in
  ``RECORDED`` (per notebook, by a hash of each cell's source), so the tables can be checked without a run;
* **exercises**: ``EXERCISE_MINUTES`` per exercise by kind (predict, debug, build), the time to think,
  try and check, once the notebook before it was read.

A section whose heading says *(optional)* is optional to its next heading of the same or a higher level;
the cells the learner never sees (the hidden ``verify`` cell) count for nothing. The core path is every
notebook's core: ``tests/test_workshop_time.py`` keeps it within ``CORE_BUDGET_MINUTES`` and the
time table in the README and in ``00_start_here`` equal to ``table(workshop(recorded()))``;
``tests/test_core_path.py`` keeps every core cell free of names only an optional cell defines.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
RECORDED = ROOT / "tools" / "workshop_runs.json"
#: Where the README and notebook 00 show the table (between these two lines, written by ``--write``).
SHOWN_IN = (ROOT / "README.md", NOTEBOOKS / "00_start_here.ipynb")
TABLE_START = "<!-- workshop-time: tools/workshop_time.py --recorded -->"
TABLE_END = "<!-- /workshop-time -->"
_SHOWN = re.compile(re.escape(TABLE_START) + r"\n(.*?)\n" + re.escape(TABLE_END), re.S)
#: The sentence of a notebook's opening cell that says how long it takes: ``write_tables`` fills it in
#: (``about``), so that it says what the table says.
ABOUT = re.compile(r"About \d+ minutes(?: for the core, \d+ more for the sections marked \*\(optional\)\*)?")
WORDS_PER_MINUTE = 180
SECONDS_PER_CODE_CELL = 20
EXERCISE_MINUTES = {"predict": 5, "debug": 10, "build": 10}
CORE_BUDGET_MINUTES = 120

_HEADING = re.compile(r"^(#{1,6})\s+(.+)$", re.M)
_EXERCISE = re.compile(r"\*\*Exercise (\d+) \(([^)]*)\)")


@dataclass
class Part:
    """Minutes of one part of a notebook (its core, or its optional sections)."""

    reading: float = 0.0
    running: float = 0.0
    exercises: float = 0.0

    @property
    def total(self) -> float:
        return self.reading + self.running + self.exercises


@dataclass
class NotebookTime:
    name: str
    core: Part
    optional: Part
    timed: bool  # run times known (an executed notebook was given)

    @property
    def core_minutes(self) -> int:
        """The core, rounded up to 5 minutes (what the notebooks' table says)."""
        return 5 * math.ceil(self.core.total / 5)


def _hidden(cell: Any) -> bool:
    meta = cell.get("metadata", {})
    return "verify" in meta.get("tags", []) or bool(meta.get("jupyter", {}).get("source_hidden"))


def optional_notebook(notebook: Any) -> bool:
    """Whether the notebook says, in its opening cell, that it is optional as a whole (07 does)."""
    first = opening(notebook)
    text = "" if first is None else first["source"] if isinstance(first["source"], str) else "".join(first["source"])
    return "an optional notebook" in text.lower()


def cells_by_part(notebook: Any) -> Iterator[tuple[Any, bool]]:
    """Each cell a learner sees, with whether it is in an optional section (every cell of an optional
    notebook is)."""
    optional_level: int | None = 0 if optional_notebook(notebook) else None
    for cell in notebook["cells"]:
        if _hidden(cell):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            for found in _HEADING.finditer(source):
                level = len(found.group(1))
                if optional_level and level <= optional_level:  # 0: the whole notebook is optional
                    optional_level = None
                if optional_level is None and "(optional)" in found.group(2):
                    optional_level = level
        yield cell, optional_level is not None


def exercise_kind(text: str) -> str:
    """``predict``, ``debug`` or ``build`` from an exercise's title, e.g. "(debug this)"; ``build`` for a
    title that names none (an exercise of its own kind: as long as a build)."""
    return next((kind for kind in EXERCISE_MINUTES if kind in text.lower()), "build")


def run_seconds(cell: Any) -> float:
    """A code cell's run time from nbclient's timing metadata (0 if it has none)."""
    timing = cell.get("metadata", {}).get("execution", {})
    began, ended = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not began or not ended:
        return 0.0
    return max(0.0, (_when(ended) - _when(began)).total_seconds())


def _when(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class RunTimes:
    """A notebook's run times: each code cell's seconds by the hash of its source (``_key``), and the
    exercise cells' seconds in their order (a solution fills them in, so their source differs)."""

    cells: dict[str, float]
    exercises: list[float]

    @classmethod
    def of(cls, executed: Any) -> RunTimes:
        cells: dict[str, float] = {}
        exercises = []
        for cell in executed["cells"]:
            if cell["cell_type"] != "code":
                continue
            if "exercise" in cell.get("metadata", {}).get("tags", []):
                exercises.append(round(run_seconds(cell), 1))
            else:
                cells.setdefault(_key(cell), round(run_seconds(cell), 1))
        return cls(cells, exercises)


def time_of(name: str, notebook: Any, executed: Any | None = None, runs: RunTimes | None = None) -> NotebookTime:
    """The time ``notebook`` takes, run times from ``executed`` (the same notebook or its solution, run) or
    from ``runs`` (recorded)."""
    core, optional = Part(), Part()
    if executed is not None:
        runs = RunTimes.of(executed)
    exercise_cells = 0
    for cell, is_optional in cells_by_part(notebook):
        part = optional if is_optional else core
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            part.reading += len(re.findall(r"\w+", source)) / WORDS_PER_MINUTE
            for found in _EXERCISE.finditer(source):
                part.exercises += EXERCISE_MINUTES[exercise_kind(found.group(2))]
        elif cell["cell_type"] == "code":
            part.reading += SECONDS_PER_CODE_CELL / 60
            seconds = 0.0
            if runs is not None and "exercise" in cell.get("metadata", {}).get("tags", []):
                seconds = runs.exercises[exercise_cells] if exercise_cells < len(runs.exercises) else 0.0
                exercise_cells += 1
            elif runs is not None:
                seconds = runs.cells.get(_key(cell), 0.0)
            part.running += seconds / 60
    return NotebookTime(name, core, optional, runs is not None)


def _key(cell: Any) -> str:
    """A code cell's source, hashed (so a recorded file stays small and a changed cell has no time)."""
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    return hashlib.sha1(source.encode()).hexdigest()[:12]


def recorded(path: Path = RECORDED) -> dict[str, RunTimes]:
    """The run times ``--record`` kept, by notebook file name (empty if none were kept)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {name: RunTimes(runs["cells"], runs["exercises"]) for name, runs in data["notebooks"].items()}


def record(executed: Mapping[str, Any], path: Path = RECORDED, how: str = "") -> None:
    """Keep the run times of ``executed`` (by notebook file name) in ``path``, with how they were made; the
    notebooks not in ``executed`` keep the times recorded before (so one notebook can be timed again alone),
    and ``how`` is added to what the file said."""
    data = json.loads(path.read_text()) if path.exists() else {"how": "", "notebooks": {}}
    data["notebooks"].update({name: dataclasses.asdict(RunTimes.of(nb)) for name, nb in executed.items()})
    data["how"] = "; ".join(filter(None, [data.get("how", ""), how]))
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def workshop(executed: Mapping[str, Any] | None = None, runs: Mapping[str, RunTimes] | None = None) -> list[NotebookTime]:
    """Every notebook's time, with run times from ``executed`` (by file name; the solutions run) or ``runs``
    (``recorded()``) where given."""
    import nbformat

    out = []
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        out.append(time_of(path.stem, notebook, (executed or {}).get(path.name), (runs or {}).get(path.name)))
    return out


def table(times: list[NotebookTime]) -> str:
    rows = ["| notebook | core: reading | running | exercises | **core** | optional |", "|---|---|---|---|---|---|"]
    for t in times:
        rows.append(f"| {t.name} | {t.core.reading:.0f} | {t.core.running:.1f} | {t.core.exercises:.0f} | "
                    f"**{t.core_minutes}** | {t.optional.total:.0f} |")
    core = sum(t.core_minutes for t in times)
    rows.append(f"| all | | | | **{core}** | {sum(t.optional.total for t in times):.0f} |")
    return "\n".join(rows)


def about(t: NotebookTime) -> str:
    """What a notebook's opening cell says of its time: its core as the table shows it, and the rest (a
    notebook optional as a whole: all of it)."""
    if t.core.total == 0:
        return f"About {t.optional.total:.0f} minutes"
    return f"About {t.core_minutes} minutes for the core, {t.optional.total:.0f} more for the sections marked *(optional)*"


def opening(notebook: Any) -> Any:
    """A notebook's opening markdown cell (where it says what it teaches and how long it takes), or None."""
    return next((c for c in notebook["cells"] if c["cell_type"] == "markdown"), None)


def shown_tables(text: str) -> list[str]:
    """The time tables a text shows between ``TABLE_START`` and ``TABLE_END``."""
    return _SHOWN.findall(text)


def _fill(text: str, shown: str) -> str:
    return _SHOWN.sub(lambda _m: f"{TABLE_START}\n{shown}\n{TABLE_END}", text)


def write_tables() -> str:
    """Write the table of the recorded run times into the README and notebook 00, and each notebook's time
    into its opening cell (``about``), again until it no longer changes (notebook 00's own reading time
    counts the table's words), and return the table."""
    import nbformat

    for _ in range(5):
        shown = table(workshop(runs=recorded()))
        readme = SHOWN_IN[0]
        readme.write_text(_fill(readme.read_text(), shown))
        notebook = nbformat.read(SHOWN_IN[1], as_version=4)
        for cell in notebook.cells:
            if cell.cell_type == "markdown" and TABLE_START in cell.source:
                cell.source = _fill(cell.source, shown)
        nbformat.write(notebook, SHOWN_IN[1])
        for t in workshop(runs=recorded()):  # each notebook's own sentence
            path = NOTEBOOKS / f"{t.name}.ipynb"
            notebook = nbformat.read(path, as_version=4)
            cell = opening(notebook)
            if cell is None or len(ABOUT.findall(cell.source)) != 1:
                raise RuntimeError(f"{path.name}: its opening cell should say 'About N minutes ...' once")
            said = ABOUT.sub(about(t), cell.source)
            if said != cell.source:
                cell.source = said
                nbformat.write(notebook, path)
        if table(workshop(runs=recorded())) == shown:
            return shown
    raise RuntimeError("the time table did not settle: notebook 00's time changes with the table it shows")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executed", type=Path, help="a folder of executed notebooks (their run times)")
    parser.add_argument("--record", action="store_true", help=f"keep the executed run times in {RECORDED.name}")
    parser.add_argument("--recorded", action="store_true", help=f"use the run times kept in {RECORDED.name}")
    parser.add_argument("--write", action="store_true", help="write the recorded table into the README and 00")
    parser.add_argument("--how", default="", help="with --record: the command and commit that ran them")
    args = parser.parse_args(argv)
    import nbformat

    executed = None
    if args.executed:
        executed = {p.name.replace("solution-", ""): nbformat.read(p, as_version=4)
                    for p in sorted(args.executed.glob("*.ipynb"))}
        if args.record:
            record(executed, how=args.how)
    if args.write:
        print(write_tables())
        return 0
    print(table(workshop(executed, recorded() if args.recorded else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
