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
from typing import TYPE_CHECKING, Any

from rstream.processors.base import Processor
from rstream.processors.spec import NodeStyle, OperatorSpec, register
from rstream.processors.timed import LateRecord

if TYPE_CHECKING:
    from rstream.settings import JobProperties

__all__ = ["LATE", "LateProcessor", "LateRecord"]


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
