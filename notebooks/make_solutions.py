"""Write ``notebooks/solutions/<name>.ipynb``: every workshop notebook with its exercise cells filled in.

An exercise cell is tagged ``exercise`` and keeps its solution in ``metadata.rstream.solution``; the
solution notebook is the notebook with those sources swapped in, so the two never drift apart. Run it
after editing an exercise (the tests check the solutions are up to date, and run them):

    python notebooks/make_solutions.py
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOLUTIONS = HERE / "solutions"


#: What a session adds to a notebook it saves (JupyterLab saves every two minutes): outputs, execution
#: counts, the kernel's full ``language_info`` and the widgets' state. A solution holds none of it, so a
#: notebook run and saved makes the same solution as the notebook committed.
SESSION_CELL_KEYS = ("execution", "scrolled", "collapsed", "trusted")


def without_session(notebook: dict) -> dict:
    """``notebook`` as committed: no outputs, no execution counts, none of a session's metadata."""
    clean = copy.deepcopy(notebook)
    metadata = clean.get("metadata", {})
    metadata.pop("widgets", None)
    if "language_info" in metadata:
        metadata["language_info"] = {"name": metadata["language_info"].get("name", "python")}
    for cell in clean["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        for key in SESSION_CELL_KEYS:
            cell.get("metadata", {}).pop(key, None)
    return clean


def solution_of(notebook: dict) -> dict:
    """The notebook with each exercise cell's source replaced by its solution (and its pictures,
    ``figures/...``, and its links to the README, ``../README.md``, found from the solutions' folder),
    without what a session saved in it."""
    solved = without_session(notebook)
    for cell in solved["cells"]:
        if "exercise" in cell.get("metadata", {}).get("tags", []):
            cell["source"] = cell["metadata"]["rstream"]["solution"]
        elif cell["cell_type"] == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            moved = (text.replace('src="figures/', 'src="../figures/').replace("](figures/", "](../figures/")
                     .replace("](../README.md", "](../../README.md"))
            if moved != text:
                cell["source"] = moved.splitlines(keepends=True) if isinstance(cell["source"], list) else moved
    return solved


def render(notebook: dict) -> str:
    """The notebook as nbformat writes it (so a rewrite changes no byte)."""
    return json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def expected(paths: list[Path] | None = None) -> dict[str, str]:
    """Per solution file name, the text it must hold: of ``paths`` (default: every notebook here)."""
    out = {}
    for path in sorted(HERE.glob("*.ipynb")) if paths is None else paths:
        notebook = json.loads(path.read_text())
        if any("exercise" in c.get("metadata", {}).get("tags", []) for c in notebook["cells"]):
            out[path.name] = render(solution_of(notebook))
    return out


def main() -> int:
    SOLUTIONS.mkdir(exist_ok=True)
    for name, text in expected().items():
        (SOLUTIONS / name).write_text(text)
        print(f"wrote {SOLUTIONS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
