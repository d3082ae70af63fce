"""``ExplainView``: a sink record's explanation over the real topology, each input one click from its trace
(an in-process job: no Spark)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rstream import EmbeddedBroker, JsonDeserializer, JsonSerializer, StreamBuilder, Time, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.widgets import ExplainView

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


def test_the_view_shows_the_explanation_and_traces_a_picked_input_to_the_same_result(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("clicks", queues=1)
    broker.send_batch("clicks", [json.dumps({"page": p, "ts": T0 + t}) for p, t in
                                 [("a", 1000), ("b", 2000), ("a", 3000), ("a", 15_000)]])
    b = StreamBuilder("explain-view", shuffle_queues=1)
    (b.source("clicks", JsonDeserializer()).select_timestamp(lambda c: c["ts"]).key_by(lambda c: c["page"])
     .window(TumblingWindow(Time.seconds(10))).count().to_rstream().sink("counts", JsonSerializer(with_key=True)))
    job = InProcessJob(b.build(), broker, tmp_path / "job", {"allowed_lateness_ms": 0, "idle_timeout_ms": 600_000})
    job.run_until_idle()
    sink = next(m for m in broker.read("counts") if json.loads(m.body)["key"][0] == "a"
                and json.loads(m.body)["key"][1] == T0 - T0 % 10_000)
    view = ExplainView(job, "counts", sink.queue_id, sink.offset)
    assert view.explanation.records == {("clicks", 0, 0), ("clicks", 0, 2)}
    assert "<svg" in view.view.value and "explain" in view.view.value and len(view.inputs.options) == 2
    assert view.trace_button.disabled
    view.inputs.value = 1
    assert not view.trace_button.disabled
    trace = view.trace_input()
    fired = trace.to_pandas()
    assert json.loads(sink.body)["value"] == 2 and "fired" in set(fired["kind"])
    assert any(row.offset == sink.offset and row.topic == "counts" for row in fired.itertuples())
    assert "<table" in view.trace_view.value

    refused = ExplainView(job, "clicks", 0, 0)
    assert refused.explanation is None and "no sink topic" in refused.view.value
