"""``LateDataSnapshot``: a job's late records at one moment, as a plain object (HTML and DataFrames).

It reads ``job.late_records()``, the job's late-data topic, so it shows late records of earlier runs of
the same job too. The ``LateDataTable`` widget is a view over it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from html import escape
from typing import Any

from rstream import RocketMQStream
from rstream.processors.base import LateCause

from .html import table as _table

#: Columns of the latest-records table (all of ``job.late_records()`` is in ``to_pandas()``).
SHOWN_COLUMNS = ["operator", "key", "data_time", "watermark", "late_ms", "reason", "topic", "queue", "offset"]
SUMMARY_COLUMNS = ["operator", "cause", "records", "max_late_ms"]

BEHIND = "behind its source queue's watermark"
FIRED = "window already fired (source idle)"


#: What the table calls each ``LateCause``: a window, a session and a join window that fired while
#: their source was idle are one cause to a learner.
CAUSE_LABELS = {LateCause.BEHIND_WATERMARK.value: BEHIND, LateCause.WINDOW_FIRED.value: FIRED,
                LateCause.SESSION_FIRED.value: FIRED, LateCause.INTERVAL_PASSED.value: FIRED}


def cause(reason: str) -> str:
    """The kind of a late record from its reason in words (for rows written before the coded
    ``cause`` column existed): behind its source queue's watermark, or its window (or session, or
    join window) already fired because its source was idle."""
    if reason.startswith("data time") and "behind" in reason:
        return BEHIND
    if "already" in reason:
        return FIRED
    return "other"


def causes(records: Any) -> Any:
    """The cause label of each late record (a Series): from its coded ``cause``, else its reason."""
    coded = records["cause"].map(CAUSE_LABELS) if "cause" in records else None
    from_words = records["reason"].map(cause)
    return from_words if coded is None else coded.fillna(from_words)


@dataclass(frozen=True)
class LateDataSnapshot:
    """Every late record of a job, in the order the job found them. ``last`` is how many of the
    latest ones the HTML table shows (20); ``to_pandas()`` has them all."""

    job_id: str
    running: bool
    records: Any  # a DataFrame with job.late_records()' columns
    last: int
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream, last: int = 20) -> LateDataSnapshot:
        """Take a snapshot of ``job``'s late records (reads its late-data topic once)."""
        if last < 1:
            raise ValueError(f"last must be at least 1 record, got {last!r}")
        running = job.is_running
        return cls(job_id=job.job_id, running=running, records=job.late_records(), last=int(last),
                   taken_at=time.time())

    # -- data ---------------------------------------------------------------------------------
    @property
    def total(self) -> int:
        return len(self.records)

    def to_pandas(self) -> Any:
        """Every late record: the columns of ``job.late_records()`` (operator, key, value, data_time,
        watermark, late_ms, reason, topic, queue, offset, shuffle_topic, shuffle_queue, shuffle_offset)."""
        return self.records.copy()

    def summary_to_pandas(self) -> Any:
        """Per operator and cause: how many late records, and the latest by how much (ms)."""
        import pandas as pd

        if self.records.empty:
            return pd.DataFrame(columns=SUMMARY_COLUMNS)
        frame = self.records.assign(cause=causes(self.records))
        summary = frame.groupby(["operator", "cause"], sort=True).agg(
            records=("late_ms", "size"), max_late_ms=("late_ms", "max")).reset_index()
        return summary[SUMMARY_COLUMNS]

    @property
    def status(self) -> str:
        """One line: how many late records, by cause, and the latest one."""
        state = "running" if self.running else "stopped"
        if self.records.empty:
            return f"job {self.job_id!r}: {state}, no late records"
        counts = causes(self.records).value_counts()
        parts = [f"{kind}: {n}" for kind, n in sorted(counts.items())]
        latest = self.records.iloc[-1]
        return (f"job {self.job_id!r}: {state}, {self.total} late records ({', '.join(parts)}); latest: "
                f"{latest['operator']} key {latest['key']} at data time {latest['data_time']}, "
                f"{latest['late_ms']} ms behind watermark {latest['watermark']}")

    # -- HTML ---------------------------------------------------------------------------------
    def status_html(self) -> str:
        colour = "#c92a2a" if self.total else "#495057"
        return f'<div style="color:{colour};font-family:monospace">{escape(self.status)}</div>'

    def summary_html(self) -> str:
        if self.records.empty:
            return ""
        summary = self.summary_to_pandas()
        return _table("late records per operator and cause", SUMMARY_COLUMNS,
                      [[_plain(v) for v in row] for row in summary.itertuples(index=False)])

    def records_html(self) -> str:
        if self.records.empty:
            return "<i>no late records yet</i>"
        latest = self.records.iloc[::-1].head(self.last)  # newest first, as a monitor reads
        shown = min(self.last, self.total)
        title = f"latest late records ({shown} of {self.total}, newest first)"
        return _table(title, SHOWN_COLUMNS,
                      [[_plain(v) for v in row] for row in latest[SHOWN_COLUMNS].itertuples(index=False)],
                      highlight={"late_ms": "#ffe3e3"})

    def _repr_html_(self) -> str:
        return f"<div>{self.status_html()}{self.summary_html()}{self.records_html()}</div>"

    def __repr__(self) -> str:
        return f"LateDataSnapshot({self.status})"


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones, so the HTML table aligns numbers right."""
    return value.item() if hasattr(value, "item") else value
