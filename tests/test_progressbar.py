"""Long work shows a progress bar (a plain line in a terminal); short work and ``progress=False`` none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, progressbar


@pytest.fixture
def no_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progressbar, "DELAY_S", 0)


def test_sending_many_records_shows_a_bar_that_counts_them(tmp_path: Path, no_delay: None, capsys: Any) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("t", queues=3)
    results = broker.send_batch("t", [f"m{i}" for i in range(10_000)])
    err = capsys.readouterr().err
    assert "sending to t" in err and "10000/10000" in err  # a terminal line, counted to the end
    assert len(results) == 10_000 and sorted(broker.end_offsets("t")) == sorted(
        sum(1 for r in results if r.queue_id == q) for q in range(3))
    assert [m.body for m in broker.read("t", results[42].queue_id, results[42].offset, results[42].offset + 1)] == [b"m42"]
    broker.send_batch("t", ["quiet"], progress=False)
    assert capsys.readouterr().err == ""


def test_quick_work_shows_nothing(tmp_path: Path, capsys: Any) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("t", queues=1)
    broker.send_batch("t", ["a", "b"])  # far below the half-second delay
    assert capsys.readouterr().err == ""


def test_a_run_shows_records_left_and_a_replay_its_queues(broker: EmbeddedBroker, make_job: Any, no_delay: None,
                                                           capsys: Any) -> None:
    from tests.support.jobs import job_id, wordcount

    broker.create_topic("sentences", queues=2)
    broker.send_batch("sentences", [f"w{i % 7} w{i % 5} w{i % 3}" for i in range(200)], progress=False)
    job = make_job(wordcount(job_id("bars")), max_records_per_queue=30)
    job.run_until_idle()
    err = capsys.readouterr().err
    assert "run until idle" in err and "left: sentences/" in err  # which queues still had records
    assert "left: none" in err.splitlines()[-1] or "left: none" in err.rsplit("\r", 1)[-1]
    assert job.lag()["lag"].sum() == 0

    job.delete_local_state()
    seen: list[tuple[int, int, int]] = []
    rows = job.replay_state(on_queue=lambda row, done, total: seen.append((row["queue"], done, total)))
    assert "replay state" in capsys.readouterr().err
    state_topic = next(iter(job.topology.state_topics.values()))
    messages = sum(broker.end_offsets(state_topic))
    assert [q for q, _, _ in seen] == list(rows["queue"]) and seen[-1][1:] == (messages, messages)
    assert rows["replayed_keys"].sum() == len(job.state()) == 7  # w0 .. w6


def test_a_run_waiting_for_the_session_warm_up_says_so(broker: EmbeddedBroker, make_job: Any, no_delay: None,
                                                        monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """A new session's warm-up holds a run's first query back for seconds: its bar says why it
    stays at 0 %, and the run goes on once the warm-up ended."""
    import threading
    import time

    from rstream.runtime import job_query
    from tests.support.jobs import job_id, wordcount

    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", ["a b a"], progress=False)
    warm_up = threading.Thread(target=time.sleep, args=(0.8,), name="a warm-up that takes a while")
    monkeypatch.setattr("rstream.runtime.warm_up._WARM_UP", warm_up)
    warm_up.start()
    job = make_job(wordcount(job_id("warmbar")))
    job.run_until_idle()
    assert not warm_up.is_alive()
    assert job_query.WARM_UP_NOTE in capsys.readouterr().err
    assert job.state() is not None and len(job.state()) == 2  # a, b


def test_a_run_after_the_warm_up_times_its_own_work_only(broker: EmbeddedBroker, make_job: Any, no_delay: None,
                                                          monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """Once the warm-up ended, the bar names the wait in its description and starts its clock again:
    its elapsed time and rate count the run's work, not the seconds it waited for the session."""
    import re
    import threading
    import time

    from tests.support.jobs import job_id, wordcount

    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", ["a b a", "c"], progress=False)
    ended: list[float] = []
    warm_up = threading.Thread(target=lambda: (time.sleep(1.6), ended.append(time.monotonic())),
                               name="a warm-up that takes a while")
    monkeypatch.setattr("rstream.runtime.warm_up._WARM_UP", warm_up)
    warm_up.start()
    job = make_job(wordcount(job_id("warmclock")))
    job.run_until_idle()
    since_warm_up = time.monotonic() - ended[0]
    last = capsys.readouterr().err.rsplit("\r", 1)[-1]
    assert "s of Spark warm-up)" in last and "left: none" in last, last
    minutes, seconds = map(int, re.search(r"\[(\d+):(\d+)<", last).groups())  # type: ignore[union-attr]
    assert minutes * 60 + seconds <= int(since_warm_up), (last, since_warm_up)  # 1.6 s more without the reset
    assert len(job.state()) == 3  # a, b, c


def test_the_warm_up_is_named_after_what_is_left_not_in_the_description(
        broker: EmbeddedBroker, make_job: Any, no_delay: None, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    """The wait goes after what is left, and the description stays the run's own."""
    import re
    import threading
    import time

    from tests.support.jobs import job_id, wordcount

    broker.create_topic("sentences", queues=1)
    broker.send_batch("sentences", ["x y"], progress=False)
    warm_up = threading.Thread(target=lambda: time.sleep(1.6), name="a warm-up that takes a while")
    monkeypatch.setattr("rstream.runtime.warm_up._WARM_UP", warm_up)
    warm_up.start()
    job = make_job(wordcount(job_id("warmnote")))
    job.run_until_idle()
    last = capsys.readouterr().err.rsplit("\r", 1)[-1]
    assert last.startswith(f"{job.job_id}: run until idle: 100%"), last
    assert re.search(r"left: none \(after \d+ s of Spark warm-up\)\]$", last.rstrip()), last


def test_a_notebook_bar_made_without_a_total_gets_its_width_and_maximum_once_the_total_is_known() -> None:
    """tqdm's notebook bar for an unknown total is a full 20 px stub; ``run_until_idle`` learns its
    total a moment later, and the widget must then show progress against it, at full width."""
    from tqdm.notebook import tqdm as notebook_tqdm

    from rstream.progressbar import set_total

    bar = notebook_tqdm(total=None, desc="job: run until idle", unit="records", delay=60)
    try:
        widget = bar.container.children[1]
        assert widget.layout.width == "20px" and widget.max == 1  # what tqdm makes of an unknown total
        set_total(bar, 40)
        bar.update(10)
        bar.refresh()
        assert (widget.layout.width, widget.max, widget.value, widget.bar_style) == ("200px", 40, 10, "")
        assert bar.container.layout.flex_flow == "row wrap"  # a long text after it goes to the next line
        set_total(bar, 60)  # shuffle queues filled: the total grows, the count stays
        bar.refresh()
        assert (widget.max, widget.value, bar.total, bar.n) == (60, 10, 60, 10)
    finally:
        bar.close()
