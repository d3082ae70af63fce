"""Per-batch progress: what the driver publishes after every micro-batch, for notebooks to poll
or subscribe to (``RocketMQStream.on_progress``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rstream.processors.metrics import OperatorMetrics


@dataclass(frozen=True)
class QueueProgress:
    """What one input queue did in one batch."""

    topic: str
    queue: int
    start: int
    end: int
    records_in: int
    records_out: dict[str, int]
    replayed_keys: int
    state_keys: int | None
    changed_keys: int
    error_count: int
    printed: list[str]
    operators: dict[str, OperatorMetrics]
    millis: float
    skipped: bool
    #: On window and join topics: the operator watermark, the producer holding it back, each
    #: producer's watermark and idleness, and the records found late in this batch.
    watermark: int | None = None
    held_back_by: str | None = None
    producers: dict[str, dict[str, Any]] = field(default_factory=dict)
    late: int = 0
    #: The job's batch this range belonged to, when the task started (processing time, ms), and
    #: when its writes were committed (broker time, ms).
    batch_id: int = -1
    started_ms: int = 0
    committed_ms: int = 0
    #: Where the range ran: the Spark executor (``local`` in local mode) and the Python worker's pid.
    executor: str = ""
    pid: int = 0

    @classmethod
    def from_info(cls, info: dict[str, Any], committed_ms: int = 0) -> QueueProgress:
        return cls(
            topic=info["topic"], queue=int(info["queue"]), start=int(info["start"]), end=int(info["end"]),
            records_in=int(info.get("records_in", 0)), records_out=dict(info.get("records_out", {})),
            replayed_keys=int(info.get("replayed_keys", 0)), state_keys=info.get("state_keys"),
            changed_keys=int(info.get("changed_keys", 0)), error_count=int(info.get("error_count", 0)),
            printed=list(info.get("printed", [])),
            operators={name: OperatorMetrics.from_dict(m) for name, m in (info.get("operators") or {}).items()},
            millis=float(info.get("millis", 0.0)),
            skipped=bool(info.get("skipped", False)), watermark=info.get("watermark"),
            held_back_by=info.get("held_back_by"), producers=dict(info.get("producers") or {}),
            late=int(info.get("late", 0)), batch_id=int(info.get("batch", -1)),
            started_ms=int(info.get("now_ms", 0)), committed_ms=int(committed_ms),
            executor=str(info.get("executor", "")), pid=int(info.get("pid", 0)),
        )


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch: its batch id (Spark's), when its last queue committed (``timestamp_ms``),
    how long from its first task's start to its last commit (``duration_ms``), and every queue it
    ran. Read from the broker, where each queue's progress is committed with its writes."""

    batch_id: int
    timestamp_ms: int
    duration_ms: float
    queues: list[QueueProgress] = field(default_factory=list)

    @classmethod
    def of(cls, batch_id: int, queues: list[QueueProgress]) -> BatchProgress:
        """The batch made of the queues that committed so far (sorted by topic and queue)."""
        committed = max((q.committed_ms for q in queues), default=0)
        started = min((q.started_ms for q in queues if q.started_ms), default=committed)
        return cls(batch_id, committed, float(max(committed - started, 0)),
                   sorted(queues, key=lambda q: (q.topic, q.queue)))

    @property
    def records_in(self) -> int:
        return sum(q.records_in for q in self.queues)

    @property
    def records_out(self) -> int:
        return sum(sum(q.records_out.values()) for q in self.queues)

    @property
    def replayed_keys(self) -> int:
        return sum(q.replayed_keys for q in self.queues)

    @property
    def error_count(self) -> int:
        return sum(q.error_count for q in self.queues)

    @property
    def late(self) -> int:
        return sum(q.late for q in self.queues)

    def operators(self) -> dict[str, dict[str, int]]:
        """Per operator, its counters summed over the batch's queues (watermarks: the minimum)."""
        out: dict[str, dict[str, int]] = {}
        for q in self.queues:
            for name, counters in q.operators.items():
                acc = out.setdefault(name, {})
                for k, v in counters.items():
                    if k in ("watermark", "horizon"):
                        if v is not None:
                            acc[k] = v if acc.get(k) is None else min(acc[k], v)
                    elif isinstance(v, (int, float)) and not isinstance(v, bool):
                        acc[k] = acc.get(k, 0) + int(v)
        return out

    def to_pandas(self) -> Any:
        """One row per queue of this batch."""
        import pandas as pd

        rows = [{
            "batch_id": self.batch_id, "topic": q.topic, "queue": q.queue, "start": q.start, "end": q.end,
            "records_in": q.records_in, "records_out": sum(q.records_out.values()),
            "replayed_keys": q.replayed_keys, "state_keys": q.state_keys, "changed_keys": q.changed_keys,
            "errors": q.error_count, "late": q.late, "watermark": q.watermark,
            "held": sum(op.held for op in q.operators.values()),
            "millis": round(q.millis, 1), "executor": q.executor,
        } for q in self.queues]
        return pd.DataFrame(rows)
