"""The job's settings: one frozen object, validated once, passed whole from the job to its tasks and
processors (``RocketMQStream(properties=...)`` takes it, or a dict of the same names)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from rstream.enums import TextEnum
from rstream.errors import RStreamError
from rstream.time.watermark import TimeType


class JobError(RStreamError):
    """The job cannot start or failed while running (also: a job property it cannot use)."""


class AggregateEmit(TextEnum):
    """When a keyed aggregation emits (the ``aggregate_emit`` job property)."""

    RECORD = "record"  # every input record emits its key's updated result (RocketMQ Streams)
    BATCH = "batch"  # each key's result once per micro-batch, combined before the shuffle


class Guarantee(TextEnum):
    """What a crash may do to a job's sink (the ``processing_guarantee`` job property)."""

    EXACTLY_ONCE = "exactly_once"  # sink records, state, shuffle and offsets in one commit
    AT_LEAST_ONCE = "at_least_once"  # sink records first, then the commit: a crash between repeats them


class ConsumeFrom(TextEnum):
    """Where a new job starts reading its source topics (the ``consume_from`` job property)."""

    FIRST = "first"
    LAST = "last"


def _enum(cls: type[Enum], name: str, value: Any) -> Any:
    try:
        return cls(value)
    except ValueError:
        raise JobError(f"{name} must be one of {[m.value for m in cls]}, got {value!r}") from None


@dataclass(frozen=True)
class JobProperties:
    """Job settings; pass them as a dict to ``RocketMQStream(properties=...)``. Made once and
    validated when made; the job, its tasks and their processors all read this one object.

    - ``data_dir``: where the default broker and job folders live (``rstream-data``).
    - ``job_dir``: the job's folder: Spark checkpoint and local state (``<data_dir>/jobs/<job id>``).
    - ``consume_from``: ``"first"`` (default: a notebook produces, then runs) or ``"last"`` offset.
    - ``skip_data_error``: report a record whose deserializer, function or serializer raises,
      and go on (default True); False stops the job with that error.
    - ``trigger_interval_ms``: how often a job started with ``start()`` runs an empty trigger while
      it has no input (100); meanwhile its source watches the broker and input is planned as soon
      as it arrives. A batch that had input is followed by the next one at once.
    - ``tasks``: Spark tasks per batch (default: Spark's default parallelism, one per core).
    - ``max_records_per_queue``: records per queue range at most (1 000 000). A source queue gets one
      range per batch; a shuffle queue may get more (a batch's second stage drains it step by step).
    - ``sink_queues``: queues of a sink topic that does not exist yet (4).
    - ``time_type``: where data time comes from: ``event_time`` (``select_timestamp``, else the
      born time), ``born_time``, ``broker_time`` or ``processing_time`` (a ``TimeType``).
    - ``allowed_lateness_ms``: watermark = max(watermark, data time - this) per source queue (2000).
    - ``idle_timeout_ms``: a source queue without data for this long (processing time) stops
      holding windows back; when all are idle, open windows fire (2000).
    - ``aggregate_emit``: ``"record"`` (default, as RocketMQ Streams: every input record emits its
      key's updated result, in the order records arrive, or in data-time order where the aggregation
      says ``order="data_time"``: ``rstream.processors.aggregate``) or ``"batch"`` (each key's result
      once per micro-batch; count, sum, min, max and avg then combine values before the shuffle where
      the topology has a ``COMBINE`` node, as Spark does; far faster, fewer updates).
    - ``shuffle_in_source_job``: a batch's source tasks also run its shuffle side, once all its
      source ranges are committed, where the shuffle topic is written by sources only (True,
      default: one Spark job per batch instead of two; for windows and joins also in the batch that
      ``run_until_idle``'s idle flush follows: its tasks send the flush), where the topology has the
      ``"shuffle in source"`` rewrite (``build(optimize=...)``, drawn in its title); False: always as
      a second Spark job, which the driver starts when the first has ended.
    - ``processing_guarantee``: ``"exactly_once"`` (default: a range's sink records go to the broker
      in the same transaction as its state changes, shuffle records and commit tag, so a rerun writes
      nothing twice) or ``"at_least_once"`` (its sink records are appended first, on their own, then
      the rest with the commit tag: a task that dies between the two leaves its sink records without
      a commit, and the rerun writes them again, as RocketMQ Streams 1.1 and Kafka Streams'
      ``at_least_once`` do; for teaching, or a sink that tolerates repeats).
    - ``pack_shuffle``: on a broker that stores one message per record (RocketMQ), store many of a
      shuffle topic's records in one message (True, default): only rstream reads a shuffle topic, and
      RocketMQ stores, indexes and serves one message where it would have many. Its records keep
      offsets of their own, not dense (``create_topic(packed=True)``). The embedded broker stores
      record batches whatever this says. A shuffle topic that exists keeps how it was made.
    Combining before the shuffle is no job property: it is a rewrite of the topology, chosen at the
    second build (``builder.build(combine=...)``) and drawn there as a ``COMBINE`` node.
    """

    data_dir: str = "rstream-data"
    job_dir: str | None = None
    consume_from: ConsumeFrom = ConsumeFrom.FIRST
    skip_data_error: bool = True
    trigger_interval_ms: int = 100
    tasks: int | None = None
    max_records_per_queue: int = 1_000_000
    sink_queues: int = 4
    time_type: TimeType = TimeType.EVENT_TIME
    allowed_lateness_ms: int = 2000
    idle_timeout_ms: int = 2000
    aggregate_emit: AggregateEmit = AggregateEmit.RECORD
    shuffle_in_source_job: bool = True
    processing_guarantee: Guarantee = Guarantee.EXACTLY_ONCE
    pack_shuffle: bool = True

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "consume_from", _enum(ConsumeFrom, "consume_from", self.consume_from))
        set_(self, "aggregate_emit", _enum(AggregateEmit, "aggregate_emit", self.aggregate_emit))
        set_(self, "time_type", _enum(TimeType, "time_type", self.time_type))
        set_(self, "processing_guarantee", _enum(Guarantee, "processing_guarantee", self.processing_guarantee))
        for name in ("allowed_lateness_ms", "idle_timeout_ms"):
            if int(getattr(self, name)) < 0:
                raise JobError(f"{name} must not be negative, got {getattr(self, name)!r}")
        for name in ("trigger_interval_ms", "max_records_per_queue", "sink_queues"):
            if int(getattr(self, name)) < 1:
                raise JobError(f"{name} must be at least 1, got {getattr(self, name)!r}")

    @classmethod
    def of(cls, props: Mapping[str, Any] | JobProperties | None) -> JobProperties:
        """The settings from a dict of job properties (unknown names are an error), or as given."""
        if props is None:
            return cls()
        if isinstance(props, JobProperties):
            return props
        known = {f.name for f in fields(cls)}
        moved = sorted(set(props) & {"combine_counts", "combine_windows"})
        if moved:
            raise JobError(f"{moved[0]} is no job property any more: combining before the shuffle is chosen "
                           "at the second build, builder.build(combine=False) for one shuffle record per record")
        unknown = sorted(set(props) - known)
        if unknown:
            raise JobError(f"unknown job properties {unknown}; known ones are {sorted(known)}")
        return cls(**dict(props))

    @property
    def per_batch(self) -> bool:
        """Whether keyed aggregations emit once per batch (``aggregate_emit="batch"``)."""
        return self.aggregate_emit is AggregateEmit.BATCH


#: The settings of a job made without properties.
DEFAULTS = JobProperties()
