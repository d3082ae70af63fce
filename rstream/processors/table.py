"""Tables and the stream–table join (Kafka Streams' ``KStream``–``KTable`` join).

``grouped.to_table()`` is the latest value per key of a keyed stream; a record whose value is
``None`` deletes its key. ``stream.join(table).where(key).apply(fn)`` enriches each stream record
with the table's value for its key: ``fn(record, table_value)``. ``left_join`` also emits
``fn(record, None)`` for a record whose key the table lacks; ``join`` drops it.

The table has no processor of its own (``TABLE``, like ``window``, is carried by the node after
it): the second build shuffles the stream's records (keyed by ``where``, side 0) and the table's
records (keyed already, side 1) into the join's one shuffle topic, as for ``left.join(right)``, so a
key's table updates and stream records meet in one queue. The join's processor keeps the table in
its state, one value per key (RocksDB and the state topic, as every operator's): ``job.state()``
shows it and ``job.query(join, key)`` answers a key's table value.

"The table's value at the time the record is processed": the join takes each batch of its queue in
data-time order. A queue holds the records of several producers (the source queues of both sides,
each shuffled by its own task, so which task wrote first is a race); at the end of the batch the join
takes, again and again, the next record of the producer whose next record has the smallest data time
(at equal times a table update first, then by producer), each producer's records in their own order.
That is Kafka Streams' choice between a task's input partitions (the record with the smallest
timestamp first), with a batch for the records it buffered. So a stream record meets the table as of
its data time among the updates its batch and the batches before it brought, and a new job over topics
that already hold both sides gives the same results each time it runs. A table update of a later batch
does not reach back to stream records joined before it (no versioned table as Kafka Streams' versioned
stores give). A table update emits nothing (as in Kafka Streams, only the stream side triggers a
join), and stream records are not kept, which is why there is no right or full outer stream–table
join: a table update finds no stream records to pair with, and a key the stream never brings would
have to be emitted by the table alone, which is the table's own changelog, not a join.

``table.to_stream()`` is that changelog (Kafka Streams' ``KTable.toStream()``): every update of the
table as a keyed record, a delete as value ``None``, shuffled by key first, so each key's updates come
out of one queue in the order of their source queue (as a join of the table applies them).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rstream.processors.base import Frame, Processor, RecordError
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.spec import STATEFUL_STYLE, STATELESS_STYLE, OperatorSpec, Role, Shuffle, register
from rstream.processors.stateless import PassProcessor
from rstream.serde.codec import encode
from rstream.settings import JobProperties
from rstream.state.store import MISSING

#: The join sides of a stream–table join's shuffle topic (those of ``rstream.processors.join``).
STREAM, TABLE_SIDE = 0, 1


#: A record of the join's queue, held until the end of its batch: (data time, whether it is a stream
#: record (a table update goes first at equal times), producer, offset, frame, key, value). Tuples
#: compare as the order the join takes them in (the offset is unique in the queue: no further).
_Held = tuple[int, bool, str, int, Frame, Any, Any]


def _in_time_order(held: list[_Held]) -> Iterable[_Held]:
    """A batch's records, producer by producer in their own order, merged by data time (at equal
    times, table updates first, then by producer): ``heapq.merge`` takes the smallest next record."""
    lanes: dict[str, list[_Held]] = {}
    for h in held:
        lane = lanes.get(h[2])
        if lane is None:
            lane = lanes[h[2]] = []
        lane.append(h)
    if len(lanes) == 1:
        return held
    return heapq.merge(*lanes.values())


class TableJoinProcessor(Processor):
    """An inner (``how="inner"``) or left (``how="left"``) stream–table join on one queue of its
    shuffle topic; its state is the table, one value per key. It holds a batch's records and takes
    them at its end, in data-time order across producers (module docstring)."""

    emits_results = True

    def __init__(self, name: str, how: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.how = how
        self.fn = fn
        self.emitted = 0
        self.updates = 0
        self.held: list[_Held] = []

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        assert ctx.store is not None
        self.store = ctx.store
        # what results made at the end carry on (a framed shuffle sink after the join stamps them
        # with it): the watermark the batch started with, which no record of the batch is behind
        self.start_watermark = ctx.emit_watermark
        # the children as the batch has them: a record user code after the join raises on is a dead
        # letter of its own, as when it was taken during the batch (not a result of the batch's end)
        self.hand_on = self.forward

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        ctx = self.ctx
        frame = ctx.frame
        self.held.append((ts, frame.side != TABLE_SIDE, frame.producer, ctx.offset, frame, key, value))

    def flush(self) -> None:
        held, self.held = self.held, []
        if not held:
            return
        ctx = self.ctx
        observer = ctx.observer
        saved = ctx.offset, ctx.frame, ctx.emit_watermark
        ctx.emit_watermark = self.start_watermark
        take = self._take
        try:
            for h in _in_time_order(held):
                ctx.offset, ctx.frame = h[3], h[4]
                if observer is None:
                    take(h)
                else:
                    with observer.resumed(h[3]):
                        take(h)
        finally:
            ctx.offset, ctx.frame, ctx.emit_watermark = saved

    def _take(self, h: _Held) -> None:
        """One held record: a table update changes the table; a stream record is joined."""
        store, name, key, value = self.store, self.name, h[5], h[6]
        if not h[1]:  # a table update
            self.updates += 1
            if value is None:
                if store.get(name, key) is not MISSING:
                    store.delete(name, key)
            else:
                store.put(name, key, value)
            return
        current = store.get(name, key)
        if current is MISSING:
            if self.how == "inner":
                return
            current = None
        try:
            out = self.fn(value, current)
        except Exception as exc:
            self._dead_letter(h, self.ctx.record_error(self.name, exc, value))
            return
        self.emitted += 1
        try:
            self.hand_on(key, out, h[0])
        except RecordError as err:
            self._dead_letter(h, err)

    def _dead_letter(self, h: _Held, err: RecordError) -> None:
        """User code raised on held record ``h``: a dead letter holding it as its queue stored it (key,
        framed body, data time), or the end of the run with ``skip_data_error`` off."""
        ctx = self.ctx
        if not ctx.settings.skip_data_error:
            raise err
        ts, _stream, _producer, _offset, f, key, value = h
        ctx.dead_letter(err, encode(key), encode((value, f.watermark, f.producer, f.source_offset, f.side)), ts)

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, emitted=self.emitted)


def _table_join(how: str) -> Any:
    def make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
        return TableJoinProcessor(name, how, params["fn"])
    return make


#: ``grouped.to_table()``: no processor; the stream–table join after it keeps the table.
TABLE = register(OperatorSpec("table", STATEFUL_STYLE, None, role=Role.TABLE))
#: ``stream.join(table).where(key).apply(fn)``: a stream record without a table value is dropped.
TABLE_JOIN = register(OperatorSpec("table_join", STATEFUL_STYLE, _table_join("inner"), shuffle=Shuffle.JOIN,
                                   stateful=True))
#: ``stream.left_join(table).where(key).apply(fn)``: ``fn(record, None)`` for a key the table lacks.
LEFT_TABLE_JOIN = register(OperatorSpec("left_table_join", STATEFUL_STYLE, _table_join("left"),
                                        shuffle=Shuffle.JOIN, stateful=True))


def _make_changelog(name: str, params: Mapping[str, Any], settings: JobProperties,
                    sink_queues: Mapping[str, int]) -> Processor:
    return PassProcessor(name)


#: ``table.to_stream()``: the table's updates as a stream (shuffled by key, then passed on unchanged).
TO_STREAM = register(OperatorSpec("to_stream", STATELESS_STYLE, _make_changelog, shuffle=Shuffle.BY_KEY))
