"""``StateInspector``: its plain objects against the job's state, its controls, and a watched replay."""

from __future__ import annotations

from collections import Counter
from html import unescape
from typing import Any

import ipywidgets
import pytest

from rstream import EmbeddedBroker, RocketMQStream
from rstream.widgets import StateDiffSnapshot, StateInspector, StateSnapshot
from rstream.widgets.state import NOW
from tests.support.jobs import job_id, wordcount

ROUNDS = [["apple banana apple", "cherry"], ["banana date", "apple"], ["elder fig", "apple fig"]]


@pytest.fixture(scope="module")
def counted(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A word count run round by round over ``ROUNDS`` (3 shuffle queues), stopped."""
    root = tmp_path_factory.mktemp("inspector")
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("sentences", queues=2)
    job = RocketMQStream(wordcount(job_id("inspect")).build(), {"data_dir": str(root)}, broker=broker, spark=spark)
    for sentences in ROUNDS:
        broker.send_batch("sentences", sentences)
        job.run_until_idle(progress=False)
    yield job
    job.stop()


def test_state_snapshots_filter_page_and_match_the_jobs_state(counted: RocketMQStream) -> None:
    words = Counter(w for r in ROUNDS for s in r for w in s.split())
    now = StateSnapshot.of(counted)
    assert dict(zip(now.to_pandas()["key"], now.to_pandas()["value"])) == dict(words)
    assert now.total_keys == len(words) and now.batch is None
    assert list(now.to_pandas()["key"]) == sorted(words, key=lambda w: (int(counted.state().set_index("key").loc[w, "queue"]), w))
    pages = [StateSnapshot.of(counted, page=i, page_size=2) for i in range(4)]
    assert len(words) == 6 and [len(p.page_rows()) for p in pages] == [2, 2, 2, 2]
    assert pages[0].pages == 3 and pages[3].page == 2  # a page past the end shows the last one
    assert [k for p in pages[:3] for k in p.page_rows()["key"]] == list(now.to_pandas()["key"])
    apples = StateSnapshot.of(counted, key_filter="APP")
    assert list(apples.to_pandas()["key"]) == ["apple"] and "1 of 6 keys (keys holding 'APP')" in apples.status
    queue = int(counted.state().set_index("key").loc["fig", "queue"])
    assert set(StateSnapshot.of(counted, queue=queue).to_pandas()["queue"]) == {queue}
    first = counted.history()[0].batch_id  # the first batch: it read the first sentences and counted them
    after_first = StateSnapshot.of(counted, batch=first)
    assert dict(zip(after_first.to_pandas()["key"], after_first.to_pandas()["value"])) == {
        "apple": 2, "banana": 1, "cherry": 1}
    assert "after batch" in after_first.status and "state topics" in after_first.status
    html = unescape(after_first._repr_html_())
    assert ">apple</td>" in html and "overflow-x:auto" in html  # a table that scrolls inside its box


def test_diff_snapshot_is_what_a_batch_changed(counted: RocketMQStream) -> None:
    batches = [p.batch_id for p in counted.history()]
    last = StateDiffSnapshot.of(counted, batches[-1])
    assert last.from_batch == batches[-2]
    assert last.to_pandas().equals(counted.state_diff(batches[-2], batches[-1]).reset_index(drop=True))
    # the third round: "elder fig", "apple fig": each of those keys was counted in the last batch
    assert sorted(zip(last.to_pandas()["key"], last.to_pandas()["change"])) == [
        ("apple", "changed"), ("elder", "added"), ("fig", "added")]
    assert last.counts() == {"added": 2, "changed": 1, "deleted": 0}
    html = unescape(last._repr_html_())
    assert "#d3f9d8" in html and "#fff3bf" in html  # added green, changed yellow
    whole = StateDiffSnapshot.of(counted, batches[-1], from_batch=-1)
    assert set(whole.to_pandas()["change"]) == {"added"} and len(whole.to_pandas()) == 6


def test_the_inspector_follows_its_controls_and_watches_a_replay(counted: RocketMQStream) -> None:
    inspector = StateInspector(counted, page_size=2)
    assert isinstance(inspector, ipywidgets.VBox)
    batches = [p.batch_id for p in counted.history()]
    assert list(inspector.batch.options) == [*batches, NOW] and inspector.batch.value == NOW
    assert "page 1 of 3" in inspector.status_line.value
    inspector.next.click()
    assert "page 2 of 3" in inspector.status_line.value
    inspector.key_filter.value = "fig"  # a new filter starts at the first page
    assert "page 1 of 1" in inspector.status_line.value and ">fig</td>" in unescape(inspector.state_table.value)
    inspector.key_filter.value = ""
    inspector.batch.value = batches[1]
    assert ">cherry</td>" in unescape(inspector.state_table.value) and ">fig</td>" not in unescape(inspector.state_table.value)
    inspector.tabs.selected_index = 1
    assert inspector.diff_to.value == batches[-1] and "changes in the state" in inspector.status_line.value
    # every dropdown shows its choice (an option whose value is None chosen by value shows an empty box)
    for dropdown, label in ((inspector.diff_from, "the batch before"), (inspector.operator, "all operators"),
                            (inspector.queue, "all")):
        assert (dropdown.index, dropdown.label, dropdown.value) == (0, label, None)
    inspector.diff_from.value = batches[0]
    inspector.draw()
    assert inspector.diff_from.label == f"after batch {batches[0]}"

    rows = inspector.replay()
    assert rows is not None and rows["replayed"].all()
    assert int(rows["replayed_keys"].sum()) == len(counted.state()) == 6
    assert inspector.replay_bar.value == inspector.replay_bar.max > 1  # every state-topic message read
    table = unescape(inspector.replay_table.value)
    assert table.count("<tr>") == 1 + len(rows)  # a header, then one row per replayed queue
    assert "replayed 6 keys into 3 queues" in unescape(inspector.replay_status.value)


def test_replay_is_refused_while_the_job_runs(broker: EmbeddedBroker, make_job: Any) -> None:
    broker.create_topic("sentences", queues=1)
    job = make_job(wordcount(job_id("inspect-running")))
    job.start()
    try:
        inspector = StateInspector(job)
        assert inspector.replay() is None
        assert "stop it first" in unescape(inspector.replay_status.value)
    finally:
        job.stop()
