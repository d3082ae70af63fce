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

"The table's value at the data time of the record": the join takes its records in data-time order
(``rstream.processors.ordered``). A queue holds the records of several producers (the source queues
of both sides, each shuffled by its own task, so which task wrote first is a race), and a batch holds
whatever its cut reached; so the join holds each record until the operator watermark passes its data
time, then takes what it passed by time (at equal times a table update first, then by producer, each
producer's records in their own order). A stream record meets the table as of its own data time,
whatever batch brought the updates, and a job gives the same results however its input was cut into
batches: the same as Flink's event-time temporal join, which also waits for the watermark (Kafka
Streams takes a task's partitions by their head records' timestamps and waits up to
``max.task.idle.ms`` for an empty one). A table update that was late where it was read (its time below
the watermark it carried) counts from that watermark on; a stream record that was late meets the
table as of that watermark. The price: a result comes once the watermark passes its record
(``allowed_lateness_ms`` after it, in data time), not as soon as the record arrives.
A table update emits nothing (as in Kafka Streams, only the stream side triggers a
join), and stream records are not kept, which is why there is no right or full outer stream–table
join: a table update finds no stream records to pair with, and a key the stream never brings would
have to be emitted by the table alone, which is the table's own changelog, not a join.

``table.to_stream()`` is that changelog (Kafka Streams' ``KTable.toStream()``): every update of the
table as a keyed record, a delete as value ``None``, shuffled by key first, so each key's updates come
out of one queue in the order of their source queue (as a join of the table applies them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rstream.processors.base import PassProcessor, Processor, RecordError, StreamContext
from rstream.processors.metrics import OperatorMetrics
from rstream.processors.ordered import Held, InTimeOrder
from rstream.processors.spec import STATEFUL_STYLE, STATELESS_STYLE, OperatorSpec, Role, Shuffle, register
from rstream.settings import JobProperties
from rstream.state.store import MISSING

#: The join sides of a stream–table join's shuffle topic (those of ``rstream.processors.join``).
STREAM, TABLE_SIDE = 0, 1
#: Ranks of held records (``rstream.processors.ordered``): at equal times a table update goes first.
TABLE_FIRST, STREAM_AFTER = 0, 1


class TableJoinProcessor(Processor):
    """An inner (``how="inner"``) or left (``how="left"``) stream–table join on one queue of its
    shuffle topic; its state is the table, one value per key. It takes its records in data-time
    order (module docstring)."""

    emits_results = True
    results_later = True

    def __init__(self, name: str, how: str, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(name)
        self.how = how
        self.fn = fn
        self.emitted = 0
        self.updates = 0

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        assert ctx.store is not None
        self.store = ctx.store
        self.order = InTimeOrder(self.name, ctx)
        # the children as the batch has them: a record user code after the join raises on is a dead
        # letter of its own, also when it is taken as the batch ends (not a result of the batch's end)
        self.hand_on = self.forward
        ctx.time.operators.append(self)

    def process(self, key: Any, value: Any, ts: int) -> None:
        """Hold the record until the operator watermark passes its data time (``ordered``)."""
        self.records_in += 1
        self.order.hold(TABLE_FIRST if self.ctx.at.frame.side == TABLE_SIDE else STREAM_AFTER, key, value, ts)

    def on_watermark(self, watermark: int) -> None:
        """Take the held records the watermark passed (every one when every source is idle), in
        data-time order."""
        order = self.order
        while (held := order.head(watermark)) is not None:
            order.pop()
            with order.taking(held):
                self._take(held)

    def flush(self) -> None:
        self.order.flush()

    def _take(self, h: Held) -> None:
        """One held record: a table update changes the table; a stream record is joined."""
        store, name, key, value = self.store, self.name, h.key, h.value
        if h.rank == TABLE_FIRST:
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
            self.order.dead_letter(h, self.ctx.record_error(self.name, exc, value))
            return
        self.emitted += 1
        try:
            self.hand_on(key, out, h.ts)
        except RecordError as err:
            self.order.dead_letter(h, err)

    def metrics(self) -> OperatorMetrics:
        return OperatorMetrics.of(records_in=self.records_in, emitted=self.emitted, held=len(self.order))


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
