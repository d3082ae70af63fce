"""Where a window's result lands in its sink: the message key a consumer sees, and the queue its key
always goes to, whether the windows fired as one chunk or one by one."""

from __future__ import annotations

import json
from pathlib import Path

from rstream import EmbeddedBroker, JsonSerializer, StreamBuilder, TextDeserializer, TumblingWindow
from rstream.runtime.inprocess import InProcessJob
from rstream.serde.codec import encode, stable_queue


def test_a_window_result_is_keyed_and_placed_by_its_window(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=2)
    broker.create_topic("out", queues=3)
    words = [f"k{i % 7}@{i * 150}" for i in range(400)]  # 60 s of data: 30 windows of 2 s for each of 7 keys
    broker.send_batch("in", [" ".join(words[i:i + 4]) for i in range(0, len(words), 4)])
    b = StreamBuilder("wsink")
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: int(w.split("@")[1]))
     .key_by(lambda w: w.split("@")[0]).window(TumblingWindow(2_000)).count().to_rstream()
     .sink("out", JsonSerializer(with_key=True)))
    InProcessJob(b.build(), broker, tmp_path / "job", {"time_type": "event_time", "allowed_lateness_ms": 0,
                                                      "idle_timeout_ms": 600_000}).run_until_idle()
    expected: dict[tuple[str, int, int], int] = {}
    for w in words:
        key, ts = w.split("@")
        start = int(ts) - int(ts) % 2_000
        expected[(key, start, start + 2_000)] = expected.get((key, start, start + 2_000), 0) + 1
    got = {}
    for q in range(3):
        for m in broker.read("out", q):
            doc = json.loads(m.body)
            key, start, end = doc["key"]
            assert m.key == f"{key}@[{start},{end})"  # the message key reads as the window
            assert q == stable_queue(encode((key, start, end)), 3)  # the queue of the window key's bytes
            got[(key, start, end)] = doc["value"]
    assert got == expected
