"""Data-time order, for the operators whose results depend on the order they take their records in:
keyed process functions (with their timers) and the stream–table join.

A shuffle queue holds the records of several producers (the source queues before the shuffle, each
shuffled by a task of its own) in the order their tasks happened to append them, and a batch holds
whatever part of them the batch's cut reached: neither is a fact of the data. So these operators
hold each record until the operator watermark passes its data time, then take what it passed in
*data-time order*: by time, then by ``rank`` (a table update before a stream record of the same
time), then by producer, then in each producer's own order. A record that was late where it was
read (its time is below the watermark its source queue had then, which it carries) is taken at that
watermark instead, and keeps its own data time. An event-time timer at ``t`` fires before every
record taken at ``t`` or later. So what they compute depends on each source queue's records only:
not on how a run cut them into batches, where a crash fell, or which producer's task wrote first.

This is how Flink's CEP and event-time temporal joins buffer by watermark; Kafka Streams takes a
task's partitions by their head records' timestamps (``PartitionGroup``) and punctuates on stream
time; Flink's ``KeyedProcessFunction`` takes records as they arrive. RIP-58 says nothing of order
or timers: the rule is rstream's.

Held records are state: those still held when a batch ends are staged in the state store (as timers
of ``<operator>.held``, at the time they are due, with the record as value), so they survive restarts,
replays and a lost local copy, and each is taken once.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, NamedTuple

from rstream.processors.base import Frame, RecordError, StreamContext
from rstream.serde.codec import encode
from rstream.state.store import MISSING, POSITION_KEY
from rstream.time.watermark import NO_WATERMARK

#: The suffix of the namespace in which an operator keeps the records it holds.
HELD = ".held"


class Held(NamedTuple):
    """A record held until the watermark passes ``at``. Tuples compare in the order they are taken
    (no two records of one queue have the same offset, so nothing after it is ever compared)."""

    at: int  # when it is taken: its data time, or the watermark it carried if that is later
    rank: int  # at equal times, lower first
    producer: str
    offset: int  # its offset in this queue: a producer's records keep their order
    ts: int  # its own data time
    key: Any
    value: Any
    frame: Frame


class InTimeOrder:
    """The records one operator holds on one queue, and its event-time position: the time of the last
    record or timer it took (it never goes back)."""

    def __init__(self, name: str, ctx: StreamContext) -> None:
        assert ctx.store is not None
        self.ctx = ctx
        self.store = store = ctx.store
        self.name = name
        self.where = name + HELD
        self.heap: list[Held] = []
        #: The held records the store has (from earlier batches): taking one stages its delete.
        self.stored: set[tuple[int, int, str, int]] = set()
        for at, (rank, producer, offset), (ts, key, value, frame) in store.timer_values(self.where):
            self.heap.append(Held(at, rank, producer, offset, ts, key, value, Frame(*frame)))
            self.stored.add((at, rank, producer, offset))
        heapq.heapify(self.heap)
        saved = store.get(self.where, POSITION_KEY)
        self.position = NO_WATERMARK if saved is MISSING else int(saved)
        self._saved_position = self.position

    def __len__(self) -> int:
        return len(self.heap)

    def hold(self, rank: int, key: Any, value: Any, ts: int) -> None:
        """Hold the current record (the context's offset and frame), then let the watermark it carried
        move the operator watermark on (which may take it at once)."""
        ctx = self.ctx
        frame = ctx.at.frame
        at = max(ts, frame.watermark, self.position)
        heapq.heappush(self.heap, Held(at, rank, frame.producer, ctx.at.offset, ts, key, value, frame))
        if ctx.time.watermarks is not None and ctx.time.watermarks.observe(frame.producer, frame.watermark):
            ctx.advance()

    def head(self, until: int) -> Held | None:
        """The next record to take, if it is due before ``until``."""
        heap = self.heap
        return heap[0] if heap and heap[0].at < until else None

    def last(self) -> int:
        """The latest time a held record is due at (the position when none is held)."""
        return max((h.at for h in self.heap), default=self.position)

    def pop(self) -> Held:
        held = heapq.heappop(self.heap)
        ident = held[:4]
        if ident in self.stored:
            self.stored.discard(ident)
            self.store.cancel_timer(self.where, held.at, ident[1:])
        return held

    def reach(self, at: int) -> None:
        """Move the position on to ``at``: what is forwarded now carries it as its watermark (a framed
        shuffle after the operator stamps its records with it), so no result is judged late
        downstream for where a batch happened to end."""
        if at > self.position:
            self.position = at
        self.ctx.time.emit_watermark = self.position

    @contextmanager
    def taking(self, held: Held) -> Iterator[None]:
        """While ``held`` is taken: the context says where it was read (offset, frame), and a trace
        counts what happens as that record's doing (``Observer.resumed``)."""
        ctx = self.ctx
        saved = ctx.at.offset, ctx.at.frame
        ctx.at.offset, ctx.at.frame = held.offset, held.frame
        self.reach(held.at)
        try:
            with ctx.mode.observer.resumed(held.offset) if ctx.mode.observer is not None else nullcontext():
                yield
        finally:
            ctx.at.offset, ctx.at.frame = saved

    def dead_letter(self, held: Held, err: RecordError) -> None:
        """User code raised on ``held``: a dead letter holding it as its queue stored it (key, framed
        body, data time), or the end of the run with ``skip_data_error`` off."""
        ctx = self.ctx
        if not ctx.settings.skip_data_error:
            raise err
        f = held.frame
        ctx.dead_letter(err, encode(held.key), encode((held.value, f.watermark, f.producer, f.source_offset, f.side)),
                        held.ts)

    def flush(self) -> None:
        """At the end of the batch: stage what is still held and was not in the store, and the position."""
        store, where = self.store, self.where
        for held in self.heap:
            ident = held[:4]
            if ident not in self.stored:
                store.set_timer(where, held.at, ident[1:], (held.ts, held.key, held.value, tuple(held.frame)))
                self.stored.add(ident)
        if self.position != self._saved_position:
            store.put(where, POSITION_KEY, self.position)
            self._saved_position = self.position
