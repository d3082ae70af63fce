"""HTML pieces every view shares: tables that scroll inside their box instead of running past the
notebook's edge, status lines, and the ``ipywidgets.HTML`` boxes they sit in."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

import ipywidgets

#: Background colours of the toolkit (Open Color): what changed, what waits, what went wrong.
GREEN, YELLOW, RED, BLUE = "#d3f9d8", "#fff3bf", "#ffe3e3", "#e7f5ff"
#: Text colours: plain, running, something went wrong.
GREY, RUNNING, ALERT = "#495057", "#2b8a3e", "#c92a2a"
#: A cell value longer than this is cut (the whole value is in the snapshot's ``to_pandas()``).
MAX_CELL = 100


def box(**layout: Any) -> ipywidgets.HTML:
    """An ``ipywidgets.HTML`` that never grows past its container (wide content scrolls inside)."""
    return ipywidgets.HTML(layout=ipywidgets.Layout(max_width="100%", overflow="auto", **layout))


def row(children: Sequence[ipywidgets.Widget], **layout: Any) -> ipywidgets.HBox:
    """Widgets side by side that wrap onto the next line when the notebook is narrow."""
    return ipywidgets.HBox(list(children), layout=ipywidgets.Layout(flex_flow="row wrap", max_width="100%",
                                                                   grid_gap="4px 16px", **layout))


def select(dropdown: ipywidgets.Dropdown, value: Any) -> None:
    """Choose the option of ``dropdown`` whose value is ``value``. By its index: ipywidgets takes a value
    of None for no choice at all, so an option such as ("all", None) set through ``value`` shows an
    empty box."""
    dropdown.index = [v for _label, v in dropdown.options].index(value)


def counted(n: int, noun: str) -> str:
    """``"1 queue"``, ``"2 queues"``: a count and its noun, plural unless it is one."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cell_text(value: Any) -> str:
    """A value as table text: ``-`` for nothing, numbers as they are, anything long cut short."""
    if value is None:
        return "-"
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError):
            pass
    text = value if isinstance(value, str) else repr(value) if isinstance(value, bytes) else str(value)
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


#: Columns that hold sentences (why a window waits, why a record was late, what went wrong): they
#: wrap instead of being cut.
PROSE = frozenset({"reason", "error", "note", "why"})


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          highlight: dict[str, str] | None = None, row_colours: Sequence[str | None] | None = None,
          wrap: bool = False) -> str:
    """An HTML table inside a box that scrolls sideways when the table is wider than the notebook.
    ``highlight`` colours a column's non-zero numbers; ``row_colours`` colours whole rows. Values are
    cut at ``MAX_CELL`` characters, except in ``PROSE`` columns, which wrap.

    ``wrap``: a table that would be wider than the notebook wraps instead, as far as it can: its
    headers after an underscore, its text cells at spaces and after ``BREAK_AFTER`` (numbers never);
    only what is still too wide then scrolls. A table that fits looks the same either way."""
    highlight = highlight or {}
    cell = "padding:1px 8px;border-bottom:1px solid #e9ecef;white-space:nowrap"
    text = "padding:1px 8px;border-bottom:1px solid #e9ecef;white-space:normal" if wrap else cell
    prose = "padding:1px 8px;border-bottom:1px solid #e9ecef;white-space:normal;min-width:16em;max-width:32em"
    name = _breakable if wrap else escape
    head = "".join(f'<th style="{text};text-align:left">{name(c)}</th>' for c in columns)
    body = []
    for i, values in enumerate(rows):
        tds = []
        for column, value in zip(columns, values):
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            bg = highlight.get(column) if number and value else None
            words = column in PROSE and isinstance(value, str)
            style = f"{prose if words else cell if number else text};text-align:{'right' if number else 'left'}" + (
                f";background:{bg}" if bg else "")
            shown = escape(value) if words else escape(cell_text(value)) if number else name(cell_text(value))
            tds.append(f'<td style="{style}">{shown}</td>')
        colour = row_colours[i] if row_colours is not None and i < len(row_colours) else None
        body.append(f'<tr style="background:{colour}">' if colour else "<tr>")
        body[-1] += "".join(tds) + "</tr>"
    return (
        '<div style="max-width:100%;overflow-x:auto">'
        '<table style="border-collapse:collapse;font-family:monospace;font-size:12px;margin:4px 0">'
        f'<caption style="text-align:left;font-weight:bold;white-space:nowrap">{escape(title)}</caption>'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
    )


#: Where a name may break in a ``table(wrap=True)`` that must wrap: after these (``clicks/1/SHUFFLE_SINK-5``,
#: ``held_back_watermark``, ``Time.seconds(10)``), and at spaces.
BREAK_AFTER = ("/", "_", ".")


def _breakable(text: str) -> str:
    """``text`` as HTML with a line-break opportunity (``<wbr>``, nothing visible, nothing copied)
    after each character of ``BREAK_AFTER``."""
    html = escape(text)
    for mark in BREAK_AFTER:
        html = html.replace(mark, mark + "<wbr>")
    return html


def status(text: str, colour: str = GREY) -> str:
    """One line of status text, wrapping rather than running past the edge."""
    return f'<div style="color:{colour};font-family:monospace;overflow-wrap:anywhere">{escape(text)}</div>'


def note(text: str) -> str:
    """A small explanatory line under a view."""
    return f'<div style="font-size:12px;color:{GREY};overflow-wrap:anywhere">{escape(text)}</div>'
