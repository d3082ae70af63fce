"""The processor protocol (third build) and the context processors share for one input queue.

Records move as ``(key, value, timestamp)`` through ``forward``: RIP-58's ``Data`` without an
object per record and per operator, which would cost more than most operators' work. ``forward``
is wired once, when the chain is built, to call the children directly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from rstream.enums import TextEnum
from rstream.errors import RStreamError
from rstream.processors.metrics import OperatorMetrics
from rstream.settings import DEFAULTS, JobProperties
from rstream.time.watermark import NO_WATERMARK

if TYPE_CHECKING:
    from rstream.broker.base import RecordBlock
    from rstream.processors.chunk import Chunk, ChunkedPipeline
    from rstream.processors.watermarks import OperatorWatermark
    from rstream.state.store import StateStore


class ProcessingError(RStreamError):
    """Processing a record failed in a way that must stop the job."""


#: The offset of a ``RecordError`` (and its dead letter) raised on a result emitted at the end of a
#: batch (a per-batch aggregation's result, a window fired when the batch ends): no input record
#: made it alone.
END_OF_BATCH = -1


class RecordError(ProcessingError):
    """User code (a deserializer, a function, a serializer) raised on one record. With
    ``skip_data_error`` on (the default) the record is reported and processing goes on."""

    def __init__(self, operator: str, topic: str, queue: int, offset: int, cause: BaseException, value: Any):
        self.operator = operator
        self.topic = topic
        self.queue = queue
        self.offset = offset
        self.cause = cause
        self.value_repr = _short_repr(value)
        where = (f"the record at topic {topic!r} queue {queue} offset {offset}" if offset != END_OF_BATCH else
                 f"a result emitted at the end of a batch of topic {topic!r} queue {queue}")
        super().__init__(f"{operator} failed on {where}: {type(cause).__name__}: {cause} (value {self.value_repr})")

    def __reduce__(self) -> Any:
        return (_rebuild_record_error, (self.operator, self.topic, self.queue, self.offset,
                                        f"{type(self.cause).__name__}: {self.cause}", self.value_repr))

    def as_row(self) -> dict[str, Any]:
        return {
            "operator": self.operator, "topic": self.topic, "queue": self.queue, "offset": self.offset,
            "error": f"{type(self.cause).__name__}: {self.cause}", "value": self.value_repr,
        }


#: Headers of a dead-letter message: what went wrong, where, and in which batch.
DLQ_ERROR = "rstream-dlq-error"
DLQ_OPERATOR = "rstream-dlq-operator"
DLQ_TOPIC = "rstream-dlq-topic"
DLQ_QUEUE = "rstream-dlq-queue"
DLQ_OFFSET = "rstream-dlq-offset"
DLQ_BATCH = "rstream-dlq-batch"
DLQ_VALUE = "rstream-dlq-value"


def dead_letter_row(message: Any) -> dict[str, Any]:
    """A dead-letter message (a ``Message`` of the job's DLQ topic) as a row: batch_id, operator,
    topic, queue, offset, error, value (what the operator was given) and body (the raw bytes read)."""
    h = message.headers
    return {
        "batch_id": int(h.get(DLQ_BATCH, -1)), "operator": h.get(DLQ_OPERATOR), "topic": h.get(DLQ_TOPIC),
        "queue": int(h.get(DLQ_QUEUE, -1)), "offset": int(h.get(DLQ_OFFSET, -1)), "error": h.get(DLQ_ERROR),
        "value": h.get(DLQ_VALUE), "body": message.body,
    }


class _RemoteCause(Exception):
    """The text of an exception raised in a Spark task (its class may not exist here)."""


def _rebuild_record_error(operator: str, topic: str, queue: int, offset: int, cause: str, value: str) -> RecordError:
    name, _, text = cause.partition(": ")
    err = RecordError(operator, topic, queue, offset, _RemoteCause(text), value)
    err.args = (str(err.args[0]).replace("_RemoteCause", name),)
    return err


class UnhashableKeyError(ProcessingError, TypeError):
    """A ``key_by`` function returned a value that cannot be a key."""


#: A late record's row as JSON when orjson cannot write it (an int beyond 64 bits): ``json.dumps(row,
#: default=str)``, with one encoder for every row (``dumps`` with ``default`` builds one per call).
_LATE_ROW = json.JSONEncoder(default=str).encode


def _late_row(row: dict[str, Any]) -> bytes:
    """A late record's row as JSON: orjson's, 0.3 µs against the standard library's 3.7 µs (py-spy had
    late rows at 5 % of a window count's shuffle side with 1 % of its records late)."""
    global _orjson_dumps
    if _orjson_dumps is None:
        import orjson

        _orjson_dumps = orjson.dumps
    try:
        return _orjson_dumps(row, default=str)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return _LATE_ROW(row).encode()


_orjson_dumps: Callable[..., bytes] | None = None


def _short_repr(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Frame(NamedTuple):
    """What a record read from a framed shuffle topic (one feeding windows or joins) carries besides
    its key and value: its source queue's watermark when it was shuffled, the producer that shuffled
    it (``topic/queue/shuffle sink``), its offset in that source queue, and its join side."""

    watermark: int
    producer: str
    source_offset: int
    side: int


#: The frame of a record that came straight from a source topic (no shuffle before it).
NO_FRAME = Frame(NO_WATERMARK, "", -1, 0)


#: One on-time record of a source range as its shuffle sink saw it: (source offset, value, data time,
#: its source queue's watermark then).
SourceRecord = tuple[int, Any, Any, int]


class CountsByWindow(Protocol):
    """What a window count takes at once instead of records (``take_partial``): a source range's
    on-time records of one key counted per window start, their data times, and where they came from
    (the producer ``topic/queue/shuffle sink``, the source range ``[source_start, source_end)`` and its
    watermark before it, the join side), so the records can be found again. How it travels is the
    shuffle's business (``rstream.shuffle.wire``)."""

    starts: list[Any]
    counts: list[int]
    times: list[Any]
    producer: str
    source_start: int
    source_end: int
    watermark: int
    side: int


class LateCause(TextEnum):
    """Why a record was late (the ``cause`` column of the late-data topic; ``reason`` tells it in words)."""

    BEHIND_WATERMARK = "behind watermark"  # data time below its source queue's watermark
    WINDOW_FIRED = "window fired"  # its window had fired already: its source queue was idle
    SESSION_FIRED = "session fired"  # its session had fired already: its source queue was idle
    INTERVAL_PASSED = "interval passed"  # an interval join's watermark had passed it: its source queue was idle


Forward = Callable[[Any, Any, int], None]


class Observer(Protocol):
    """Watches a range run record by record (``job.trace`` re-executes committed ranges with one): what
    each processor forwards and which records went into a combine node's partials. Processors report
    to it through their context; nothing replaces their methods from outside."""

    def watch(self, proc: Processor, forward: Forward) -> Forward:
        """The ``forward`` that ``proc`` uses from now on: ``forward`` itself, or one that notes what
        passes through it, then calls ``forward``."""
        ...

    def combined(self, topic: str, kind: str, key: Any, ts: Any, place: int) -> None:
        """A combine node put a record of ``key`` at ``ts`` into the partial (of ``kind``, one of
        ``rstream.shuffle.wire``'s) that it sends to ``topic``, after ``place`` records of that key."""
        ...

    def resumed(self, offset: int) -> AbstractContextManager[None]:
        """While it is open, a processor that put the record at ``offset`` aside (a stream–table join
        takes a batch's records in data-time order, at its end) processes it: what happens then is
        that record's doing."""
        ...


@dataclass
class Position:
    """Where a run is: the job, the queue range of one micro-batch, and the record being read. The
    task sets ``offset`` per record; the shuffle source sets ``frame`` per record of a framed topic."""

    job: str
    topic: str
    queue: int
    #: The job's micro-batch being processed (-1: not known).
    batch_id: int = -1
    #: The range of the input queue being processed, ``[start, end)`` (-1: not known).
    start: int = -1
    end: int = -1
    #: Whether the range reaches the end of its queue as it was when the task began (nothing unread).
    caught_up: bool = True
    #: The offset of the record being processed.
    offset: int = -1
    #: What the current record of a framed shuffle topic carried (its producer's watermark and source).
    frame: Frame = NO_FRAME


@dataclass
class EventTime:
    """Time as a run sees it: processing time (the wall clock, or a fixed one when a committed batch is
    re-executed), the operator watermark of a window or join topic, and the operators that fire on it."""

    #: A fixed processing time (ms) instead of the wall clock: re-executing a committed batch.
    fixed_now_ms: int | None = None
    #: The operator watermark of this (shuffle) queue, for window and join operators.
    watermarks: OperatorWatermark | None = None
    #: Per shuffle sink of a source pipeline: the source queue's watermark, restored from the last commit.
    source_watermarks: dict[str, int] = field(default_factory=dict)
    #: Per framed shuffle topic: the producers (``topic/queue/sink``) that feed it.
    producers: dict[str, list[str]] = field(default_factory=dict)
    #: The watermark this queue's results carry on (to the next stage's markers).
    emit_watermark: int = NO_WATERMARK
    #: The timed operators (windows, joins, process functions) told of every watermark move.
    operators: list[Any] = field(default_factory=list)
    #: Whether an end-of-input flush declared every source idle in this batch.
    flushed: bool = False
    #: The broker time of the last record read on a window or join topic.
    read_ms: int = 0


@dataclass
class Outputs:
    """Where a run's results go: the lists of records per output topic and queue (appended with the
    batch's commit), the late-data and dead-letter topics, and what was printed or counted."""

    #: The job's late-data topic (None: late records only counted).
    late_topic: str | None = None
    #: Where records that user code raised on go: the job's dead-letter topic (None: only counted).
    dlq_topic: str | None = None
    #: Makes the list collecting one output topic and queue (a plain list unless re-executing).
    make_output: Callable[[str, int], list[Any]] | None = None

    def __post_init__(self) -> None:
        self.collected: dict[tuple[str, int], Any] = {}  # lists, or columns its writer keeps (``columns``)
        self.printed: list[str] = []
        self.late_count = 0
        self.error_count = 0

    def output(self, topic: str, queue: int) -> list[Any]:
        """The list collecting this batch's records for ``topic``/``queue``."""
        key = (topic, queue)
        out = self.collected.get(key)
        if out is None:
            out = self.collected[key] = [] if self.make_output is None else self.make_output(topic, queue)
        return out

    def columns(self, topic: str, queue: int, make: Callable[[], Any]) -> Any:
        """Like ``output``, kept as columns by the writer that fills it: the output of ``topic``/``queue``
        already made, else ``make()``'s (a sink's ``BodyRecords``, a shuffle sink's items or frames),
        else (a range re-executed with ``make_output``) the plain list of ``output``."""
        key = (topic, queue)
        out = self.collected.get(key)
        if out is None and self.make_output is None:
            out = self.collected[key] = make()
        return out if out is not None else self.output(topic, queue)


@dataclass(frozen=True)
class RunMode:
    """How a range runs: which speed paths it may take, and what watches it (a task runs with the
    defaults and the topology's rewrites; ``job.trace`` re-executes record by record with an observer)."""

    #: Whether processors may hand results on a chunk at a time (``rstream.processors.chunk``);
    #: False when re-executing a range record by record, every result through ``forward``.
    chunked: bool = True
    #: The topology's rewrites (``rstream.processors.rewrites``): a processor takes a speed path only if named.
    rewrites: frozenset[str] = frozenset()
    #: Whether combine nodes combine (False: a range run again to find the records a partial holds,
    #: each of them then goes on alone).
    combine: bool = True
    #: What watches this run (``job.trace``'s re-execution; None in a task): every processor hands it
    #: its ``forward`` as it opens (``Observer.watch``), and a combine node says what it combined.
    observer: Observer | None = None
    #: The records a window count's ``CountsByWindow`` counted, per key, found again by running its
    #: source range once more (set by the task; ``rstream.runtime.queue_run.QueueRun.source_records``).
    source_records: Callable[[CountsByWindow], dict[Any, list[SourceRecord]]] | None = None


@dataclass
class StreamContext:
    """What the processors of one input queue are told during one micro-batch, in named parts: where
    the run is (``at``), the job's ``settings``, its state ``store``, time and watermarks (``time``),
    where results go (``out``) and how it runs (``mode``); and what a processor may do with them
    (``now_ms``, ``advance``, ``late``, ``dead_letter``, ``output``, ``record_error``)."""

    at: Position
    settings: JobProperties = DEFAULTS
    store: StateStore | None = None
    time: EventTime = field(default_factory=EventTime)
    out: Outputs = field(default_factory=Outputs)
    mode: RunMode = RunMode()

    def now_ms(self) -> int:
        """Processing time (ms): the wall clock, or the fixed time of a batch being re-executed."""
        if self.time.fixed_now_ms is not None:
            return self.time.fixed_now_ms
        return time.time_ns() // 1_000_000

    def idle_clock(self, at_end: bool = False) -> int | None:
        """The processing time a producer's silence is measured against. A consumer that is behind its
        queue must not take its own backlog for silence (newer records of a producer may wait unread),
        so it goes by the broker time of the last record it read; at the end of a range that read the
        whole queue, by the wall clock. None: nothing read yet while behind, so no producer is idle."""
        caught_up, read_ms = self.at.caught_up, self.time.read_ms
        if at_end and caught_up:
            return max(self.now_ms(), read_ms)
        if read_ms:
            return read_ms
        return self.now_ms() if caught_up else None

    def advance(self, force_idle: bool = False, at_end: bool = False) -> int:
        """Recompute the operator watermark and let window and join operators fire what is due."""
        t = self.time
        if t.watermarks is None:
            return NO_WATERMARK
        wm = t.watermarks.current(self.idle_clock(at_end), force_idle)
        for op in t.operators:
            op.on_watermark(wm)
        from rstream.processors.watermarks import FIRE_ALL

        if wm < FIRE_ALL:
            t.emit_watermark = max(t.emit_watermark, wm)
        return wm

    def late(self, operator: str, key: Any, value: Any, data_time: int, watermark: int, cause: LateCause,
             reason: str) -> None:
        """Record a late record in the job's late-data topic (appended with the batch): its coded
        ``cause`` and the ``reason`` in words."""
        out, at = self.out, self.at
        out.late_count += 1
        if out.late_topic is None:
            return
        frame = at.frame
        topic, _, rest = frame.producer.rpartition("/")[0].rpartition("/") if frame.producer else ("", "", "")
        row = {
            "job": at.job, "operator": operator, "key": _short_repr(key), "value": _short_repr(value),
            "data_time": data_time, "watermark": watermark, "late_ms": watermark - data_time,
            "cause": cause.value, "reason": reason,
            "topic": topic or at.topic, "queue": int(rest) if rest else at.queue,
            "offset": frame.source_offset if frame.producer else at.offset,
            "shuffle_topic": at.topic, "shuffle_queue": at.queue, "shuffle_offset": at.offset,
        }
        out.output(out.late_topic, 0).append((None, _late_row(row), data_time, None, None))

    def dead_letter(self, error: RecordError, key: Any, body: bytes, born: int) -> None:
        """Send the input record user code raised on to the dead-letter topic, as it was read (key,
        raw body, born time), with what went wrong in its headers (``DLQ_*``)."""
        out = self.out
        out.error_count += 1
        if out.dlq_topic is None:
            return
        headers = {
            DLQ_ERROR: f"{type(error.cause).__name__}: {error.cause}", DLQ_OPERATOR: error.operator,
            DLQ_TOPIC: error.topic, DLQ_QUEUE: str(error.queue), DLQ_OFFSET: str(error.offset),
            DLQ_BATCH: str(self.at.batch_id), DLQ_VALUE: error.value_repr,
        }
        out.output(out.dlq_topic, 0).append((key, body, born, headers, "DLQ"))

    def output(self, topic: str, queue: int) -> list[Any]:
        """The list collecting this batch's records for ``topic``/``queue`` (``Outputs.output``)."""
        return self.out.output(topic, queue)

    def record_error(self, operator: str, exc: BaseException, value: Any) -> RecordError:
        at = self.at
        return RecordError(operator, at.topic, at.queue, at.offset, exc, value)


def _drop(key: Any, value: Any, ts: int) -> None:
    return None


class Processor:
    """A real node's processor for one queue. Each kind is made by its ``OperatorSpec``
    (``rstream.processors.spec``), declared beside it; a new operator is a module of this package
    with its processor and its spec (``rstream.processors.catalog`` finds it).

    The contract, in the order a task calls it (``rstream.runtime.queue_run.QueueRun``):

    1. ``open(ctx)`` before the batch's first record. ``ctx`` (a ``StreamContext``) comes in named
       parts: ``ctx.at`` where the run is (job, topic, queue, batch, range, the record's offset and
       frame), ``ctx.settings``, ``ctx.store``, ``ctx.time`` (processing time, watermarks, the timed
       operators), ``ctx.out`` (where results, late records and dead letters go) and ``ctx.mode``
       (which speed paths it may take, what observes it). A timed operator appends itself to
       ``ctx.time.operators``.
    2. ``process(key, value, ts)`` per record, in the queue's order; results go on through
       ``self.forward(key, value, ts)``. User code that raises is ``ctx.record_error(...)`` raised.
    3. ``on_watermark(watermark)`` (timed operators) whenever the operator watermark may have moved: at a
       marker, an idle tick, a record that raised its producer's watermark, and the batch's end. Fire
       what is due, in data-time order; never depend on where the batch ended (the rule of
       ``rstream.processors.ordered``: results are a function of the records, not of batch cuts).
    4. ``flush()`` after the last record: stage what changed in the store (persisted with the batch's
       one tagged commit).
    5. ``metrics()``: what it did, typed.

    A new operator implements these and nothing else (``tests/support/bucket_max.py`` is one): the
    per-record path is the semantics. Everything else is optional and declared: speed paths (``pure``
    with ``chunk``, ``chunked_root`` with ``chunk_of``/``chunk_done``, ``take_chunk``, ``writes_chunks``
    with ``bodies``/``append``), each taken only where its rewrite is named
    (``rstream.processors.rewrites``) and each proved to give what the per-record path gives; and what a
    trace needs (``emits_results``, ``fires_windows``, ``results_later``, ``result_of``, ``staged``).
    The chunked plan reaches every processor through ``take_chunk``, whose default is the adapter for
    per-record operators (each item to ``process``, in order). An operator never names another's
    class: it asks these, and what several operators share lives in a neutral module (this one,
    ``timed``, ``fold``, ``chunk``)."""

    #: Whether ``chunk`` may run this processor over many records at once: no state, no side effect.
    pure = False
    #: Whether it writes a chunk of results at once: ``bodies(chunk)`` serializes them (None: it
    #: cannot, nothing changed) and ``append(chunk, bodies)`` writes them (a sink; a window fires
    #: what is due straight into it).
    writes_chunks = False
    #: Whether this root's ``chunk_of`` turns a list of records into a ``Chunk``.
    @property
    def chunked_root(self) -> bool:
        return False

    #: Whether what it forwards are results of its state (aggregations, windows, joins): a trace
    #: follows them to what they caused.
    emits_results = False
    #: Whether its results are windows that fire (a trace says "fired", not "emitted").
    fires_windows = False
    #: Whether results of a state entry may come in a later batch, when the entry is deleted (a window
    #: that fires, a timer whose ``on_timer`` clears its key): a trace follows an entry to that batch.
    @property
    def results_later(self) -> bool:
        return False

    #: The context of the queue range being processed (set by ``open``).
    ctx: StreamContext

    def __init__(self, name: str) -> None:
        self.name = name
        self.children: list[Processor] = []
        self.records_in = 0
        self.forward: Callable[[Any, Any, int], None] = _drop

    def wire(self) -> None:
        """Point ``forward`` straight at the children (called once the chain is complete)."""
        kids = [c.process for c in self.children]
        if not kids:
            self.forward = _drop
        elif len(kids) == 1:
            self.forward = kids[0]
        else:
            def fan_out(key: Any, value: Any, ts: int) -> None:
                for kid in kids:
                    kid(key, value, ts)

            self.forward = fan_out

    def open(self, ctx: StreamContext) -> None:
        """Called before the batch's first record."""
        self.ctx = ctx
        if ctx.mode.observer is not None:
            self.forward = ctx.mode.observer.watch(self, self.forward)

    def receive(self, offset: int, key: Any, body: bytes, born: int, store: int, headers: Any) -> None:
        """For a root (a source or shuffle source): one record as read from its topic."""
        raise NotImplementedError(f"{type(self).__name__} is no root")

    def chunk_of(self, records: RecordBlock) -> Chunk:
        """For a root that can read chunks (``chunked_root``): the chunk of ``records``."""
        raise NotImplementedError(f"{type(self).__name__} reads no chunks")

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        self.forward(key, value, ts)

    def chunk(self, chunk: Chunk) -> Chunk:
        """``process`` over every item of ``chunk`` at once, for a ``pure`` processor: the items it
        would forward. It must change nothing (counters included) and may raise anything."""
        raise NotImplementedError(f"{type(self).__name__} is not pure")

    def chunk_done(self, records: RecordBlock) -> None:
        """For a root: after ``records`` went through as a chunk, leave the context as the last
        record's ``receive`` would have."""

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        """Take the items the pure stages before this processor made of a chunk of records: the one
        entry point of the chunked plan. By default the adapter for a per-record operator: ``process``
        on each item, in order (``plan.each`` sets the offset and reports errors). A faster one must
        leave the same results, errors and metrics."""
        plan.each(chunk, self.process)

    def on_watermark(self, watermark: int) -> None:
        """For a timed operator (one that appends itself to ``ctx.time.operators`` in ``open``): the
        operator watermark may have moved to ``watermark``; fire what is due, in data-time order
        (``FIRE_ALL`` of ``rstream.processors.watermarks``: the end of input, fire everything)."""

    def flush(self) -> None:
        """Called after the batch's last record."""

    def alone(self) -> None:
        """Called by the task, before ``open``, when no other processor sees the values this one is
        given (a chain of pure operators from the root, no fan-out): it may keep them as they are,
        and the records it gets can be found again by running the source range once more."""

    def result_of(self, key: Any, state_key: Any) -> bool:
        """Whether a result it forwarded with ``key`` comes from its state entry ``state_key`` (a trace
        follows a state change to the results it caused)."""
        return bool(key == state_key)

    def carried_watermark(self) -> int | None:
        """The source watermark this processor keeps from one batch of its queue to the next (a
        framed shuffle sink's, given back in ``EventTime.source_watermarks``); None: none."""
        return None

    def written(self) -> dict[str, int]:
        """Per topic this processor writes to: how many input records its outputs of the batch stand
        for (a batch's records out); control records it wrote stand for none."""
        return {}

    def metrics(self) -> OperatorMetrics:
        """What this processor did in the batch (typed; ``rstream.processors.metrics``)."""
        return OperatorMetrics.of(records_in=self.records_in)

    def walk(self) -> list[Processor]:
        """This processor and everything downstream of it, each once, parents first."""
        seen: dict[int, Processor] = {}
        stack = [self]
        while stack:
            p = stack.pop(0)
            if id(p) not in seen:
                seen[id(p)] = p
                stack.extend(p.children)
        return list(seen.values())


class PassProcessor(Processor):
    """Forwards every record unchanged (``to_rstream()``, a table's changelog): a processor of no kind
    of its own, so it lives here and every operator module may make one."""

    pure = True

    def chunk(self, chunk: Chunk) -> Chunk:
        return chunk
