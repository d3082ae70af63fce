"""The fluent API. Each method adds one logical node and returns the stream that continues from it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from rstream.broker.base import validate_topic_name
from rstream.errors import RStreamError
from rstream.graph.logical import LogicalNode, describe_callable
from rstream.processors.aggregate import AGGREGATE, AVG, COUNT, DATA_TIME_ORDER, MAX, MIN, REDUCE, SUM
from rstream.processors.interval_join import INTERVAL_JOIN, LEFT_INTERVAL_JOIN, describe_interval
from rstream.processors.join import JOIN, LEFT_JOIN
from rstream.processors.late import LATE, LateRecord
from rstream.processors.process import PROCESS, KeyedProcessFunction
from rstream.processors.sink import SINK, Visible, visible_option
from rstream.processors.spec import OperatorSpec
from rstream.processors.stateless import (
    FILTER,
    FLAT_MAP,
    FOREACH,
    KEY_BY,
    MAP,
    PRINT,
    SELECT_TIMESTAMP,
    TO_RSTREAM,
)
from rstream.processors.table import LEFT_TABLE_JOIN, TABLE, TABLE_JOIN, TO_STREAM
from rstream.processors.union import UNION
from rstream.processors.window import WINDOW
from rstream.serde import as_serializer
from rstream.time.units import to_millis
from rstream.time.windows import SessionWindow, Window, WindowEmit, WindowError, WindowKey, window_emit

if TYPE_CHECKING:
    from rstream.dsl.builder import StreamBuilder
    from rstream.processors.fold import Accumulator

K = TypeVar("K")
V = TypeVar("V")
K2 = TypeVar("K2")
V2 = TypeVar("V2")
A = TypeVar("A")
R = TypeVar("R")
N = TypeVar("N", int, float)


class DslError(RStreamError, TypeError):
    """A DSL call was given something it cannot use."""


def _check_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise DslError(f"{what} needs a function, got {type(fn).__name__}: {fn!r:.80}")


def _order(order: str, what: str, detail: str) -> dict[str, Any]:
    """A running aggregation's node params for ``order`` (``"arrival"`` or ``"data_time"``)."""
    if order == "arrival":
        return {"detail": detail}
    if order == "data_time":
        return {"order": DATA_TIME_ORDER, "detail": f"{detail}\nin data-time order"}
    raise DslError(f"{what}(order=...) is \"arrival\" (fold records as they arrive) or \"data_time\" (hold each "
                   f"until the watermark passes it, then fold in data-time order); got {order!r}")


def _check_accumulator(accumulator: Any) -> None:
    for method in ("initial", "add", "result"):
        if not callable(getattr(accumulator, method, None)):
            raise DslError(
                f"aggregate needs an accumulator with initial(), add(acc, value) and result(acc); "
                f"{accumulator!r} has no {method}()"
            )


class _Stream(Generic[K, V]):
    def __init__(self, builder: StreamBuilder, node: LogicalNode) -> None:
        self._builder = builder
        self._node = node

    def _add(self, spec: OperatorSpec, **params: Any) -> LogicalNode:
        return self._builder.graph.add(spec, [self._node], **params)

    @property
    def node(self) -> LogicalNode:
        """The logical node this stream comes out of."""
        return self._node

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self._builder._repr_mimebundle_(include, exclude)

    def sink(self, topic: str, serializer: Any = None, *, visible: str = "always") -> None:
        """Write every record to ``topic``; ``serializer`` is ``(key, value) -> bytes`` or has
        ``serialize``; by default ``TextSerializer(with_key=True)`` writes ``key:value``.

        ``visible``: when consumers outside rstream see the records. ``"always"`` (default): as soon as
        they are written; on RocketMQ a consumer with another client (the official one, Java's) may then
        also see records of an attempt that lost (a task that died between its write and its commit).
        ``"on_commit"``: only once their range commits, never a lost attempt's: on RocketMQ they are
        sent as transactional (half) messages, committed from rstream's decision log (slower: one
        request per record, and one more to commit it). rstream's own readers see committed records
        only, either way; on the embedded broker both are the same.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").sink("copy")                       # by default key:value
        >>> b.run_in_process({"words": ["hi"]})
        {'copy': ['None:hi']}
        """
        validate_topic_name(topic)
        serialize = as_serializer(serializer)
        when = visible_option(visible)
        self._add(SINK, topic=topic, serializer=serialize, visible=when,
                  detail=topic if when is Visible.ALWAYS else f"{topic} (on commit)")


class RStream(_Stream[K, V]):
    """A stream of records. Functions get the record's value; the key rides along."""

    def late(self) -> RStream[Any, LateRecord]:
        """Only a windowed aggregation, a windowed join and an interval join have late records
        (``WindowResultStream.late``, ``JoinResultStream.late``): call it on their result. Raises ``DslError``.

        >>> StreamBuilder("ex").source("words").late()
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: late() needs a windowed aggregation or a windowed...
        """
        raise DslError(
            f"late() needs a windowed aggregation or a windowed or interval join, and {self._node.name} is not "
            "one: call it on their result, e.g. .key_by(f).window(w).count().late() or "
            "left.join(right).where(lk).equal_to(rk).window(w).apply(fn).late()"
        )

    def map(self, fn: Callable[[V], V2]) -> RStream[K, V2]:
        """Replace each value by ``fn(value)``.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").map(str.upper).sink("out", TextSerializer())
        >>> b.run_in_process({"words": ["hello", "world"]})
        {'out': ['HELLO', 'WORLD']}
        """
        _check_callable(fn, "map")
        return RStream(self._builder, self._add(MAP, fn=fn, detail=describe_callable(fn)))

    def flat_map(self, fn: Callable[[V], Iterable[V2]]) -> RStream[K, V2]:
        """Replace each value by every item of ``fn(value)`` (none, one or many).

        >>> b = StreamBuilder("ex")
        >>> b.source("lines").flat_map(str.split).sink("out", TextSerializer())
        >>> b.run_in_process({"lines": ["to be", "or not"]})
        {'out': ['to', 'be', 'or', 'not']}
        """
        _check_callable(fn, "flat_map")
        return RStream(self._builder, self._add(FLAT_MAP, fn=fn, detail=describe_callable(fn)))

    def filter(self, fn: Callable[[V], bool]) -> RStream[K, V]:
        """Keep the records for which ``fn(value)`` is true.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").filter(lambda w: len(w) > 2).sink("out", TextSerializer())
        >>> b.run_in_process({"words": ["a", "tree", "of", "life"]})
        {'out': ['tree', 'life']}
        """
        _check_callable(fn, "filter")
        return RStream(self._builder, self._add(FILTER, fn=fn, detail=describe_callable(fn)))

    def foreach(self, fn: Callable[[V], Any]) -> RStream[K, V]:
        """Call ``fn(value)`` for its side effect (it runs in the Spark task); records pass on.

        >>> seen = []
        >>> b = StreamBuilder("ex")
        >>> b.source("words").foreach(seen.append).sink("out", TextSerializer())
        >>> b.run_in_process({"words": ["a", "b"]}), seen
        ({'out': ['a', 'b']}, ['a', 'b'])
        """
        _check_callable(fn, "foreach")
        return RStream(self._builder, self._add(FOREACH, fn=fn, detail=describe_callable(fn)))

    def print(self, prefix: str = "") -> RStream[K, V]:
        """Print each record as ``key: value``; the lines appear where the job is run or watched.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").print("got ").sink("out", TextSerializer())
        >>> b.run_in_process({"words": ["a"]})
        {'out': ['a']}
        """
        return RStream(self._builder, self._add(PRINT, prefix=prefix))

    def select_timestamp(self, fn: Callable[[V], int]) -> RStream[K, V]:
        """Take each record's time (epoch milliseconds) from its value.

        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(int)      # each record: its time in ms
        >>> clicks.key_by(lambda t: "all").window(TumblingWindow(1000)).count().to_rstream().sink("per-s")
        >>> b.run_in_process({"clicks": ["100", "900", "1500"]})
        {'per-s': ['all@[0,1000):2', 'all@[1000,2000):1']}
        """
        _check_callable(fn, "select_timestamp")
        return RStream(self._builder, self._add(SELECT_TIMESTAMP, fn=fn, detail=describe_callable(fn)))

    def key_by(self, fn: Callable[[V], K2]) -> GroupedStream[K2, V]:
        """Key each record by ``fn(value)``; the key must be hashable. Aggregations then shuffle by it.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(len).count().to_rstream().sink("per-length")
        >>> b.run_in_process({"words": ["a", "bb", "c"]})
        {'per-length': ['2:1', '1:1', '1:2']}
        """
        _check_callable(fn, "key_by")
        return GroupedStream(self._builder, self._add(KEY_BY, fn=fn, detail=describe_callable(fn)))

    @overload
    def join(self, right: RTable[Any, V2]) -> TableJoinedStream[V, V2]: ...

    @overload
    def join(self, right: RStream[Any, V2]) -> JoinedStream[V, V2]: ...

    def join(self, right: Any) -> Any:
        """Inner join with ``right``: ``.where(left_key).equal_to(right_key)[.window(w) or
        .between(lower, upper)].apply(fn)``.

        With a table (``grouped.to_table()``), a stream–table join: ``.where(key).apply(fn)`` emits
        ``fn(record, table_value)`` for each record whose key the table has (see ``TableJoinedStream``).

        >>> b = StreamBuilder("ex")
        >>> orders = b.source("orders").select_timestamp(lambda o: int(o.split()[1]))    # "o1 0": id, time
        >>> paid = b.source("payments").select_timestamp(lambda p: int(p.split()[1]))
        >>> (orders.join(paid).where(lambda o: o.split()[0]).equal_to(lambda p: p.split()[0])
        ...        .between(0, 60_000).apply(lambda o, p: "paid").sink("paid"))
        >>> b.run_in_process({"orders": ["o1 0", "o2 10"], "payments": ["o1 5000"]})
        {'paid': ['o1:paid']}
        """
        if isinstance(right, RTable):
            return TableJoinedStream(self, right, TABLE_JOIN)
        return JoinedStream(self, right, JOIN)

    @overload
    def left_join(self, right: RTable[Any, V2]) -> TableJoinedStream[V, V2]: ...

    @overload
    def left_join(self, right: RStream[Any, V2]) -> JoinedStream[V, V2]: ...

    def left_join(self, right: Any) -> Any:
        """Left join with ``right``: every left record is emitted, with ``None`` for a missing right.
        With a table: ``fn(record, None)`` for a record whose key the table lacks.

        >>> b = StreamBuilder("ex")
        >>> prices = b.source("prices").key_by(lambda p: p.split()[0]).map(lambda p: p.split()[1]).to_table()
        >>> orders = b.source("orders")
        >>> orders.left_join(prices).where(lambda sku: sku).apply(lambda sku, price: price).sink("priced")
        >>> b.run_in_process({"prices": ["mug 9"], "orders": ["mug", "pen"]})
        {'priced': ['mug:9', 'pen:None']}
        """
        if isinstance(right, RTable):
            return TableJoinedStream(self, right, LEFT_TABLE_JOIN)
        return JoinedStream(self, right, LEFT_JOIN)

    def union(self, other: RStream[Any, Any], *more: RStream[Any, Any]) -> RStream[Any, Any]:
        """One stream of the records of this stream and of ``other`` (and of ``more``): streams of
        the same or different source topics, branches of one stream, streams after an aggregation's
        ``to_rstream()``. Records keep their key, value and data time; nothing is shuffled. The
        watermark of what follows is the minimum over the inputs' watermarks (a window after a union
        closes only once every input has passed its end), as with Flink's ``DataStream.union`` and
        Kafka Streams' ``merge``; RocketMQ Streams 1.1 has no union. A stream given twice gives each
        of its records twice.

        ``orders_eu.union(orders_us).key_by(lambda o: o["sku"]).count()``

        >>> b = StreamBuilder("ex")
        >>> web, app = b.source("web-orders"), b.source("app-orders")
        >>> web.union(app).key_by(lambda o: "all").count().to_rstream().sink("orders")
        >>> b.run_in_process({"web-orders": ["o1", "o2"], "app-orders": ["o3"]})["orders"][-1]
        'all:3'
        """
        others = (other, *more)
        for i, stream in enumerate(others, start=1):
            if not isinstance(stream, RStream):
                hint = (" call .to_rstream() on it first" if isinstance(stream, (GroupedStream, WindowStream))
                        else " pass streams made by builder.source(...) and their operators")
                raise DslError(f"union merges RStreams; argument {i} is a {type(stream).__name__}:{hint}")
            if stream._builder is not self._builder:
                raise DslError(
                    f"union merges streams of one job; argument {i} comes from StreamBuilder "
                    f"{stream._builder.job_id!r}, this stream from {self._builder.job_id!r}: read both "
                    "topics with one builder (builder.source(topic) for each)"
                )
        parents = [self._node, *(s._node for s in others)]
        detail = f"{len(parents)} streams"
        return RStream(self._builder, self._builder.graph.add(UNION, parents, detail=detail))

    def process(self, fn: Any) -> Any:
        """Not on an ungrouped stream: a keyed process function keeps state and timers per key, so
        key the stream first (``.key_by(fn).process(...)``). Raises ``DslError``.

        >>> StreamBuilder("ex").source("words").process(None)
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: process(fn) needs a keyed stream: key it first,...
        """
        raise DslError("process(fn) needs a keyed stream: key it first, e.g. stream.key_by(lambda v: v['id'])"
                       f".process({type(fn).__name__}())")


class GroupedStream(_Stream[K, V]):
    """A keyed stream. Aggregations keep one state per key and emit the updated result for every
    input record, as RocketMQ Streams does."""

    def count(self, selector: Callable[[V], Any] | None = None) -> GroupedStream[K, int]:
        """The number of records per key: every record counts.

        ``selector`` is accepted for RocketMQ Streams 1.1's ``count(SelectAction)`` and, as there,
        changes nothing: 1.1's ``GroupedStreamImpl.count(selectAction)`` builds the same counter as
        ``count()`` and never calls the function, so ``count(lambda u: u.name)`` counts every record
        of a key. To count only some records, filter first: ``grouped.filter(pred).count()``.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(lambda w: w).count().to_rstream().sink("counts")
        >>> b.run_in_process({"words": ["a", "b", "a"]})
        {'counts': ['b:1', 'a:1', 'a:2']}
        """
        if selector is not None:
            _check_callable(selector, "count")
        return GroupedStream(self._builder, self._add(COUNT))

    def sum(self, fn: Callable[[V], N], order: str = "arrival") -> GroupedStream[K, N]:
        """The running sum of ``fn(value)`` per key.

        ``order``: ``"arrival"`` (default, as RocketMQ Streams) folds records as its shuffle queue
        received them, so a key fed by several source queues may see other intermediate updates at
        other batch cuts (its last is the same); ``"data_time"`` holds each record until the
        watermark passes it and folds in data-time order: the same updates however the input is cut
        (``rstream.processors.aggregate``).

        >>> b = StreamBuilder("ex")
        >>> b.source("sales").key_by(lambda s: s[0]).sum(lambda s: int(s[1:])).to_rstream().sink("totals")
        >>> b.run_in_process({"sales": ["a5", "a7", "b1"]})
        {'totals': ['b:1', 'a:5', 'a:12']}
        >>> b = StreamBuilder("ex")                       # the same sales, each with its data time
        >>> sales = b.source("sales").select_timestamp(lambda s: int(s.split()[1]))
        >>> sales.key_by(lambda s: s[0]).sum(lambda s: int(s[1]), order="data_time").to_rstream().sink("totals")
        >>> b.run_in_process({"sales": ["a5 3000", "a7 1000"]})
        {'totals': ['a:7', 'a:12']}
        """
        _check_callable(fn, "sum")
        return GroupedStream(self._builder, self._add(SUM, fn=fn, **_order(order, "sum", describe_callable(fn))))

    def min(self, fn: Callable[[V], N], order: str = "arrival") -> GroupedStream[K, N]:
        """The smallest ``fn(value)`` per key so far. ``order`` as for ``sum``.

        >>> b = StreamBuilder("ex")
        >>> b.source("bids").key_by(lambda s: s[0]).min(lambda s: int(s[1:])).to_rstream().sink("lowest")
        >>> b.run_in_process({"bids": ["a5", "a3", "a4"]})
        {'lowest': ['a:5', 'a:3', 'a:3']}
        """
        _check_callable(fn, "min")
        return GroupedStream(self._builder, self._add(MIN, fn=fn, **_order(order, "min", describe_callable(fn))))

    def max(self, fn: Callable[[V], N], order: str = "arrival") -> GroupedStream[K, N]:
        """The largest ``fn(value)`` per key so far. ``order`` as for ``sum``.

        >>> b = StreamBuilder("ex")
        >>> b.source("bids").key_by(lambda s: s[0]).max(lambda s: int(s[1:])).to_rstream().sink("highest")
        >>> b.run_in_process({"bids": ["a5", "a3", "a8"]})
        {'highest': ['a:5', 'a:5', 'a:8']}
        """
        _check_callable(fn, "max")
        return GroupedStream(self._builder, self._add(MAX, fn=fn, **_order(order, "max", describe_callable(fn))))

    def aggregate(self, accumulator: Accumulator[V, A, R], order: str = "arrival") -> GroupedStream[K, R]:
        """Fold each key's values with an ``Accumulator`` (``initial``, ``add``, ``result``). ``order`` as for ``sum``.

        >>> class Longest:                                # the longest word per first letter
        ...     def initial(self): return ""
        ...     def add(self, acc, word): return word if len(word) > len(acc) else acc
        ...     def merge(self, a, b): return a if len(a) >= len(b) else b
        ...     def result(self, acc): return acc
        ...
        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(lambda w: w[0]).aggregate(Longest()).to_rstream().sink("longest")
        >>> b.run_in_process({"words": ["tea", "toast", "tip"]})
        {'longest': ['t:tea', 't:toast', 't:toast']}
        """
        _check_accumulator(accumulator)
        return GroupedStream(
            self._builder,
            self._add(AGGREGATE, accumulator=accumulator, **_order(order, "aggregate", type(accumulator).__name__)),
        )

    def reduce(self, fn: Callable[[V, V], V], order: str = "arrival") -> GroupedStream[K, V]:
        """Combine each key's values two at a time, ``fn(acc, value)``, starting from its first value
        (as ``functools.reduce``); emits the running result for every record. ``order`` as for ``sum``.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(len).reduce(lambda acc, w: acc + "+" + w).to_rstream().sink("joined")
        >>> b.run_in_process({"words": ["ab", "cd", "ef"]})
        {'joined': ['2:ab', '2:ab+cd', '2:ab+cd+ef']}
        """
        _check_callable(fn, "reduce")
        return GroupedStream(self._builder, self._add(REDUCE, fn=fn, **_order(order, "reduce", describe_callable(fn))))

    def map(self, fn: Callable[[V], V2]) -> GroupedStream[K, V2]:
        """Replace each value by ``fn(value)``; the key stays.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(len).map(str.upper).to_rstream().sink("out")
        >>> b.run_in_process({"words": ["ab", "c"]})
        {'out': ['2:AB', '1:C']}
        """
        _check_callable(fn, "map")
        return GroupedStream(self._builder, self._add(MAP, fn=fn, detail=describe_callable(fn)))

    def flat_map(self, fn: Callable[[V], Iterable[V2]]) -> GroupedStream[K, V2]:
        """Replace each value by every item of ``fn(value)`` (none, one or many), each with the
        record's key and data time: ``grouped.flat_map(lambda line: line.split()).count()``.
        (RocketMQ Streams has ``GroupedStream.flatMap`` after 1.1.1, returning an ``RStream``; here
        the key stays and so does the grouping: ``.to_rstream()`` continues as a plain stream.)

        >>> b = StreamBuilder("ex")
        >>> reviews = b.source("reviews").key_by(lambda r: r.split(":")[0]).map(lambda r: r.split(":")[1])
        >>> reviews.flat_map(str.split).count().to_rstream().sink("words-per-user")
        >>> b.run_in_process({"reviews": ["ann:good mug", "ann:ok"]})
        {'words-per-user': ['ann:1', 'ann:2', 'ann:3']}
        """
        _check_callable(fn, "flat_map")
        return GroupedStream(self._builder, self._add(FLAT_MAP, fn=fn, detail=describe_callable(fn)))

    def filter(self, fn: Callable[[V], bool]) -> GroupedStream[K, V]:
        """Keep the records for which ``fn(value)`` is true.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(len).filter(lambda w: w != "no").count().to_rstream().sink("counts")
        >>> b.run_in_process({"words": ["no", "ok", "go"]})
        {'counts': ['2:1', '2:2']}
        """
        _check_callable(fn, "filter")
        return GroupedStream(self._builder, self._add(FILTER, fn=fn, detail=describe_callable(fn)))

    def process(self, fn: KeyedProcessFunction[K, V]) -> GroupedStream[Any, Any]:
        """Run a keyed process function: ``fn``, an instance of a subclass of ``KeyedProcessFunction``,
        gets every record as ``fn.process(key, value, ctx)`` and each timer it set as
        ``fn.on_timer(key, timestamp, ctx)``; ``ctx`` holds the key's value (``ctx.state``), its timers
        (event time: fire when the watermark reaches them; processing time: the wall clock) and
        ``ctx.forward(key, value)``. The records it forwards continue as a keyed stream. Flink's
        ``KeyedProcessFunction``; see ``rstream.processors.process``. Example, an alert for an order
        not paid within 15 minutes of data time::

            class Unpaid(KeyedProcessFunction):
                def process(self, order_id, event, ctx):
                    if event["type"] == "created":
                        ctx.state.set(event)
                        ctx.register_event_time_timer(ctx.timestamp + 15 * 60_000)
                    else:  # paid
                        ctx.state.clear()

                def on_timer(self, order_id, timestamp, ctx):
                    if ctx.state.get() is not None:
                        ctx.forward(order_id, "not paid within 15 minutes")
                        ctx.state.clear()

            orders.key_by(lambda e: e["order"]).process(Unpaid()).to_rstream().sink("alerts")

        Raises ``DslError`` when ``fn`` is not a ``KeyedProcessFunction`` or does not define ``process``.

        >>> class FirstOnly(KeyedProcessFunction):        # a key's first record, none for the next 60 s
        ...     def process(self, key, value, ctx):
        ...         if ctx.state.get() is None:
        ...             ctx.state.set(True)
        ...             ctx.register_event_time_timer(ctx.timestamp + 60_000)
        ...             ctx.forward(key, value)
        ...     def on_timer(self, key, timestamp, ctx):
        ...         ctx.state.clear()
        ...
        >>> b = StreamBuilder("ex")
        >>> events = b.source("events").select_timestamp(lambda e: int(e.split()[1]))   # "ann 0": user, ms
        >>> events.key_by(lambda e: e.split()[0]).process(FirstOnly()).to_rstream().sink("firsts")
        >>> b.run_in_process({"events": ["ann 0", "ann 30000", "bob 40000", "ann 90000"]})
        {'firsts': ['ann:ann 0', 'bob:bob 40000', 'ann:ann 90000']}
        """
        if isinstance(fn, type) and issubclass(fn, KeyedProcessFunction):
            raise DslError(f"process needs an instance of {fn.__name__}, not the class: process({fn.__name__}())")
        if not isinstance(fn, KeyedProcessFunction):
            raise DslError("process needs an instance of a subclass of rstream.KeyedProcessFunction (with "
                           f"process(self, key, value, ctx)), got {type(fn).__name__}: {fn!r:.80}")
        if type(fn).process is KeyedProcessFunction.process:
            raise DslError(f"{type(fn).__name__} must define process(self, key, value, ctx)")
        return GroupedStream(self._builder, self._add(PROCESS, fn=fn, detail=type(fn).__name__))

    def to_rstream(self) -> RStream[K, V]:
        """Continue as a plain stream; the key stays.

        >>> b = StreamBuilder("ex")
        >>> b.source("words").key_by(lambda w: w).count().to_rstream().map(lambda n: n * 10).sink("tens")
        >>> b.run_in_process({"words": ["a", "a"]})
        {'tens': ['a:10', 'a:20']}
        """
        return RStream(self._builder, self._add(TO_RSTREAM))

    def to_table(self) -> RTable[K, V]:
        """The latest value per key, as a table a stream joins (``stream.join(table)``); a record
        whose value is ``None`` deletes its key (Kafka Streams' ``toTable()``; RocketMQ Streams 1.1
        has no tables)::

            prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["sku"]).map(lambda p: p["price"])
            orders.join(prices.to_table()).where(lambda o: o["sku"]).apply(lambda o, price: o["n"] * price)

        The table is kept by the join that reads it, as that join's state: ``job.query(table.node.name,
        key)`` (``TABLE-4``) answers a key's value; a table no stream joins is never built.

        >>> b = StreamBuilder("ex")
        >>> prices = b.source("prices").key_by(lambda p: p.split()[0]).map(lambda p: p.split()[1]).to_table()
        >>> orders = b.source("orders")                                     # "mug 2": sku, how many
        >>> total = orders.join(prices).where(lambda o: o[:3]).apply(lambda o, eur: int(o[4:]) * int(eur))
        >>> total.sink("totals")
        >>> b.run_in_process({"prices": ["mug 9"], "orders": ["mug 2", "pen 1"]})
        {'totals': ['mug:18']}
        """
        return RTable(self._builder, self._add(TABLE))

    def late(self) -> RStream[Any, LateRecord]:
        """Only a windowed aggregation (``WindowResultStream.late``) and a windowed or interval join
        (``JoinResultStream.late``) have late records. Raises ``DslError``.

        >>> StreamBuilder("ex").source("words").key_by(len).late()
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: late() needs a windowed aggregation, and KEY_BY-2...
        """
        raise DslError(
            f"late() needs a windowed aggregation, and {self._node.name} is not one: "
            "call it on the result of an aggregation after window(w), e.g. .key_by(f).window(w).count().late()"
        )

    def window(self, window: Window, emit: str = "final") -> WindowStream[K, V]:
        """Aggregate per key and per window (``TumblingWindow``, ``SlidingWindow``, ``SessionWindow``),
        each result keyed by ``WindowKey(key, start, end)``.

        ``emit="final"`` (the default, as RocketMQ Streams): one result per window and key, when the
        watermark reaches the window's end; the value is the aggregate. ``emit="early"`` (Spark's
        update mode, Kafka Streams without ``suppress``): also, at the end of every batch, the
        current value of each window that batch changed and left open; every value is then a
        ``WindowResult(value, final)``, ``final`` False for those and True for the one emitted
        when the window fires::

            clicks.key_by(user).window(TumblingWindow(Time.minutes(1)), emit="early").count()
            # WindowKey('ann', 0, 60000): WindowResult(value=2, final=False), ... then final=True

        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(int)
        >>> counts = clicks.key_by(lambda t: "all").window(TumblingWindow(Time.seconds(10))).count()
        >>> counts.to_rstream().sink("counts", JsonSerializer(with_key=True))
        >>> b.run_in_process({"clicks": ["1000", "4000", "12000"]})
        {'counts': ['{"key":["all",0,10000],"value":2}', '{"key":["all",10000,20000],"value":1}']}
        """
        if not isinstance(window, Window):
            raise DslError(f"window needs a TumblingWindow, SlidingWindow or SessionWindow, got {window!r}")
        try:
            how = window_emit(emit)
        except WindowError as exc:
            raise DslError(str(exc)) from None
        if how is WindowEmit.FINAL:  # (the node's params as before emit existed)
            return WindowStream(self._builder, self._add(WINDOW, window=window, detail=window.describe()))
        return WindowStream(self._builder, self._add(WINDOW, window=window, emit=how,
                                                      detail=f"{window.describe()}\nemit {how}"))


class WindowStream(_Stream[K, V]):
    """A keyed stream cut into windows. Each aggregation fires once per window and key (and with
    ``emit="early"`` also emits early results); ``.late()`` on its result is the stream of records
    that came too late for their window."""

    def filter(self, fn: Callable[[V], bool]) -> WindowStream[K, V]:
        """Keep the records for which ``fn(value)`` is true, before the window aggregates them
        (as RocketMQ Streams 1.1's ``WindowStream.filter``): a record filtered out opens no window
        and is never late. It runs before the shuffle, so dropped records cost no shuffle.
        ``window(w).filter(lambda o: o["paid"]).count()``

        >>> b = StreamBuilder("ex")
        >>> orders = b.source("orders").select_timestamp(lambda o: int(o.split()[0]))   # "1 paid": ms, state
        >>> windows = orders.key_by(lambda o: "shop").window(TumblingWindow(1000))
        >>> windows.filter(lambda o: o.endswith("paid")).count().to_rstream().sink("paid")
        >>> b.run_in_process({"orders": ["1 paid", "2 open", "3 paid"]})
        {'paid': ['shop@[0,1000):2']}
        """
        _check_callable(fn, "filter")
        return WindowStream(self._builder, self._add(FILTER, fn=fn, detail=describe_callable(fn)))

    def map(self, fn: Callable[[V], V2]) -> WindowStream[K, V2]:
        """Replace each value by ``fn(value)`` before the window aggregates it (as RocketMQ Streams
        1.1's ``WindowStream.map``); the key and the data time stay.
        ``window(w).map(lambda o: o["amount"]).avg()``

        >>> b = StreamBuilder("ex")
        >>> sales = b.source("sales").select_timestamp(lambda s: int(s.split()[0]))   # "1 4": ms, euros
        >>> windows = sales.key_by(lambda s: "shop").window(TumblingWindow(1000))
        >>> windows.map(lambda s: int(s.split()[1])).avg().to_rstream().sink("avg")
        >>> b.run_in_process({"sales": ["1 4", "2 6"]})
        {'avg': ['shop@[0,1000):5.0']}
        """
        _check_callable(fn, "map")
        return WindowStream(self._builder, self._add(MAP, fn=fn, detail=describe_callable(fn)))

    def process(self, fn: Any) -> Any:
        """Not after ``window(...)``: a keyed process function sets its own timers. Raises ``DslError``.

        >>> StreamBuilder("ex").source("words").key_by(len).window(TumblingWindow(1000)).process(None)
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: process(fn) runs on a keyed stream, not on...
        """
        raise DslError("process(fn) runs on a keyed stream, not on windows: drop .window(...) and set timers "
                       "in fn (ctx.register_event_time_timer)")

    def _aggregate(self, spec: OperatorSpec, **params: Any) -> WindowResultStream[WindowKey, Any]:
        return WindowResultStream(self._builder, self._add(spec, **params))

    def count(self) -> WindowResultStream[WindowKey, int]:
        """Records per key and window.

        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(int)
        >>> clicks.key_by(lambda t: "all").window(SlidingWindow(1000, 500)).count().to_rstream().sink("n")
        >>> b.run_in_process({"clicks": ["700"]})
        {'n': ['all@[0,1000):1', 'all@[500,1500):1']}
        """
        return self._aggregate(COUNT)

    def sum(self, fn: Callable[[V], N]) -> WindowResultStream[WindowKey, N]:
        """
        >>> b = StreamBuilder("ex")
        >>> sales = b.source("sales").select_timestamp(lambda s: int(s.split()[0]))   # "1 5": ms, euros
        >>> windows = sales.key_by(lambda s: "shop").window(TumblingWindow(1000))
        >>> windows.sum(lambda s: int(s.split()[1])).to_rstream().sink("totals")
        >>> b.run_in_process({"sales": ["1 5", "999 7", "1000 1"]})
        {'totals': ['shop@[0,1000):12', 'shop@[1000,2000):1']}
        """
        _check_callable(fn, "sum")
        return self._aggregate(SUM, fn=fn, detail=describe_callable(fn))

    def min(self, fn: Callable[[V], N]) -> WindowResultStream[WindowKey, N]:
        """
        >>> b = StreamBuilder("ex")
        >>> temps = b.source("temps").select_timestamp(lambda t: int(t.split()[0]))   # "1 21": ms, °C
        >>> windows = temps.key_by(lambda t: "lab").window(TumblingWindow(1000))
        >>> windows.min(lambda t: int(t[2:])).to_rstream().sink("coldest")
        >>> b.run_in_process({"temps": ["1 21", "2 19", "3 20"]})
        {'coldest': ['lab@[0,1000):19']}
        """
        _check_callable(fn, "min")
        return self._aggregate(MIN, fn=fn, detail=describe_callable(fn))

    def max(self, fn: Callable[[V], N]) -> WindowResultStream[WindowKey, N]:
        """
        >>> b = StreamBuilder("ex")
        >>> temps = b.source("temps").select_timestamp(lambda t: int(t.split()[0]))
        >>> windows = temps.key_by(lambda t: "lab").window(TumblingWindow(1000))
        >>> windows.max(lambda t: int(t[2:])).to_rstream().sink("warmest")
        >>> b.run_in_process({"temps": ["1 21", "2 19", "3 20"]})
        {'warmest': ['lab@[0,1000):21']}
        """
        _check_callable(fn, "max")
        return self._aggregate(MAX, fn=fn, detail=describe_callable(fn))

    def avg(self, fn: Callable[[V], N] | None = None) -> WindowResultStream[WindowKey, float]:
        """The mean of ``fn(value)`` per key and window; without ``fn`` (as RocketMQ Streams 1.1's
        ``avg()``) the mean of the values themselves, which must be numbers (``int`` or ``float``,
        not ``bool``): a record whose value is none is a record error (a dead letter), as 1.1 throws.
        ``window(w).map(lambda o: o["amount"]).avg()`` equals ``window(w).avg(lambda o: o["amount"])``.

        >>> b = StreamBuilder("ex")
        >>> temps = b.source("temps").select_timestamp(lambda t: int(t.split()[0]))
        >>> windows = temps.key_by(lambda t: "lab").window(TumblingWindow(1000))
        >>> windows.avg(lambda t: int(t[2:])).to_rstream().sink("mean")
        >>> b.run_in_process({"temps": ["1 21", "2 19"]})
        {'mean': ['lab@[0,1000):20.0']}
        """
        if fn is None:
            return self._aggregate(AVG, fn=None)
        _check_callable(fn, "avg")
        return self._aggregate(AVG, fn=fn, detail=describe_callable(fn))

    def reduce(self, fn: Callable[[V, V], V]) -> WindowResultStream[WindowKey, V]:
        """Combine the values of each key and window two at a time, ``fn(acc, value)``, starting
        from the first (as ``functools.reduce``); session windows that merge combine with ``fn``.

        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(lambda c: int(c.split()[0]))   # "0 home": ms, page
        >>> paths = clicks.key_by(lambda c: "ann").window(SessionWindow(1000)).map(lambda c: c.split()[1])
        >>> paths.reduce(lambda path, page: path + ">" + page).to_rstream().sink("paths")
        >>> b.run_in_process({"clicks": ["0 home", "400 mug", "5000 home"]})
        {'paths': ['ann@[0,1400):home>mug', 'ann@[5000,6000):home']}
        """
        _check_callable(fn, "reduce")
        return self._aggregate(REDUCE, fn=fn, detail=describe_callable(fn))

    def aggregate(self, accumulator: Accumulator[V, A, R]) -> WindowResultStream[WindowKey, R]:
        """Fold with an ``Accumulator``; session windows also need its ``merge(acc1, acc2)``.

        >>> class Pages:                                   # the distinct pages of a session
        ...     def initial(self): return []
        ...     def add(self, acc, page): return acc if page in acc else acc + [page]
        ...     def merge(self, a, b): return a + [p for p in b if p not in a]
        ...     def result(self, acc): return sorted(acc)
        ...
        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(lambda c: int(c.split()[0]))
        >>> pages = clicks.key_by(lambda c: "ann").window(SessionWindow(1000)).map(lambda c: c.split()[1])
        >>> pages.aggregate(Pages()).to_rstream().sink("pages")
        >>> b.run_in_process({"clicks": ["0 mug", "500 home", "900 mug"]})
        {'pages': ["ann@[0,1900):['home', 'mug']"]}
        """
        _check_accumulator(accumulator)
        return self._aggregate(AGGREGATE, accumulator=accumulator, detail=type(accumulator).__name__)

    def late(self) -> RStream[Any, LateRecord]:
        """Late records are those of an aggregation: aggregate first (``.window(w).count().late()``).

        >>> StreamBuilder("ex").source("words").key_by(len).window(TumblingWindow(1000)).late()
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: late() is called on the windowed aggregation, not...
        """
        raise DslError("late() is called on the windowed aggregation, not on the window: "
                       "e.g. .window(w).count().late()")


class WindowResultStream(GroupedStream[K, V]):
    """The results of a windowed aggregation (keyed by ``WindowKey``), and, with ``late()``, the
    records that came too late for their window."""

    def late(self) -> RStream[Any, LateRecord]:
        """The records that came too late for their window at this aggregation, as a stream: each
        keyed by its own key, at its own data time, its value a ``LateRecord`` (key, value,
        data_time, watermark, cause, reason, operator). They are the rows of ``job.late_records()``
        of this operator, each once (written in the same commit as the window's results, so also
        once through a restart and a rerun). A function after it that raises on a late record makes
        that record a dead letter (``job.errors()``) and the job goes on. RIP-58 and RocketMQ Streams
        drop late records; this is Flink's ``sideOutputLateData`` and Bytewax's late stream::

            counts = clicks.key_by(user).window(TumblingWindow(Time.minutes(1))).count()
            counts.late().map(lambda r: f"{r.key} {r.data_time} {r.cause}").sink("late-clicks")

        >>> b = StreamBuilder("ex")
        >>> clicks = b.source("clicks").select_timestamp(int)
        >>> counts = clicks.key_by(lambda t: "all").window(TumblingWindow(1000)).count()
        >>> late = counts.late().map(lambda r: f"{r.data_time}: {r.cause}, watermark {r.watermark}")
        >>> late.sink("late", TextSerializer())
        >>> b.run_in_process({"clicks": ["5000", "100"]}, allowed_lateness_ms=0)["late"]
        ['100: behind watermark, watermark 5000']
        """
        return RStream(self._builder, self._add(LATE))


class JoinedStream(Generic[V, V2]):
    """A join being described: ``left.join(right).where(lk).equal_to(rk)`` then ``.window(w)`` (pairs in
    one window), ``.between(lower, upper)`` (an interval join) or neither (the latest value per key),
    then ``.apply(fn)``."""

    def __init__(self, left: RStream[Any, V], right: RStream[Any, V2], spec: OperatorSpec) -> None:
        kind = spec.kind
        if not isinstance(right, RStream):
            hint = (": to join a keyed stream's latest value per key, make it a table first, "
                    "stream.join(grouped.to_table()).where(key).apply(fn)" if isinstance(right, GroupedStream) else "")
            raise DslError(f"{kind} needs another RStream or an RTable, got {type(right).__name__}{hint}")
        if right._builder is not left._builder:
            raise DslError("both sides of a join must come from the same StreamBuilder")
        self._left, self._right, self._spec, self._kind = left, right, spec, kind
        self._left_key: Callable[[V], Any] | None = None
        self._right_key: Callable[[V2], Any] | None = None
        self._window: Window | None = None
        self._interval: tuple[int, int] | None = None

    def where(self, left_key: Callable[[V], Any]) -> JoinedStream[V, V2]:
        """The join key of a left record.

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left"), b.source("right")        # "1" and "1 x": the join key first
        >>> left.join(right).where(int).equal_to(lambda r: int(r[0])).apply(lambda l, r: r).sink("out")
        >>> b.run_in_process({"left": ["1"], "right": ["1 x"]})
        {'out': ['1:1 x']}
        """
        _check_callable(left_key, "where")
        self._left_key = left_key
        return self

    def equal_to(self, right_key: Callable[[V2], Any]) -> JoinedStream[V, V2]:
        """The join key of a right record.

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left"), b.source("right")
        >>> left.left_join(right).where(int).equal_to(lambda r: int(r[0])).apply(lambda l, r: r).sink("out")
        >>> b.run_in_process({"left": ["1"], "right": []})
        {'out': ['1:None']}
        """
        _check_callable(right_key, "equal_to")
        self._right_key = right_key
        return self

    def window(self, window: Window) -> JoinedStream[V, V2]:
        """Join only records in the same window (tumbling or sliding).

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left").select_timestamp(int), b.source("right").select_timestamp(int)
        >>> (left.join(right).where(lambda t: "k").equal_to(lambda t: "k").window(TumblingWindow(1000))
        ...      .apply(lambda l, r: f"{l}+{r}").sink("pairs"))
        >>> b.run_in_process({"left": ["100"], "right": ["900", "1100"]})
        {'pairs': ['k:100+900']}
        """
        if not isinstance(window, Window) or isinstance(window, SessionWindow):
            raise DslError(f"a join window must be a TumblingWindow or SlidingWindow, got {window!r}")
        if self._interval is not None:
            raise DslError(f"{self._kind} has .between(...) already: a join is windowed or an interval join, not both")
        self._window = window
        return self

    def between(self, lower: int, upper: int) -> JoinedStream[V, V2]:
        """An interval join: a left record at data time ``l`` and a right record of the same key at
        ``r`` are a pair when ``lower <= r - l <= upper`` (``Time`` values or milliseconds, negative
        allowed), each pair emitted once at data time ``max(l, r)``. A record waits in the state
        until the watermark passes the last time a partner could have (a left one ``l + upper``, a
        right one ``r - lower``), then is dropped; a left join then emits ``fn(left, None)`` for a
        left record that met nobody. Records behind the watermark are late, as in a windowed join.
        Flink's ``intervalJoin().between``, Kafka Streams' ``JoinWindows``; RocketMQ Streams 1.1 has
        only window joins. A payment within 10 minutes after its order, or up to 1 minute before::

            (orders.join(payments).where(lambda o: o["id"]).equal_to(lambda p: p["order"])
             .between(Time.minutes(-1), Time.minutes(10)).apply(lambda o, p: {**o, "paid": p["ts"]}))

        Raises ``DslError`` when a bound is not a duration, when ``lower > upper``, or after ``.window(w)``.

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left").select_timestamp(int), b.source("right").select_timestamp(int)
        >>> (left.join(right).where(lambda t: "k").equal_to(lambda t: "k").between(-500, 500)
        ...      .apply(lambda l, r: f"{l}+{r}").sink("pairs"))
        >>> b.run_in_process({"left": ["1000"], "right": ["600", "1600"]})
        {'pairs': ['k:1000+600']}
        """
        if self._window is not None:
            raise DslError(f"{self._kind} has .window({self._window!r}) already: a join is windowed or an "
                           "interval join, not both")
        try:
            lo, hi = to_millis(lower, "between's lower bound"), to_millis(upper, "between's upper bound")
        except TypeError as exc:
            raise DslError(f"{exc}, e.g. between(Time.minutes(-5), Time.minutes(5))") from None
        if lo > hi:
            raise DslError(f"between needs lower <= upper, got lower {lower!r} > upper {upper!r}: the pairs are "
                           "those with lower <= right data time - left data time <= upper")
        self._interval = (lo, hi)
        return self

    def apply(self, fn: Callable[[V, V2], R]) -> JoinResultStream[Any, R]:
        """Emit ``fn(left_value, right_value)`` for each match (``right_value`` is None for an
        unmatched left record of a left join). A windowed or interval join's ``.late()`` is the
        stream of the records that came too late for it.

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left"), b.source("right")
        >>> left.join(right).where(len).equal_to(len).apply(lambda l, r: l + r).sink("pairs")
        >>> b.run_in_process({"left": ["ab"], "right": ["cd", "e"]})
        {'pairs': ['2:abcd']}
        """
        _check_callable(fn, "apply")
        if self._left_key is None or self._right_key is None:
            raise DslError(f"{self._kind} needs .where(left_key) and .equal_to(right_key) before .apply(fn)")
        if self._interval is not None:
            lower, upper = self._interval
            spec = INTERVAL_JOIN if self._spec is JOIN else LEFT_INTERVAL_JOIN
            node = self._left._builder.graph.add(
                spec, [self._left.node, self._right.node], left_key=self._left_key, right_key=self._right_key,
                lower=lower, upper=upper, fn=fn, detail=f"{describe_callable(fn)}\n{describe_interval(lower, upper)}",
            )
            return JoinResultStream(self._left._builder, node)
        detail = describe_callable(fn) + (f" {self._window.describe()}" if self._window else "")
        node = self._left._builder.graph.add(
            self._spec, [self._left.node, self._right.node], left_key=self._left_key,
            right_key=self._right_key, window=self._window, fn=fn, detail=detail,
        )
        return JoinResultStream(self._left._builder, node)


class JoinResultStream(RStream[K, V]):
    """What a join of two streams emits, and, with ``late()`` on a windowed or interval join, the
    records that came too late to be joined."""

    def late(self) -> RStream[Any, LateRecord]:
        """The records this windowed or interval join dropped as late, as a stream: each keyed by its
        join key, at its own data time, its value a ``LateRecord`` whose ``side`` says ``"left"`` or
        ``"right"`` (and key, value, data_time, watermark, cause, reason, operator). They are the rows
        of ``job.late_records()`` of this join, each once (written in the same commit as the join's
        results). Flink's interval join has ``sideOutputLeftLateData`` / ``sideOutputRightLateData``
        (its window join has no late output), Bytewax's ``join_window`` a late stream; Kafka Streams
        and RocketMQ Streams drop them. Payments that came too late for their order::

            paid = (orders.join(payments).where(lambda o: o["id"]).equal_to(lambda p: p["order"])
                    .between(Time.minutes(-1), Time.minutes(10)).apply(lambda o, p: {**o, "paid": p["ts"]}))
            paid.late().filter(lambda r: r.side == "right").map(lambda r: r.value).sink("late-payments")

        Raises ``DslError`` on a join without a window: it keeps the latest value per key, and no
        record is late for it.

        >>> b = StreamBuilder("ex")
        >>> left, right = b.source("left").select_timestamp(int), b.source("right").select_timestamp(int)
        >>> joined = left.join(right).where(lambda t: "k").equal_to(lambda t: "k").between(0, 100)
        >>> pairs = joined.apply(lambda l, r: r)
        >>> pairs.late().map(lambda r: f"{r.side} {r.data_time}").sink("late", TextSerializer())
        >>> b.run_in_process({"left": ["5000", "10"], "right": []}, allowed_lateness_ms=0)["late"]
        ['left 10']
        """
        node = self._node
        if node.spec in (JOIN, LEFT_JOIN) and node.params.get("window") is None:
            raise DslError(f"{node.name} has no window: a join without .window(w) or .between(lower, upper) keeps "
                           "the latest value per key and drops no record as late, so it has no late()")
        return RStream(self._builder, self._add(LATE))


class RTable(Generic[K, V]):
    """A table: the latest value per key of a keyed stream (``grouped.to_table()``), ``None``
    deleting a key. A stream joins it: ``stream.join(table).where(key).apply(fn)``."""

    def __init__(self, builder: StreamBuilder, node: LogicalNode) -> None:
        self._builder = builder
        self._node = node

    @property
    def node(self) -> LogicalNode:
        """The logical node this table comes out of."""
        return self._node

    def to_stream(self) -> RStream[K, V | None]:
        """The table's changelog as a stream (Kafka Streams' ``KTable.toStream()``): every update as a
        record keyed by its key, at its data time, a delete as value ``None`` (also one of a key the
        table did not hold). Shuffled by key first, so each key's updates come out of one queue in the
        order of their source queue (as a join of this table applies them); across keys there is no
        order. RocketMQ Streams 1.1 has no tables. Every price change, and a delisted sku as None::

            prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["sku"]).map(lambda p: p["price"])
            prices.to_table().to_stream().sink("price-changes", JsonSerializer(with_key=True))

        >>> b = StreamBuilder("ex")
        >>> prices = b.source("prices", JsonDeserializer()).key_by(lambda p: p["sku"]).map(lambda p: p["eur"])
        >>> prices.to_table().to_stream().sink("changes", JsonSerializer(with_key=True))
        >>> b.run_in_process({"prices": [{"sku": "mug", "eur": 9}, {"sku": "mug", "eur": None}]})
        {'changes': ['{"key":"mug","value":9}', '{"key":"mug","value":null}']}
        """
        return RStream(self._builder, self._builder.graph.add(TO_STREAM, [self._node]))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return self._builder._repr_mimebundle_(include, exclude)


class TableJoinedStream(Generic[V, V2]):
    """A stream–table join being described: ``stream.join(table).where(key).apply(fn)``.

    It reads as ``left.join(right).where(lk).equal_to(rk).apply(fn)`` without ``equal_to``: a table
    is keyed already, so only the stream's key is said. Each stream record emits
    ``fn(record, table_value)`` with the table's value for its key as of the record's data time (the
    join takes both sides in data-time order, ``rstream.processors.ordered``); ``join`` drops a record
    whose key the table lacks, ``left_join`` emits ``fn(record, None)``.
    Table updates emit nothing and stream records are not kept, so there is no right or full outer
    stream–table join (Kafka Streams' ``KStream``–``KTable`` join has only inner and left, too)."""

    def __init__(self, stream: RStream[Any, V], table: RTable[Any, V2], spec: OperatorSpec) -> None:
        if table._builder is not stream._builder:
            raise DslError("a stream and the table it joins must come from the same StreamBuilder")
        self._stream, self._table, self._spec = stream, table, spec
        self._key: Callable[[V], Any] | None = None

    def where(self, key: Callable[[V], Any]) -> TableJoinedStream[V, V2]:
        """The table key a stream record looks up.

        >>> b = StreamBuilder("ex")
        >>> names = b.source("names").key_by(lambda n: n.split()[0]).map(lambda n: n.split()[1]).to_table()
        >>> b.source("visits").join(names).where(lambda visit: visit).apply(lambda v, name: name).sink("who")
        >>> b.run_in_process({"names": ["7 ann"], "visits": ["7"]})
        {'who': ['7:ann']}
        """
        _check_callable(key, "where")
        self._key = key
        return self

    def equal_to(self, right_key: Any) -> Any:
        """Not for a table: it is keyed already (by the ``key_by`` before ``to_table()``).

        >>> b = StreamBuilder("ex")
        >>> b.source("visits").join(b.source("names").key_by(len).to_table()).equal_to(len)
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: a table is keyed already: drop .equal_to(...) and...
        """
        raise DslError("a table is keyed already: drop .equal_to(...) and say only the stream's key, "
                       "stream.join(table).where(lambda r: r['id']).apply(fn)")

    def window(self, window: Any) -> Any:
        """Not for a table: a stream record meets the table's value for its key as of its data time.

        >>> b = StreamBuilder("ex")
        >>> b.source("visits").join(b.source("names").key_by(len).to_table()).window(TumblingWindow(1000))
        Traceback (most recent call last):
            ...
        rstream.dsl.streams.DslError: a stream–table join has no window: each record...
        """
        raise DslError("a stream–table join has no window: each record meets the table's value for its key as of "
                       "its own data time")

    def apply(self, fn: Callable[[V, V2 | None], R]) -> RStream[Any, R]:
        """Emit ``fn(record_value, table_value)`` for each stream record (``table_value`` None in a
        left join when the table lacks its key), keyed by the table key, at the record's data time.

        >>> b = StreamBuilder("ex")
        >>> tiers = b.source("tiers").select_timestamp(lambda t: int(t.split()[0]))   # "100 gold": ms, tier
        >>> orders = b.source("orders").select_timestamp(int)                            # "50": ms
        >>> table = tiers.key_by(lambda t: "ann").map(lambda t: t.split()[1]).to_table()
        >>> orders.left_join(table).where(lambda o: "ann").apply(lambda o, tier: f"{o} {tier}").sink("tiered")
        >>> b.run_in_process({"tiers": ["100 gold"], "orders": ["50", "150"]})
        {'tiered': ['ann:50 None', 'ann:150 gold']}
        """
        _check_callable(fn, "apply")
        if self._key is None:
            raise DslError(f"{self._spec.kind} needs .where(key) (the table key of a stream record) before .apply(fn)")
        node = self._stream._builder.graph.add(
            self._spec, [self._stream.node, self._table.node], left_key=self._key, right_key=None, fn=fn,
            detail=f"{describe_callable(fn)}\ntable {self._table.node.name}",
        )
        return RStream(self._stream._builder, node)
