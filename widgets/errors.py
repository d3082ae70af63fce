"""``ErrorTable``: a live table of the records a job skipped because user code raised on them, read
from the job's dead-letter topic (so it holds every one of them, also after a restart). A view over
``ErrorSnapshot``; it sits beside the ``LateDataTable``: late records and bad records are data too."""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rstream.processors.base import END_OF_BATCH

from .html import ALERT, box, status, table
from .live import LiveView

if TYPE_CHECKING:  # the snapshot needs no Spark to be made or read: tests/processors use it without pyspark
    from rstream import RocketMQStream

SHOWN_COLUMNS = ["batch_id", "operator", "topic", "queue", "offset", "error", "value"]
SUMMARY_COLUMNS = ["operator", "error", "records"]


@dataclass(frozen=True)
class ErrorSnapshot:
    """Every dead letter of a job, oldest first; the HTML shows a summary per operator and kind of
    error, and the ``last`` newest records."""

    job_id: str
    running: bool
    records: Any
    last: int
    taken_at: float

    @classmethod
    def of(cls, job: RocketMQStream, last: int = 20) -> ErrorSnapshot:
        if last < 1:
            raise ValueError(f"last must be at least 1 record, got {last!r}")
        return cls(job.job_id, job.is_running, job.errors(), int(last), time.time())

    @property
    def total(self) -> int:
        return len(self.records)

    def to_pandas(self) -> Any:
        """Every skipped record: ``job.errors()``' columns, with the raw body as read."""
        return self.records.copy()

    def summary_to_pandas(self) -> Any:
        """Per operator and kind of error (the exception's class), how many records."""
        import pandas as pd

        if self.records.empty:
            return pd.DataFrame(columns=SUMMARY_COLUMNS)
        kinds = self.records["error"].str.partition(":")[0]
        frame = self.records.assign(error=kinds)
        return frame.groupby(["operator", "error"]).size().rename("records").reset_index()[SUMMARY_COLUMNS]

    @property
    def status(self) -> str:
        state = "running" if self.running else "stopped"
        if self.records.empty:
            return f"job {self.job_id!r}: {state}, no record was skipped"
        newest = self.records.iloc[-1]
        where = (f"offset {newest['offset']}" if newest["offset"] != END_OF_BATCH else
                 f"a result at the end of batch {newest['batch_id']}")
        return (f"job {self.job_id!r}: {state}, {self.total} records skipped (dead-letter topic); newest: "
                f"{newest['operator']} on {newest['topic']}/{newest['queue']} {where}: {newest['error']}")

    def tables_html(self) -> str:
        """The summary and the newest records as HTML (empty when nothing was skipped)."""
        if self.records.empty:
            return ""
        summary = table("skipped records per operator and error", SUMMARY_COLUMNS,
                        [list(r) for r in self.summary_to_pandas().itertuples(index=False)])
        latest = self.records.iloc[::-1].head(self.last)
        rows = [list(r) for r in latest[SHOWN_COLUMNS].itertuples(index=False)]
        return summary + table(f"latest skipped records ({len(rows)} of {self.total}, newest first)", SHOWN_COLUMNS, rows)

    def status_html(self) -> str:
        return status(self.status, ALERT if self.total else "#495057")

    def _repr_html_(self) -> str:
        return f"<div>{self.status_html()}{self.tables_html()}</div>"


class ErrorTable(LiveView):
    """The records ``job`` skipped because a deserializer, function or serializer raised on them,
    per operator and error, and the newest ``last`` (20). ``start()`` follows the job."""

    kind = "errors"

    def __init__(self, job: RocketMQStream, interval: float = 0.25, last: int = 20, **kwargs: Any) -> None:
        self.tables = box()
        status_line = box()
        super().__init__(job, [status_line, self.tables], status_line, interval, **kwargs)
        self.last = int(last)
        self.refresh()

    def snapshot(self) -> ErrorSnapshot:
        return ErrorSnapshot.of(self.job, self.last)

    def draw(self) -> Hashable:
        seen = self.seen()
        snap = self.snapshot()
        self.status_line.value = snap.status_html()
        self.tables.value = snap.tables_html()
        return seen
