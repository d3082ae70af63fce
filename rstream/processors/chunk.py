"""Chunked execution: the pure front of a pipeline runs over many records at once.

A queue's records go through its pipeline in chunks. The root (deserializing) and the pure
operators after it (``map``, ``flat_map``, ``filter``, ``key_by``, ``select_timestamp``,
``to_rstream``) each run once per chunk, over lists: one list comprehension or C builtin per
operator instead of a Python call per record and per operator. The first processor that is not
pure (stateful, a side effect, a fan-out) then takes the chunk's items in order, exactly as the
per-record path would have given them, or the whole chunk where it can take one (shuffle sinks,
counts, sinks, a windowed count reading a framed shuffle topic's data records; that topic's
markers and ticks still go record by record, split out by ``QueueRun.feed``).

When anything raises in the pure front (user code, a deserializer that returns no pair, a key
that cannot be hashed), the chunk's results are dropped and its records go through the
per-record path instead, so errors, dead letters and metrics are the same either way. The pure
front changes nothing before it succeeds (counters included); the price is that the functions
given to pure operators run a second time for a chunk in which one of them raised, as they would
on a Spark task retry: they must not have side effects that matter (``foreach`` is the operator
for those).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from rstream.broker.base import ReadRecord, RecordBlock

if TYPE_CHECKING:
    from rstream.processors.base import Processor, RecordError, StreamContext


#: Records per chunk at most, and after a chunk fell back to the per-record path, at least.
CHUNK_RECORDS = 4096
MIN_CHUNK_RECORDS = 16

class Chunk(NamedTuple):
    """Items moving through the pure front of a pipeline, as four parallel lists: the offset of
    the input record each item came from, its key, its value and its data time."""

    offsets: list[int]
    keys: list[Any]
    values: list[Any]
    times: list[int]


class ChunkedPipeline:
    """The chunked plan of one pipeline. ``run(records)`` returns False, having changed nothing,
    when the pure front raised: the caller then feeds those records one by one.

    A processor's ``take_chunk(chunk, plan)`` gets this plan, to hand items on: ``each(chunk,
    process)`` per item as the per-record path would, ``send(processor, chunk)`` for the items a
    processor made (through the pure stages after it, to what takes them)."""

    def __init__(self, root: Processor, ctx: StreamContext, failed: Callable[[RecordError, ReadRecord], None]) -> None:
        self.root = root
        self.ctx = ctx
        self.failed = failed
        self.records: RecordBlock = RecordBlock.of(())
        self._by_offset: dict[int, ReadRecord] | None = None
        #: What ``_send`` is handing on: the processor, its pure stages and the chunk each was given.
        self._sending: tuple[list[Processor], list[Chunk]] | None = None
        self._after: dict[int, tuple[list[Processor], Callable[[Chunk, ChunkedPipeline], None] | None]] = {}

    @staticmethod
    def of(root: Processor, ctx: StreamContext, failed: Callable[[RecordError, ReadRecord], None]) -> ChunkedPipeline | None:
        """The plan for ``root``'s pipeline, or None when its root cannot read chunks (a framed
        shuffle topic whose records go to a join, a session window or a fold other than a count
        over fixed windows: their frames are read record by record)."""
        if not root.chunked_root:
            return None
        return ChunkedPipeline(root, ctx, failed)

    def _plan(self, proc: Processor) -> tuple[list[Processor], Callable[[Chunk, ChunkedPipeline], None] | None]:
        """The pure stages after ``proc``, and the ``take_chunk`` of the processor after them
        (None: a fan-out or nothing, given the items one by one)."""
        plan = self._after.get(id(proc))
        if plan is None:
            stages, after = pure_path(proc)
            plan = self._after[id(proc)] = (stages, after.take_chunk if after is not None else None)
        return plan

    def run(self, records: RecordBlock) -> bool:
        try:
            chunk = self.root.chunk_of(records)
        except Exception:
            return False
        self.records, self._by_offset = records, None
        if not self._send(self.root, chunk, len(records)):
            return False
        self.ctx.at.offset = records.offsets[-1]
        self.root.chunk_done(records)
        return True

    def send(self, proc: Processor, chunk: Chunk) -> None:
        """Hand on the items ``proc`` made; if the pure stages after it raise, item by item through
        ``proc.forward`` instead (``proc`` has done its work on all of them already)."""
        if chunk.offsets and not self._send(proc, chunk, 0):
            self.each(chunk, proc.forward)

    def _send(self, proc: Processor, chunk: Chunk, taken: int) -> bool:
        stages, take = self._plan(proc)
        inputs = []
        try:
            for stage in stages:
                inputs.append(chunk)
                chunk = stage.chunk(chunk)
        except Exception:
            return False
        proc.records_in += taken
        for stage, given in zip(stages, inputs):
            stage.records_in += len(given.offsets)
        if chunk.offsets:
            outer, self._sending = self._sending, (stages, inputs)
            try:
                if take is not None:
                    take(chunk, self)
                else:
                    self.each(chunk, (stages[-1] if stages else proc).forward)
            finally:
                self._sending = outer
        return True

    def each(self, chunk: Chunk, process: Callable[[Any, Any, int], None]) -> None:
        """``process(key, value, time)`` per item, in order, with the context's offset set, as the
        per-record path does: an item user code raised on is reported, and the rest of its input
        record's items are not made."""
        from rstream.processors.base import RecordError

        ctx = self.ctx
        skip = current = None
        nth = 0
        expanded = getattr(self.root, "expanded", ())  # offsets whose items are records of their own
        for offset, key, value, ts in zip(*chunk):
            if offset == skip:
                continue
            if offset != current:
                current, nth = offset, 0
            nth += 1
            ctx.at.offset = offset
            try:
                process(key, value, ts)
            except RecordError as err:
                if self._by_offset is None:
                    self._by_offset = {r[0]: r for r in self.records.rows()}
                record = self._by_offset[offset]
                if offset in expanded:  # one of a partial's records: a dead letter with its own time, the rest go on
                    self.failed(err, (*record[:3], ts, *record[4:]))
                    continue
                skip = offset
                self._recount(offset, nth)
                self.failed(err, record)

    def _recount(self, offset: int, made: int) -> None:
        """The pure stages counted every item of the record at ``offset``; record by record they would
        have stopped at the ``made``-th item to reach what raised. Count them as that path would:
        take the record's items out, and run them again through the stages' own ``process`` up to
        that item (pure, so nothing else changes)."""
        if self._sending is None or not self._sending[0]:
            return
        stages, inputs = self._sending
        for stage, given in zip(stages, inputs):
            stage.records_in -= given.offsets.count(offset)
        last, reached = stages[-1], 0

        def reach(key: Any, value: Any, ts: int) -> None:
            nonlocal reached
            reached += 1
            if reached == made:
                raise _Reached

        forward, last.forward = last.forward, reach
        try:
            for at, key, value, ts in zip(*inputs[0]):
                if at == offset:
                    stages[0].process(key, value, ts)
        except _Reached:
            pass
        finally:
            last.forward = forward


def pure_path(proc: Processor) -> tuple[list[Processor], Processor | None]:
    """The pure stages right after ``proc``, and the one processor after them (None: a fan-out or nothing)."""
    stages: list[Processor] = []
    last = proc
    while len(last.children) == 1 and last.children[0].pure:
        last = last.children[0]
        stages.append(last)
    return stages, last.children[0] if len(last.children) == 1 else None


class _Reached(Exception):
    """The per-record recount reached the item that raised."""
