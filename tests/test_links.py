"""Every link in the README and the notebooks works in any clone: relative links point at files of the
repository, and nothing points outside it (``../shared`` is not in a learner's clone or on Binder). They
read the repository's own notebooks only (``tests/support/files.py``), not the copies a learner's session
leaves beside them (JupyterLab's checkpoints, ``rstream-data/``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.files import repository_files

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")


def documents() -> list[tuple[Path, str]]:
    found = [(ROOT / "README.md", (ROOT / "README.md").read_text())]
    for path in repository_files(ROOT / "notebooks", "*.ipynb", recursive=True):
        cells = json.loads(path.read_text())["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        found.append((path, text))
    return found


def test_relative_links_resolve_inside_the_repository() -> None:
    broken = []
    for path, text in documents():
        for target in (a or b for a, b in LINK.findall(text)):
            if target.startswith(("http://", "https://", "mailto:", "#")):
                continue
            resolved = (path.parent / target.split("#", 1)[0]).resolve()
            if not resolved.exists() or ROOT.resolve() not in resolved.parents and resolved != ROOT.resolve():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert broken == []


def test_in_page_anchors_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    headings = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", readme, re.M)}
    anchors = [a[1:] for a, _ in LINK.findall(readme) if a.startswith("#")]
    assert anchors and all(a in headings for a in anchors), (anchors, headings)


def test_the_notebooks_figures_are_up_to_date() -> None:
    """``notebooks/figures``: each topology is what ``notebooks/make_figures.py`` draws from its job now
    (an rstream change that redraws it must redraw the figure), and the event-time chart a run made is there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "notebooks" / "make_figures.py")
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    stale = [name for name, svg in maker.figures().items() if (maker.FIGURES / name).read_text() != svg]
    assert not stale, f"run `python notebooks/make_figures.py`: {stale} differ from what rstream draws"
    png = (maker.FIGURES / maker.EVENT_TIME).read_bytes()
    assert png.startswith(b"\x89PNG"), "run `python notebooks/make_figures.py --run` for the event-time chart"


def test_every_notebook_cell_has_its_own_id() -> None:
    """nbformat 4.5 cells carry an id (JupyterLab keeps them; nbformat warns today and will refuse later)."""
    missing = []
    for path in repository_files(ROOT / "notebooks", "*.ipynb", recursive=True):
        ids = [c.get("id") for c in json.loads(path.read_text())["cells"]]
        if None in ids or len(set(ids)) != len(ids):
            missing.append(path.name)
    assert missing == []
