"""Time types and the watermark rule of RIP-58: ``watermark = max(previous, data time - lateness)``."""

from __future__ import annotations

from rstream.enums import TextEnum

#: The watermark before any record: nothing is late yet.
NO_WATERMARK = -(2**62)


class TimeType(TextEnum):
    """Where a record's data time comes from (the ``time_type`` job property)."""

    EVENT_TIME = "event_time"  # from the payload, via select_timestamp (else the born time)
    BORN_TIME = "born_time"  # the producer's born timestamp
    BROKER_TIME = "broker_time"  # the broker's append timestamp
    PROCESSING_TIME = "processing_time"  # the wall clock when the record is processed


def next_watermark(previous: int, data_time: int, allowed_lateness_ms: int) -> int:
    """The watermark after a record: it never decreases."""
    candidate = data_time - allowed_lateness_ms
    return candidate if candidate > previous else previous
