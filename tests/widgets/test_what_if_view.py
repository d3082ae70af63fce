"""``WhatIfView``: a what-if result as a view, both runs' pictures and the differences filtered by kind and
key (an in-process job: no Spark)."""

from __future__ import annotations

import json
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from rstream import EmbeddedBroker, JsonDeserializer, StreamBuilder, Time, TumblingWindow, WhatIf, WhatIfError
from rstream.runtime.inprocess import InProcessJob
from rstream.runtime.what_if import BECAME_LATE, DIFFERS, what_if
from rstream.widgets import WhatIfView

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def test_the_view_shows_both_runs_and_filters_the_differences(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("clicks", queues=1)
    # b's click at 4 s comes after one at 9 s: 3 s behind, on time with 5 s of lateness, late with 1 s
    broker.send_batch("clicks", [json.dumps({"page": p, "ts": T0 + t}) for p, t in
                                 [("a", 1000), ("b", 2000), ("b", 9000), ("b", 6000), ("a", 3000), ("a", 15_000)]])
    b = StreamBuilder("what-if-view", shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda c: c["ts"]).key_by(lambda c: c["page"])
     .window(TumblingWindow(Time.seconds(10))).count().to_rstream().sink("counts"))
    job = InProcessJob(b.build(), broker, tmp_path / "job", {"allowed_lateness_ms": 5000, "idle_timeout_ms": 600_000})
    job.run_until_idle()
    result = what_if(job.topology, broker, job.settings, {"allowed_lateness_ms": 1000})
    assert isinstance(result, WhatIf)
    diff = result.diff()
    assert [(r.key, r.change, r.record) for r in diff.itertuples()] == [
        ("b", DIFFERS, None), ("b", BECAME_LATE, "clicks/0/3")]

    view = WhatIfView(result)
    assert view.result is result
    assert "1 differs, 1 became late" in unescape(view.summary.value)
    assert view.pictures.value.count("<img") == 2
    assert [v for _label, v in view.change.options] == [None, DIFFERS, BECAME_LATE]
    shown = unescape(view.table.value)
    assert "differs" in shown and "became late" in shown and "clicks/0/3" in shown
    view.change.value = DIFFERS
    assert "became late" not in unescape(view.table.value) and "differs" in unescape(view.table.value)
    view.change.value = None
    view.key.value = "a"
    assert "no differences" in view.table.value  # page a's window is the same in both runs

    class Job:
        """What a job's ``what_if`` does when asked the impossible."""

        def what_if(self, topology: Any = None, **changes: Any) -> Any:
            raise WhatIfError("what_if cannot change ['idle_timeout_ms']")

    refused = WhatIfView(Job(), idle_timeout_ms=10)
    assert refused.result is None and "cannot change" in unescape(refused.summary.value)
    assert refused.table.layout.display == "none"
