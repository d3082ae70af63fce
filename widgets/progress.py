"""``ProgressSnapshot``: a job's progress at one moment, as a plain object (HTML and DataFrames).

The ``JobMonitor`` widget is a view over it; the snapshot itself needs no kernel, so notebooks can
show it with ``display(snapshot)`` and tests can check it as text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from typing import Any

from rstream import BatchProgress, RocketMQStream

from .html import table as _table

BATCH_COLUMNS = ["batch_id", "time", "records_in", "records_out", "replayed_keys", "errors", "duration_ms"]
OPERATOR_COLUMNS = ["operator", "records_in", "total_records_in"]


@dataclass(frozen=True)
class ProgressSnapshot:
    """What a job has done so far: its status, its latest batches and its operators' counters.

    ``batches`` holds the latest ``last`` batches, oldest first; the totals cover every batch the
    job object has seen. Operators are in topology order; ``records_in`` is the last batch's.
    """

    job_id: str
    running: bool
    batches: list[BatchProgress]
    total_batches: int
    total_records_in: int
    total_records_out: int
    total_replayed_keys: int
    total_errors: int
    operators: list[tuple[str, int, int]]
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream, last: int = 10) -> ProgressSnapshot:
        """Take a snapshot of ``job`` (cheap: it reads ``job.progress``, never waits for a batch)."""
        if last < 1:
            raise ValueError(f"last must be at least 1 batch, got {last!r}")
        progress = job.progress
        running = job.is_running
        latest = progress[-1] if progress else None
        last_ops = latest.operators() if latest else {}
        totals: dict[str, int] = {}
        for p in progress:
            for name, counters in p.operators().items():
                totals[name] = totals.get(name, 0) + int(counters.get("records_in", 0))
        order = [n.name for n in job.topology.nodes]
        names = order + sorted(set(totals) - set(order))
        operators = [
            (name, int(last_ops.get(name, {}).get("records_in", 0)), totals.get(name, 0))
            for name in names
        ]
        return cls(
            job_id=job.job_id,
            running=running,
            batches=progress[-last:],
            total_batches=len(progress),
            total_records_in=sum(p.records_in for p in progress),
            total_records_out=sum(p.records_out for p in progress),
            total_replayed_keys=sum(p.replayed_keys for p in progress),
            total_errors=sum(p.error_count for p in progress),
            operators=operators,
            taken_at=time.time(),
        )

    # -- data ---------------------------------------------------------------------------------
    @property
    def last_batch(self) -> BatchProgress | None:
        return self.batches[-1] if self.batches else None

    @property
    def status(self) -> str:
        """One line: running or stopped, batch count, records, replayed keys, errors."""
        state = "running" if self.running else "stopped"
        if not self.total_batches:
            return f"job {self.job_id!r}: {state}, no batches yet"
        last = self.last_batch
        assert last is not None
        return (
            f"job {self.job_id!r}: {state}, {self.total_batches} batches, "
            f"{self.total_records_in} records in, {self.total_records_out} out, "
            f"{self.total_replayed_keys} keys replayed, {self.total_errors} errors; "
            f"last batch {last.batch_id} at {_clock(last.timestamp_ms)}"
        )

    def to_pandas(self) -> Any:
        """The latest batches, one row each (``duration_ms`` is the driver's time for the batch)."""
        import pandas as pd

        return pd.DataFrame([_batch_row(p) for p in self.batches], columns=BATCH_COLUMNS)

    def operators_to_pandas(self) -> Any:
        """Per operator (real node): records in during the last batch, and since the job object began."""
        import pandas as pd

        return pd.DataFrame(self.operators, columns=OPERATOR_COLUMNS)

    # -- HTML ---------------------------------------------------------------------------------
    def status_html(self) -> str:
        colour = "#2b8a3e" if self.running else "#495057"
        errors = ' <b style="color:#c92a2a">(errors)</b>' if self.total_errors else ""
        return f'<div style="color:{colour};font-family:monospace">{escape(self.status)}{errors}</div>'

    def batches_html(self) -> str:
        if not self.batches:
            return "<i>no batches yet</i>"
        rows = [_batch_row(p) for p in reversed(self.batches)]  # newest first, as a monitor reads
        return _table("latest batches", BATCH_COLUMNS, [[r[c] for c in BATCH_COLUMNS] for r in rows],
                      highlight={"replayed_keys": "#e7f5ff", "errors": "#ffe3e3"})

    def operators_html(self) -> str:
        last = self.last_batch
        title = f"operators, batch {last.batch_id}" if last else "operators"
        return _table(title, OPERATOR_COLUMNS, [list(row) for row in self.operators])

    def _repr_html_(self) -> str:
        return f"<div>{self.status_html()}{self.batches_html()}{self.operators_html()}</div>"

    def __repr__(self) -> str:
        return f"ProgressSnapshot({self.status})"


def _clock(timestamp_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(timestamp_ms / 1000))


def _batch_row(p: BatchProgress) -> dict[str, Any]:
    return {
        "batch_id": p.batch_id, "time": _clock(p.timestamp_ms), "records_in": p.records_in,
        "records_out": p.records_out, "replayed_keys": p.replayed_keys, "errors": p.error_count,
        "duration_ms": round(p.duration_ms, 1),
    }
