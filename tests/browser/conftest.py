"""What the browser suite's modules share: each module's artifacts folder and page. Each module first calls
``tests.support.browser.require_browser`` and starts its own JupyterLab (its ``lab`` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.browser import JupyterLab, artifacts_dir, launch_browser, open_lab_page


@pytest.fixture(scope="module")
def artifacts() -> Path:
    return artifacts_dir()


@pytest.fixture(scope="module")
def page(lab: JupyterLab) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # only once a module's guard let it run

    with sync_playwright() as pw:
        browser = launch_browser(pw)
        try:
            yield open_lab_page(browser, lab)
        finally:
            browser.close()
