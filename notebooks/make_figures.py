"""Write ``notebooks/figures/``: the pictures the notebooks show in their text, so a reader sees them
before running anything (on GitHub, on Binder before the kernel starts, in a notebook viewer).

* ``00-topology.svg``: notebook 00's job drawn by rstream itself (``Topology.real_graph``, the
  graphviz ``dot`` binary), from the same DSL calls as the notebook's cell, laid out for a page: top to
  bottom, long topic names wrapped at their hyphens, and its natural size kept (``width``/``height`` in
  the SVG), so the notebook shows it at that size, no wider than GitHub's column (``PAGE_WIDTH_PX``), with
  every label at least ``MIN_TEXT_PX`` high. No Spark is needed; the tests check that these are up to date
  (``figures()`` is what they compare) and legible where they are shown.
* ``series-map.svg``: the teacher's kit's concept map (``TEACHING.md``), from ``series-map.dot``.
* ``02-event-time.png``: the event-time chart of notebook 02's first job, taken from a real run of the
  notebook (``--run``: it executes the notebook headless, about a minute, and keeps the PNG the cell
  ``chart.snapshot()`` shows). A run's processing times differ a little each time, so the tests only
  check that the file is there.

    python notebooks/make_figures.py          # the topologies
    python notebooks/make_figures.py --run    # also the event-time chart
"""

from __future__ import annotations

import base64
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "figures"
EVENT_TIME = "02-event-time.png"
#: The narrowest column a notebook's text is read in: GitHub's (JupyterLab's is about 900 to 1000 px).
PAGE_WIDTH_PX = 830
#: The smallest a figure's text may be where it is shown, in CSS pixels.
MIN_TEXT_PX = 11
#: A label line longer than this many characters is wrapped at a hyphen (topic names are long).
WRAP_CHARS = 24


def _wrapped(line: str) -> list[str]:
    """``line`` cut after hyphens into pieces of at most ``WRAP_CHARS`` characters, where it can be."""
    pieces, current = [], ""
    for part in re.split(r"(?<=-)", line):
        if current and len(current) + len(part) > WRAP_CHARS:
            pieces.append(current)
            current = part
        else:
            current += part
    return [*pieces, current]


def page_svg(graph: Any) -> str:
    """``graph`` (a ``graphviz.Digraph`` of rstream's) drawn for a page (``page_graph``), with the SVG's
    natural size kept, so that an ``<img>`` of that width shows it one to one."""
    svg = str(page_graph(graph).pipe(format="svg", encoding="utf-8"))
    return svg[svg.find("<svg"):]


def page_graph(graph: Any) -> Any:
    """A copy of ``graph`` with its labels' long lines wrapped and its ranks a little closer."""
    graph = graph.copy()
    graph.graph_attr.update(ranksep="0.22", nodesep="0.3")
    graph.node_attr.update(margin="0.11,0.05")

    def wrap(found: re.Match[str]) -> str:
        return 'label="' + "\n".join(p for line in found.group(1).split("\n") for p in _wrapped(line)) + '"'

    graph.body = [re.sub(r'label="([^"]*)"', wrap, line) for line in graph.body]
    return graph


def _review_words() -> str:
    from rstream import StreamBuilder, TextDeserializer, TextSerializer

    builder = StreamBuilder("review-words")
    (builder.source("reviews", TextDeserializer())
     .flat_map(str.split)
     .key_by(lambda word: word)
     .count()
     .to_rstream()
     .sink("review-word-counts", TextSerializer(with_key=True)))
    # as RIP-58 draws it (one shuffle record per word), top to bottom to fit a page
    return page_svg(builder.build(optimize=()).real_graph(rankdir="TB"))


def _series_map() -> str:
    """The teacher's kit's concept map (``notebooks/series-map.dot``), drawn by graphviz's ``dot``."""
    import subprocess

    drawn = subprocess.run(["dot", "-Tsvg", str(HERE / "series-map.dot")], capture_output=True, text=True, check=True)
    return drawn.stdout


#: Per figure file, what draws it (each the job of the notebook's own cell, the same DSL calls; the
#: teacher's kit's concept map from its DOT file).
TOPOLOGIES: dict[str, Callable[[], str]] = {
    "00-topology.svg": _review_words,
    "series-map.svg": _series_map,
}


def figures() -> dict[str, str]:
    """Per topology figure file name, the SVG text it must hold."""
    return {name: svg if svg.endswith("\n") else svg + "\n" for name, svg in ((n, d()) for n, d in TOPOLOGIES.items())}


def event_time_png() -> bytes:
    """Run notebook 02 headless and return the PNG of its ``chart.snapshot()`` cell."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(HERE / "02_windows_and_watermarks.ipynb", as_version=4)
    NotebookClient(nb, timeout=600, resources={"metadata": {"path": str(HERE)}}).execute()
    for cell in nb.cells:
        last_line = (cell.source.splitlines() or [""])[-1]
        if cell.cell_type == "code" and last_line.startswith("chart.snapshot()"):
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "image/png" in data:
                    return base64.b64decode(data["image/png"])
                html = data.get("text/html", "")
                if "data:image/png;base64," in html:
                    return base64.b64decode(html.split("data:image/png;base64,", 1)[1].split('"', 1)[0])
    raise SystemExit("notebook 02 ran, but its chart.snapshot() cell showed no PNG")


def main(argv: list[str]) -> int:
    FIGURES.mkdir(exist_ok=True)
    for name, text in figures().items():
        (FIGURES / name).write_text(text)
        print(f"wrote {FIGURES / name}")
    if "--run" in argv:
        (FIGURES / EVENT_TIME).write_bytes(event_time_png())
        print(f"wrote {FIGURES / EVENT_TIME}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
