"""Progress bars for long work: sending many records, replaying state, running until idle.

A bar in Jupyter (tqdm's widget) and a plain line in a terminal (tqdm on stderr), chosen by
``tqdm.auto``; work done within ``DELAY_S`` shows nothing at all, so quick calls stay quiet. Every
long call takes ``progress=False`` to switch its bar off.
"""

from __future__ import annotations

from typing import Any

#: Work that ends sooner than this (seconds) shows no bar.
DELAY_S = 0.5


class NoBar:
    """What a switched-off bar is: it takes every call and shows nothing."""

    n = 0
    total: int | None = None

    def update(self, n: int = 1) -> None:
        self.n += n

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        pass

    def refresh(self) -> None:
        pass

    def reset(self, total: int | None = None) -> None:
        self.n = 0

    def close(self) -> None:
        pass

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def progress_bar(total: int | None, desc: str, unit: str = "records", enabled: bool = True) -> Any:
    """A tqdm bar (``update(n)``, ``total``, ``set_postfix_str``, ``reset``, ``close()``; a context
    manager), or one that shows nothing when ``enabled`` is False."""
    if not enabled:
        return NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, delay=DELAY_S, leave=True, mininterval=0.2)


#: The width of a notebook bar whose total came later (``set_total``): tqdm's own is 300 px.
BAR_WIDTH = "200px"


def set_total(bar: Any, total: int) -> None:
    """Give a bar its total once it is known, or a new one. tqdm's notebook bar draws a bar made
    with no total as a full 20 px stub and never reads ``total`` again (only ``reset`` does, which
    also sets the count back to 0): its widget gets the new maximum and, the first time, its width."""
    was = bar.total
    bar.total = total
    container = getattr(bar, "container", None)  # tqdm.notebook's HBox: (description, bar, text)
    if container is None or total == was:
        return
    widget = container.children[1]
    widget.max = total
    if not was and getattr(bar, "ncols", None) is None:  # the stub of an unknown total
        # a bar that leaves its line to the description and the text after it; a text too long for
        # that line (what is left, a warm-up) goes to a line of its own rather than squeeze the bar
        # and the description, or run past the output's edge
        widget.layout.width = BAR_WIDTH
        container.layout.flex_flow = "row wrap"
        if widget.bar_style == "info":
            widget.bar_style = ""
