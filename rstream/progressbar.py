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

    def set_description_str(self, desc: str | None = None, refresh: bool = True) -> None:
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
    """A tqdm bar (``update(n)``, ``total``, ``set_postfix_str``, ``set_description_str``, ``reset``,
    ``close()``; a context manager), or
    one that shows nothing when ``enabled`` is False."""
    if not enabled:
        return NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, delay=DELAY_S, leave=True, mininterval=0.2)
