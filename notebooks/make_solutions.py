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


def solution_of(notebook: dict) -> dict:
    """The notebook with each exercise cell's source replaced by its solution (and its pictures,
    ``figures/...``, and its links to the README, ``../README.md``, found from the solutions' folder)."""
    solved = copy.deepcopy(notebook)
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


def expected() -> dict[str, str]:
    """Per solution file name, the text it must hold."""
    out = {}
    for path in sorted(HERE.glob("*.ipynb")):
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
