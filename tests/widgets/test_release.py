"""``release_button``: drawing it does nothing; a click stops what it names, in order, then releases."""

from __future__ import annotations

import pytest

from rstream.widgets import ReleaseButton, Released, release_button

pytestmark = pytest.mark.unit


class Thing:
    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self.log, self.fails = name, log, fails

    def stop(self) -> None:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError(f"{self.name} would not stop")


def test_drawing_does_nothing_and_a_click_stops_in_order_then_releases() -> None:
    log: list[str] = []
    button = ReleaseButton((Thing("job", log), Thing("cluster", log)),
                           release_fn=lambda: log.append("release") or Released("released", True))
    assert log == [] and ReleaseButton.shown is button and not button.button.disabled
    assert str(button.click()) == "released"
    assert log == ["job", "cluster", "release"]
    assert button.button.disabled and "released" in button.status.value
    button.click()  # a second click does nothing more
    assert log == ["job", "cluster", "release"]


def test_a_stop_that_fails_is_shown_and_the_rest_still_runs() -> None:
    log: list[str] = []
    button = ReleaseButton((Thing("job", log, fails=True), Thing("mq", log)),
                           release_fn=lambda: Released("released", True))
    button.click()
    assert log == ["job", "mq"]
    assert "Thing.stop() failed: job would not stop" in button.status.value


def test_release_button_names_what_it_stops() -> None:
    # (not clicked here: release() would stop the Spark session other tests of this process share)
    log: list[str] = []
    job = Thing("job", log)
    button = release_button(job)
    assert isinstance(button, ReleaseButton) and button.stop == (job,) and log == []
    assert "rstream-release" in button.widget._dom_classes
