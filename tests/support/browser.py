"""The guard of the browser suite's modules (``tests/browser``)."""

from __future__ import annotations

import os

import pytest

from tools.browser import browser_unavailable


def require_browser() -> None:
    """Called at a test module's top: skip it when no browser can run here; under
    ``RSTREAM_REQUIRE_BROWSER`` (CI) fail instead."""
    reason = browser_unavailable()
    if reason and os.environ.get("RSTREAM_REQUIRE_BROWSER"):
        raise RuntimeError(f"RSTREAM_REQUIRE_BROWSER is set (CI), but {reason}")
    if reason:
        pytest.skip(reason, allow_module_level=True)
