"""The shuffle's wire: every kind of record a shuffle topic holds, its headers and body layout, and
one ``decode()`` that turns a stored record back into a typed ``ShuffleRecord``.

A shuffle record stands for one or more input records, or for none (a control record):

=================  ======================================  ==============================  =========
kind               headers                                 body (``serde.codec.encode``)   records
=================  ======================================  ==============================  =========
record             none                                    the value                       1
framed record      none (on a framed topic)                ``(value, watermark, producer,  1
                                                           source offset, side)``
fold partial       ``rstream-partial: fold``               ``(accumulator, records)``      records
records partial    ``rstream-partial: records``            runs ``[time, n, time, n ...]`` sum of n
window partial     ``rstream-partial: windows``            ``WindowPartial`` as a tuple    its times
watermark marker   ``rstream-wm``, ``rstream-producer``,   empty                           0
                   ``rstream-active`` [, ``rstream-behind``]
                   [, ``rstream-flush``]
idle / flush tick  ``rstream-tick`` [, ``rstream-flush``]  empty                           0
=================  ======================================  ==============================  =========

Records, framed records and markers are RIP-58's shuffle (a framed record carries what RIP-58 puts
in a shuffle message's header: the watermark its source queue had). Partials are what rstream's
combine rewrite sends instead of the records they stand for (``rstream.shuffle.combine``); ticks are
rstream's idleness signal. To add a kind: a header value here, its ``ShuffleRecord`` subclass, a
branch in ``decode``, and the writer (a combiner) and reader (``rstream.shuffle.source``).

Nothing outside ``rstream.shuffle`` names a header: the shuffle sink and source, the trace, the topic
browser and the task ask this module (``decode``, ``partial_kind``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from rstream.broker.base import CommitTag
from rstream.serde.codec import decode as decode_value
from rstream.time.watermark import NO_WATERMARK

if TYPE_CHECKING:
    from rstream.processors.base import CountsByWindow

#: Headers of the control records (data records have none).
WM_HEADER = "rstream-wm"
PRODUCER_HEADER = "rstream-producer"
ACTIVE_HEADER = "rstream-active"
#: On a marker: its producer's range stopped short of its queue's end (a backlog waits): not idle.
BEHIND_HEADER = "rstream-behind"
TICK_HEADER = "rstream-tick"
FLUSH_HEADER = "rstream-flush"
#: Header of a record that stands for several input records (a combine rewrite's), with its kind.
PARTIAL_HEADER = "rstream-partial"
FOLD = "fold"
RECORDS = "records"
WINDOWS = "windows"
FOLD_HEADERS = {PARTIAL_HEADER: FOLD}
RECORDS_HEADERS = {PARTIAL_HEADER: RECORDS}
WINDOWS_HEADERS = {PARTIAL_HEADER: WINDOWS}

#: Tags of control records (RocketMQ message tags: a consumer outside rstream may filter on them).
MARKER_TAG = "WATERMARK"
TICK_TAG = "TICK"

class WindowPartial(NamedTuple):
    """The body of a window partial (a plain tuple on the wire): a source range's on-time records of
    one key, counted per window start, their data times in order (a record of a sliding window counts
    in several windows), and where they came from: the producer (``topic/queue/shuffle sink``), the
    source range it read and its watermark before that range, so the records can be found again
    (``RunMode.source_records``), and the join side."""

    starts: list[Any]
    counts: list[int]
    times: list[Any]
    producer: str
    source_start: int
    source_end: int
    watermark: int
    side: int


# -- typed records -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ShuffleRecord:
    """One shuffle record, decoded. ``records``: how many input records it stands for (0: a control
    record); ``times``: their data times where it holds several."""

    kind = "record"
    key: Any = None

    @property
    def records(self) -> int:
        return 1

    @property
    def control(self) -> bool:
        return self.records == 0

    def describe(self) -> str:
        """What it is, in a learner's words."""
        return f"one record of key {self.key!r}"

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        """How a topic browser shows it: its kind in words, whether it has a key, its value, details."""
        return "data", True, getattr(self, "value", None), {}

    #: Whether it holds a fold's accumulator instead of records (an aggregation merges it whole).
    folded = False

    def origin(self) -> tuple[str, int, Any] | None:
        """Where the one record it stands for was read, as the shuffle sink saw it: ``(producer
        topic/queue/sink, offset there, value)``; None where the record does not say (a plain record,
        a partial, a control record)."""
        return None

    def counts_by_window(self) -> CountsByWindow | None:
        """What a window count takes of it at once (its on-time records counted per window, and where
        they came from); None for every kind but a window partial read as sent."""
        return None


@dataclass(frozen=True)
class Record(ShuffleRecord):
    """One input record: its value (RIP-58's shuffle record)."""

    value: Any = None


@dataclass(frozen=True)
class FramedRecord(ShuffleRecord):
    """One input record on a framed topic (feeding windows or joins): its value and the frame it
    carries: its source queue's watermark, the producer that sent it, its offset there, its join side."""

    kind = "framed record"
    value: Any = None
    watermark: int = NO_WATERMARK
    producer: str = ""
    source_offset: int = -1
    side: int = 0

    def origin(self) -> tuple[str, int, Any] | None:
        return self.producer, self.source_offset, self.value

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        detail: dict[str, Any] = {"watermark": self.watermark, "producer": self.producer,
                                  "source_offset": self.source_offset}
        if self.side:
            detail["side"] = "right"
        return "data", True, self.value, detail


@dataclass(frozen=True)
class _Partial(ShuffleRecord):
    times: list[Any] = field(default_factory=list)

    @property
    def records(self) -> int:
        return len(self.times)

    def describe(self) -> str:
        n = self.records
        return f"{n} record{'' if n == 1 else 's'} of {self.key!r} combined into one"


@dataclass(frozen=True)
class FoldPartial(_Partial):
    """A source range's records of one key folded into one accumulator (``aggregate_emit="batch"``):
    the aggregation merges it. ``count`` records went into it (their times are not kept)."""

    kind = "fold partial"
    folded = True
    accumulator: Any = None
    count: int = 0

    @property
    def records(self) -> int:
        return self.count

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        return "partial", True, self.describe(), {"records": self.records, "accumulator": self.accumulator}


@dataclass(frozen=True)
class RecordsPartial(_Partial):
    """A source range's records of one key before a count of every update: how many came and their
    data times, in order; the count emits an update for each, as if each had come alone."""

    kind = "records partial"

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        return "partial", True, self.describe(), {"records": self.records, "times": self.times}


@dataclass(frozen=True)
class WindowCounts(_Partial):
    """A source range's on-time records of one key before a count over fixed windows, counted per
    window start (``partial``: the body as sent)."""

    kind = "window partial"
    partial: WindowPartial | None = None

    def counts_by_window(self) -> CountsByWindow | None:
        return cast("CountsByWindow | None", self.partial)  # (a read-only tuple of the protocol's fields)

    def describe(self) -> str:
        p = self.partial
        where = f" from {p.producer} offsets {p.source_start}..{p.source_end}" if p else ""
        return f"{super().describe()}{where}, counted per window"

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        p = self.partial
        if p is None:
            return "partial", True, self.describe(), {"records": self.records, "times": self.times}
        return "partial", True, self.describe(), {
            "records": self.records, "counts": dict(zip(p.starts, p.counts)), "times": self.times,
            "producer": p.producer, "source_offsets": f"{p.source_start}..{p.source_end}",
            "watermark": None if p.watermark <= NO_WATERMARK else p.watermark}


@dataclass(frozen=True)
class Marker(ShuffleRecord):
    """A producer's watermark at the end of its range (RIP-58's watermark message)."""

    kind = "watermark"
    watermark: int = NO_WATERMARK
    producer: str = ""
    active_ms: int | None = None
    behind: bool = False
    #: the end of input reached this producer (it read ``run_until_idle``'s flush): it is done
    flush: bool = False

    @property
    def records(self) -> int:
        return 0

    def describe(self) -> str:
        return f"watermark {self.watermark} of {self.producer}" + (" (end of its input)" if self.flush else "")

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        detail: dict[str, Any] = {"producer": self.producer, "active_ms": self.active_ms}
        if self.behind:
            detail["behind"] = True
        if self.flush:
            detail["end_of_input"] = True
        return "watermark", False, self.watermark, detail


@dataclass(frozen=True)
class Tick(ShuffleRecord):
    """An idle tick: makes window and join operators check their producers' idleness; a flush tick
    (end of input, ``run_until_idle``) declares every producer idle."""

    kind = "idle tick"
    tick_ms: int = 0
    flush: bool = False

    @property
    def records(self) -> int:
        return 0

    def describe(self) -> str:
        return "flush tick (every producer idle)" if self.flush else f"idle tick at {self.tick_ms}"

    def shown(self) -> tuple[str, bool, Any, dict[str, Any]]:
        return "flush tick" if self.flush else "idle tick", False, None, {"tick_ms": self.tick_ms}


def source_record(value: Any = None) -> ShuffleRecord:
    """What a record read straight from a source topic is, in the shuffle's terms: one record."""
    return Record(None, value)


def decode(key: bytes | None, body: bytes, headers: Mapping[str, str] | None, framed: bool | None = None) -> ShuffleRecord:
    """The typed record a shuffle topic stores as ``key``, ``body``, ``headers``. ``framed``: whether
    the topic feeds windows or joins (None: guessed from the body)."""
    headers = headers or {}
    if WM_HEADER in headers:
        return Marker(None, int(headers[WM_HEADER]), headers.get(PRODUCER_HEADER, ""),
                      _int(headers.get(ACTIVE_HEADER)), BEHIND_HEADER in headers, FLUSH_HEADER in headers)
    if TICK_HEADER in headers:
        return Tick(None, int(headers[TICK_HEADER]), FLUSH_HEADER in headers)
    k = decode_value(key) if key else None
    value: Any = decode_value(body) if body else None
    kind = headers.get(PARTIAL_HEADER)
    if kind == RECORDS:
        return RecordsPartial(k, run_times(value))
    if kind == WINDOWS:
        partial = WindowPartial(*value)
        return WindowCounts(k, list(partial.times), partial)
    if kind == FOLD:
        acc, count = value
        return FoldPartial(k, [], acc, count)
    if framed is None:
        framed = type(value) is tuple and len(value) == 5 and type(value[2]) is str
    if framed:
        inner, wm, producer, source_offset, side = value
        return FramedRecord(k, inner, wm, producer, source_offset, side)
    return Record(k, value)


def on_time_by_key(records: Iterable[tuple[Any, ...]], producer: str) -> dict[Any, list[tuple[int, Any, Any, int]]]:
    """Of the framed records a source range wrote to one queue (``(key, body, data time, headers,
    tags)``, as a shuffle sink appends them), those ``producer`` sent on time, per key in order: ``(source
    offset, value, data time, watermark)`` (a late one came alone, not in a window count's partial)."""
    found: dict[Any, list[tuple[int, Any, Any, int]]] = {}
    for kb, body, ts, headers, _tags in records:
        record = decode(kb, body, headers, framed=True)
        if isinstance(record, FramedRecord) and record.producer == producer and ts >= record.watermark:
            found.setdefault(record.key, []).append((record.source_offset, record.value, ts, record.watermark))
    return found


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


# -- what the hot paths ask ---------------------------------------------------------------------------
def partial_kind(headers: Mapping[str, str] | None) -> str | None:
    """``FOLD``, ``RECORDS``, ``WINDOWS``, or None for a record that is no partial."""
    return None if headers is None else headers.get(PARTIAL_HEADER)


def run_times(runs: list[Any]) -> list[Any]:
    """The data times a records partial holds, in order, from its runs ``[time, n, time, n, ...]``."""
    times: list[Any] = []
    for ts, n in zip(runs[::2], runs[1::2]):
        times.extend(repeat(ts, n))
    return times


# -- writing control records ----------------------------------------------------------------------------
def marker(watermark: int, producer: str, active_ms: int, behind: bool,
           flush: bool = False) -> tuple[None, bytes, int, dict[str, str], str]:
    """A producer's watermark marker, as a record to append; ``flush``: the producer's own input
    ended (it read ``run_until_idle``'s flush), so what the end of input made it send is all there."""
    headers = {WM_HEADER: str(watermark), PRODUCER_HEADER: producer, ACTIVE_HEADER: str(active_ms)}
    if behind:
        headers[BEHIND_HEADER] = "1"
    if flush:
        headers[FLUSH_HEADER] = "1"
    return (None, b"", max(watermark, 0), headers, MARKER_TAG)


def tick_records(queues: dict[str, int], now_ms: int, flush: bool) -> dict[tuple[str, int], list[Any]]:
    """An idle tick for every queue of the given framed topics (``{topic: queue count}``): it makes
    their operators check idleness even when no data comes; ``flush`` treats every source as idle."""
    headers = {TICK_HEADER: str(now_ms), **({FLUSH_HEADER: "1"} if flush else {})}
    return {(topic, q): [(None, b"", now_ms, headers, TICK_TAG)] for topic, n in queues.items() for q in range(n)}


def send_ticks(broker: Any, topics: Iterable[str], flush: bool = False, once: CommitTag | None = None) -> bool:
    """Append an idle tick (``tick_records``) to every queue of ``topics`` on ``broker``, stamped now.
    With ``once``, a tagged append: nothing is sent if that tag was (returns False)."""
    queues = {t: broker.topic(t).queues for t in topics}
    if not queues:
        return False
    return bool(broker.append(tick_records(queues, time.time_ns() // 1_000_000, flush), once))


#: The topic of the commit tag of a batch's idle flush (``flush_tag``): no topic's name (topic names
#: have no ``<``), so no queue's progress.
FLUSH_TAG_TOPIC = "<idle flush>"


def flush_tag(job: str, batch: int) -> CommitTag:
    """The tag of the idle flush that ends ``job``'s batch ``batch`` (``run_until_idle``): whichever of
    the batch's source tasks or its driver sends it first, it is sent once (``send_ticks(once=...)``)."""
    return CommitTag(job, FLUSH_TAG_TOPIC, 0, batch, batch + 1, batch_id=batch)
