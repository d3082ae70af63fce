"""``.late()``: the late records of a windowed aggregation, a windowed join or an interval join as a
stream of their own.

RIP-58 and RocketMQ Streams call a record that comes after its window closed *late* and drop it;
rstream records each one in the job's late-data topic (``job.late_records()``) and, with
``.late()``, also hands it on as a stream (Flink's ``sideOutputLateData`` on windows and
``sideOutputLeftLateData`` / ``sideOutputRightLateData`` on interval joins, Bytewax's late stream
of ``collect_window`` and ``join_window``). The window or join operator sends its late records to
its ``LATE`` children instead of to its result children (``WindowedOperator.wire``), while it
processes the record that was late: so whatever the late stream writes (a sink, a shuffle) is part
of the same tagged append as the operator's other outputs, and comes out once, also through a
restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from rstream.processors.base import LateCause, Processor
from rstream.processors.spec import NodeStyle, OperatorSpec, register

if TYPE_CHECKING:
    from rstream.settings import JobProperties


class LateRecord(NamedTuple):
    """A record that came too late for its window (or a join's interval), as ``.late()`` hands it on
    (its key is the record's key, its data time the record's). ``cause`` is coded (``LateCause``),
    ``reason`` tells it in words; ``watermark`` is what the record was judged by; ``operator`` is the
    window or join operator (``COUNT-4``, ``JOIN-5``); ``side`` is ``"left"`` or ``"right"`` for a
    join's record, None for an aggregation's. ``value`` is None only for a record of a combined
    partial that running its source range again did not give back (``reason`` says so)."""

    key: Any
    value: Any
    data_time: int
    watermark: int
    cause: LateCause
    reason: str
    operator: str
    side: str | None = None

    def __str__(self) -> str:
        where = self.operator if self.side is None else f"{self.operator}, {self.side}"
        return f"{self.value!r} at {self.data_time}: {self.cause}, watermark {self.watermark} ({where})"

    @property
    def late_ms(self) -> int:
        """How far behind the watermark it was (ms)."""
        return self.watermark - self.data_time


class LateProcessor(Processor):
    """Hands on the late records of the window or join operator it hangs from (its parent calls ``process``
    with a ``LateRecord`` for each one; never with a result)."""

    #: Marks a child that takes its parent's late records, not its results (``WindowedOperator.wire``).
    takes_late = True


def _make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return LateProcessor(name)


LATE_STYLE = NodeStyle("box", "#ffe3e3", "late data")

#: ``windowed_result.late()``, ``joined.late()``: a windowed aggregation's or join's late records, drawn on
#: an edge labelled "late".
LATE = register(OperatorSpec("late", LATE_STYLE, _make, side_output="late"))
