"""A stand-in for a job, for the graded exercises' checks without Spark: what a check reads of a
``RocketMQStream`` (its id, topology's topics, broker, batches, lag, late records, settings, state), with a
real embedded broker holding what the job would have written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pandas as pd

from rstream import EmbeddedBroker


@dataclass(frozen=True)
class Props:
    allowed_lateness_ms: int


class StandIn:
    """What a check reads of a job, and nothing else: no Spark. ``state`` is what ``job.state()`` would
    hold after the run, as ``{key: value}``."""

    def __init__(self, broker: EmbeddedBroker, job_id: str, reads: str, sinks: list[str], lateness: int = 2_000,
                 batches: int = 1, left: int = 0, late: int = 0, state: dict[str, object] | None = None) -> None:
        self.job_id, self.broker, self.properties = job_id, broker, Props(lateness)
        self.topology = SimpleNamespace(source_topics=[reads], sink_topics=sinks)
        self._batches, self._left, self._late, self._state = batches, left, late, state or {}

    def history(self) -> list[int]:
        return list(range(self._batches))

    def lag(self) -> pd.DataFrame:
        return pd.DataFrame({"queue": [0], "lag": [self._left]})

    def late_records(self) -> pd.DataFrame:
        return pd.DataFrame({"key": ["k"] * self._late, "data_time": [0] * self._late})

    def state(self) -> pd.DataFrame:
        return pd.DataFrame({"key": list(self._state), "value": list(self._state.values())})


def written(broker: EmbeddedBroker, topic: str, pairs: list[tuple[str, Any]]) -> str:
    """A sink topic of two queues holding ``{"key": ..., "value": ...}`` per pair (what
    ``JsonSerializer(with_key=True)`` writes), spread over both queues; its name."""
    broker.create_topic(topic, queues=2)
    for i, (key, value) in enumerate(pairs):
        broker.send_batch(topic, [json.dumps({"key": key, "value": value})], queue=i % 2)
    return topic
