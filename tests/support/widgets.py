"""The toolkit tests' jobs and inputs (the fixtures in ``tests/widgets/conftest.py`` run them): a word
count with one bad sentence, page clicks held back by a slow queue, and a wait for a widget's change."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from rstream import (
    EmbeddedBroker,
    JsonDeserializer,
    JsonSerializer,
    StreamBuilder,
    TextDeserializer,
    TextSerializer,
    Time,
    TumblingWindow,
)

SENTENCES = ["the quick brown fox", "jumps over the lazy dog", "the dog sleeps", "boom"]


def wordcount(job_id: str) -> StreamBuilder:
    """Word count whose flat_map raises on ``boom``. Its functions are local, so Spark's workers get
    them by value and need not import this file."""

    def split_words(sentence: str) -> list[str]:
        if sentence == "boom":
            raise ValueError("a sentence that cannot be split")
        return sentence.split()

    builder = StreamBuilder(job_id)
    words = builder.source("sentences", TextDeserializer()).flat_map(split_words)
    words.key_by(lambda w: w).count().to_rstream().sink("word-counts", TextSerializer(with_key=True))
    return builder


def page_clicks(job_id: str) -> StreamBuilder:
    """Clicks per page in 10 s tumbling windows of event time (``ts``), on 2 shuffle queues."""
    builder = StreamBuilder(job_id, shuffle_queues=2)
    (builder.source("clicks", JsonDeserializer()).select_timestamp(lambda e: e["ts"])
     .key_by(lambda e: e["page"]).window(TumblingWindow(Time.seconds(10))).count()
     .to_rstream().sink("page-counts", JsonSerializer(with_key=True)))
    return builder


#: Lateness 2000 ms. Queue 0 runs ahead (watermark 21000 - 2000 = 19000), then sends t=4000: late.
#: Queue 1 lags (watermark 9000 - 2000 = 7000) and holds every window back: nothing fires.
FAST = [("a", 1000), ("b", 3000), ("a", 12000), ("b", 14000), ("a", 21000), ("b", 4000)]
SLOW = [("a", 2000), ("b", 5000), ("a", 9000)]
#: Then queue 1 reaches t=16000 (watermark 14000): the windows ending at 10000 fire, the others wait.
CATCH_UP = [("b", 16000)]
WINDOW_PROPS = {"allowed_lateness_ms": 2000, "idle_timeout_ms": 600_000}  # nobody goes idle: exact


def send_clicks(broker: EmbeddedBroker, queue: int, clicks: list[tuple[str, int]]) -> None:
    broker.send_batch("clicks", [json.dumps({"page": p, "ts": t}) for p, t in clicks], queue=queue)


def wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
