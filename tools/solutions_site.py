"""The workshop's solutions with their outputs, as a small static site: something to read before (or
instead of) running a notebook, on a machine with no Spark or while Binder's kernel starts.

    python tools/solutions_site.py            # runs every solution (about 6 minutes), writes build/site/
    python tools/solutions_site.py --from D   # renders the executed notebooks already in folder D

``build/site/index.html`` lists the notebooks; ``build/site/<notebook>.html`` is each solution as it ran,
rendered by nbconvert's ``lab`` template with its images inline (no file beside it, nothing fetched but
the widgets' own script). Each learner notebook links to its page. The test suite builds the same site
from the solutions it runs (``tests/notebooks/test_notebooks.py``) and checks every page.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "notebooks" / "solutions"
SITE = ROOT / "build" / "site"


def title_of(notebook: Any) -> str:
    """The notebook's first heading, else its name."""
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            found = re.search(r"^#+\s+(.+)$", cell.source, re.M)
            if found:
                return found.group(1).strip()
    return "notebook"


#: Cells a reader of the site does not see: the notebook's hidden check of itself (``verify``), and what a
#: test run adds (the release button's click, the shortcuts it tries: ``tests/support``).
HIDDEN_TAGS = {"verify", "harness", "shortcut", "shortcut-try"}


def shown(notebook: Any) -> Any:
    """A copy of ``notebook`` without the cells tagged ``HIDDEN_TAGS``."""
    import copy

    out = copy.deepcopy(notebook)
    out.cells = [c for c in out.cells if not HIDDEN_TAGS & set(c.get("metadata", {}).get("tags", []))]
    for cell in out.cells:
        if cell.cell_type == "markdown":
            cell.source = re.sub(r'(<img[^>]*\bsrc=")([^":]+)(")', _inline, cell.source)
            cell.source = re.sub(r"(!\[[^\]]*\]\()([^):\s]+)(\))", _inline, cell.source)
    return out


def _inline(found: re.Match[str]) -> str:
    """A picture beside the solutions (an HTML ``<img src>`` or markdown's ``![](...)``, whose path
    nbconvert does not find from the solutions' folder), as a data URI."""
    import base64
    import mimetypes

    path = (SOLUTIONS / found.group(2)).resolve()
    kind = mimetypes.guess_type(path.name)[0]
    if not path.is_file() or kind is None:
        return found.group(0)
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f"{found.group(1)}data:{kind};base64,{data}{found.group(3)}"


def render(notebook: Any) -> str:
    """One executed notebook as a standalone HTML page (nbconvert's ``lab`` template, images inline),
    without the cells tagged ``HIDDEN_TAGS``."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter(template_name="lab", embed_images=True)
    body, _resources = exporter.from_notebook_node(  # pictures found from the solutions' folder, as they ran
        shown(notebook), resources={"metadata": {"path": str(SOLUTIONS)}})
    return str(body)


def write_site(executed: Mapping[str, Any], out: Path = SITE) -> list[Path]:
    """Write ``out/<stem>.html`` per executed notebook (by file name) and ``out/index.html``; the pages
    written, the index last."""
    out.mkdir(parents=True, exist_ok=True)
    pages, rows = [], []
    for name in sorted(executed):
        page = out / f"{Path(name).stem}.html"
        page.write_text(render(executed[name]), encoding="utf-8")
        pages.append(page)
        rows.append(f'<li><a href="{html.escape(page.name)}">{html.escape(Path(name).stem)}</a>: '
                    f"{html.escape(title_of(executed[name]))}</li>")
    index = out / "index.html"
    index.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>rstream workshop: the solutions, as they ran"
        "</title></head><body style='font-family:sans-serif;max-width:50em;margin:2em auto'>"
        "<h1>rstream workshop: the solutions, as they ran</h1><p>Each notebook with its exercises filled in, "
        "run top to bottom, with its outputs. The live widgets show their last state as text; open the "
        "notebook in JupyterLab to see them move.</p><ol>" + "".join(rows) + "</ol></body></html>",
        encoding="utf-8")
    return [*pages, index]


def _execute(path: Path) -> Any:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, startup_timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--from", dest="source", type=Path, help="a folder of executed notebooks to render")
    parser.add_argument("--out", type=Path, default=SITE)
    args = parser.parse_args(argv)
    import nbformat

    if args.source:
        executed = {p.name: nbformat.read(p, as_version=4) for p in sorted(args.source.glob("*.ipynb"))}
    else:
        executed = {}
        for path in sorted(SOLUTIONS.glob("*.ipynb")):
            print(f"running {path.name} ...", flush=True)
            executed[path.name] = _execute(path)
    if not executed:
        print("no notebooks to render", file=sys.stderr)
        return 1
    pages = write_site(executed, args.out)
    print(f"wrote {len(pages)} pages: {pages[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
