"""The pictures in the notebooks' text (``notebooks/figures``) are legible at the width they are shown: no
text under ``MIN_TEXT_PX`` CSS pixels in a column as narrow as GitHub's (``PAGE_WIDTH_PX``; JupyterLab's
is wider). A picture is shown at the width its ``<img>`` asks for, else at its natural size, and never
wider than the column. No Spark: the SVGs are read, the event-time chart is drawn from a small snapshot."""

from __future__ import annotations

import importlib.util
import json
import re
import struct
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
FIGURES = NOTEBOOKS / "figures"


def maker():
    spec = importlib.util.spec_from_file_location("make_figures", NOTEBOOKS / "make_figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = maker()
COLUMN, SMALLEST = MAKER.PAGE_WIDTH_PX, MAKER.MIN_TEXT_PX
IMG = re.compile(r'<img\b[^>]*\bsrc="figures/([^"]+)"[^>]*>|!\[[^\]]*\]\(figures/([^)\s]+)\)')


def shown() -> list[tuple[str, str, float | None]]:
    """(notebook, figure file, the width its ``<img>`` asks for or None) for every picture in a text."""
    found = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            for match in IMG.finditer("".join(cell["source"])):
                width = re.search(r'\bwidth="(\d+)"', match.group(0)) if match.group(1) else None
                found.append((path.name, match.group(1) or match.group(2), float(width.group(1)) if width else None))
    return found


def css_px(length: str) -> float:
    """An SVG length (``484pt``, ``645px``, ``645``) in CSS pixels."""
    number, unit = re.fullmatch(r"([0-9.]+)(pt|px)?", length).groups()  # type: ignore[union-attr]
    return float(number) * (4 / 3 if unit == "pt" else 1)


def smallest_svg_text_px(svg: str, width_px: float) -> float:
    """The smallest text of ``svg`` when it is drawn ``width_px`` wide."""
    view_width = float(re.search(r'viewBox="[-0-9.]+ [-0-9.]+ ([0-9.]+) ', svg).group(1))  # type: ignore[union-attr]
    sizes = [float(s) for s in re.findall(r'font-size="([0-9.]+)"', svg)]
    assert sizes, "an SVG without text"
    return min(sizes) * width_px / view_width


def test_every_picture_shown_is_a_figure_of_the_repository() -> None:
    pictures = shown()
    assert {name for _, name, _ in pictures} == {"00-topology.svg", MAKER.EVENT_TIME}
    assert all((FIGURES / name).exists() for _, name, _ in pictures)


@pytest.mark.parametrize("notebook, name, asked", [p for p in shown() if p[1].endswith(".svg")])
def test_an_svg_figure_is_legible_where_it_is_shown(notebook: str, name: str, asked: float | None) -> None:
    svg = (FIGURES / name).read_text()
    natural = re.search(r'<svg width="([0-9.]+(?:pt|px)?)"', svg)
    assert natural, f"{name} has no natural width: an <img> of it would guess one"
    width = min(asked or css_px(natural.group(1)), COLUMN)
    smallest = smallest_svg_text_px(svg, width)
    assert smallest >= SMALLEST, f"{notebook} shows {name} {width:.0f} px wide: its smallest text is {smallest:.1f} px"


@pytest.mark.parametrize("notebook, name, asked", [p for p in shown() if p[1] == MAKER.EVENT_TIME])
def test_the_event_time_chart_is_legible_where_it_is_shown(notebook: str, name: str, asked: float | None) -> None:
    """The chart's PNG is a drawing of ``EventTimeSnapshot.figure()``; its text, over the figure's width,
    must stay legible once the PNG is scaled into the column."""
    from matplotlib.text import Text

    from rstream.runtime.eventtime import EventTimeSnapshot, Span

    png = (FIGURES / name).read_bytes()
    natural = struct.unpack(">I", png[16:20])[0]
    snapshot = EventTimeSnapshot("job", {"views/0": [(0, 0), (1000, 8000)]}, {"t": [(0, 0), (1000, 8000)]},
                                 [Span("W", 0, 10_000, 0, 1500)], [(1200, 3000, 8000, "W")], [(500, 5000)], 2000)
    figure = snapshot.figure()
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    smallest_pt = min(t.get_fontsize() for t in texts)
    width_in = figure.get_figwidth()
    assert natural == round(width_in * figure.dpi), "the PNG is not the chart's figure at its own size"
    width = min(asked or natural, COLUMN)
    smallest = smallest_pt / 72 * width / width_in
    assert smallest >= SMALLEST, f"{notebook} shows the chart {width:.0f} px wide: its smallest text is {smallest:.1f} px"
