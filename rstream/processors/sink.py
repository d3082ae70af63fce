"""The sink: writes every record to a topic (``sink(topic, serializer, visible=...)``)."""

from __future__ import annotations

import marshal
from collections.abc import Callable, Mapping
from itertools import compress, repeat
from operator import eq
from typing import Any

from rstream.broker.batch import BodyRecords, OnCommitRecords
from rstream.enums import TextEnum
from rstream.errors import RStreamError
from rstream.processors.base import Processor, StreamContext
from rstream.processors.chunk import Chunk, ChunkedPipeline
from rstream.processors.spec import SINK_STYLE, OperatorSpec, Role, register
from rstream.serde.codec import MARSHAL_VERSION, encode, stable_queue
from rstream.settings import JobProperties
from rstream.time.windows import WINDOW_KEY_FORMAT, WindowKey


class Visible(TextEnum):
    """When a sink's records become visible to consumers outside rstream (``sink(..., visible=...)``).

    rstream's own readers (jobs, the topic browser, ``broker.read``) see a range's records once it
    commits, whichever is chosen; this is about everyone else."""

    #: As soon as they are written (RocketMQ: a consumer with another client may also see the records of an
    #: attempt that lost, after a crash between write and commit). The default: the fastest.
    ALWAYS = "always"
    #: Only once the range's append commits, and never those of an attempt that lost (RocketMQ: half
    #: messages, committed from rstream's decision log). The embedded broker's appends are always so.
    ON_COMMIT = "on_commit"


def visible_option(value: object) -> Visible:
    """``value`` as a ``Visible``; ``RStreamError`` naming the choices otherwise."""
    try:
        return Visible(value)
    except ValueError:
        raise RStreamError(f"visible={value!r}: give 'always' (the default) or 'on_commit'") from None


class SinkProcessor(Processor):
    """Writes ``serializer(key, value)`` to the sink topic. Records with a key go to the queue of a
    stable hash of the key, so each key's results stay in order; keyless records keep their
    input queue's order (input queue modulo the sink's queue count). With ``on_commit`` its records
    are ``OnCommitRecords``, which a broker makes visible outside rstream only once they commit."""

    writes_chunks = True

    def __init__(self, name: str, topic: str, queues: int, serialize: Callable[[Any, Any], bytes],
                 on_commit: bool = False) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.serialize = serialize
        self.on_commit = on_commit
        # a built-in serializer's method over a whole chunk (the same bytes as serialize, record by record)
        self.serialize_many = getattr(getattr(serialize, "__self__", None), "serialize_many", None)

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        make = OnCommitRecords if self.on_commit else BodyRecords
        self._outs = [ctx.out.columns(self.topic, q, make) for q in range(self.queues)]
        self._keyless = self._outs[ctx.at.queue % self.queues]
        self._routes: dict[Any, tuple[list[Any], Any]] = {}  # key -> (its queue's output, message key)
        #: key -> the appends of its queue's columns and its message key (outputs kept as columns)
        self._adds: dict[Any, tuple[Any, Any, Any, Any]] = {}
        self._columns = all(isinstance(out, BodyRecords) for out in self._outs)
        self.records_out = 0

    def written(self) -> dict[str, int]:
        return {self.topic: self.records_out}

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            body = self.serialize(key, value)
            if type(body) is not bytes:
                body = _as_bytes(body)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, (key, value)) from exc
        self.records_out += 1
        if key is None:
            self._keyless.append((None, body, ts, None, None))
            return
        try:
            route = self._routes.get(key)
        except TypeError:  # an unhashable key from a deserializer: route it without the cache
            out, mkey = self._route(key)
            out.append((mkey, body, ts, None, None))
            return
        if route is None:
            route = self._routes[key] = self._route(key)
        route[0].append((route[1], body, ts, None, None))

    def take_chunk(self, chunk: Chunk, plan: ChunkedPipeline) -> None:
        bodies = self.bodies(chunk)
        if bodies is None:  # record by record: process says which record, and converts str bodies
            plan.each(chunk, self.process)
            return
        self.append(chunk, bodies)

    def bodies(self, chunk: Chunk) -> list[bytes] | None:
        """The serialized bodies of a chunk's items, changing nothing; None when the serializer
        raised on one of them or returned something that is neither bytes nor str."""
        try:
            if self.serialize_many is not None:
                bodies = self.serialize_many(chunk.keys, chunk.values)
            else:
                bodies = list(map(self.serialize, chunk.keys, chunk.values))
            types = set(map(type, bodies))
            if types == {str, bytes} or types == {str}:
                bodies = [b.encode() if type(b) is str else b for b in bodies]
            elif types and types != {bytes}:
                return None
        except Exception:
            return None
        return bodies

    def append(self, chunk: Chunk, bodies: list[bytes]) -> None:
        """Write a chunk's items with their ``bodies``, each to its key's queue."""
        self.records_in += len(bodies)
        self.records_out += len(bodies)
        if self._columns:  # three appends per record; no tuple made for the broker to take apart
            if self._extend_windows(chunk, bodies) or self._extend_one_queue(chunk, bodies):
                return
            adds, find = self._adds, self._adder
            for key, body, ts in zip(chunk.keys, bodies, chunk.times):
                try:
                    add = adds.get(key) or find(key)
                except TypeError:  # an unhashable key from a deserializer: route it without the cache
                    add = self._adder(key, cache=False)
                add[0](add[3])
                add[1](body)
                add[2](ts)
            return
        routes, keyless = self._routes, self._keyless
        for key, body, ts in zip(chunk.keys, bodies, chunk.times):
            if key is None:
                keyless.append((None, body, ts, None, None))
                continue
            try:
                route = routes.get(key)
            except TypeError:  # an unhashable key from a deserializer: route it without the cache
                route = self._route(key)
            else:
                if route is None:
                    route = routes[key] = self._route(key)
            route[0].append((route[1], body, ts, None, None))

    def _extend_one_queue(self, chunk: Chunk, bodies: list[bytes]) -> bool:
        """Append the whole chunk with three ``extend`` calls when every distinct key of it goes to
        the same queue and is its own message key (a str, bytes or None key): a keyed count's results
        after a shuffle, whose queues split the keys as the sink's do (each of its queues' keys fall
        in one sink queue). False, and nothing appended, otherwise."""
        keys = chunk.keys
        try:
            distinct = set(keys)
        except TypeError:  # an unhashable key from a deserializer
            return False
        adds, find = self._adds, self._adder
        target = None
        for key in distinct:
            add = adds.get(key) or find(key)
            if add[3] is not key:
                return False
            if target is None:
                target = add
            elif add[0].__self__ is not target[0].__self__:
                return False
        if target is not None:
            target[0].__self__.extend(keys)
            target[1].__self__.extend(bodies)
            target[2].__self__.extend(chunk.times)
        return True

    def _extend_windows(self, chunk: Chunk, bodies: list[bytes]) -> bool:
        """Append a chunk of window results (every key a ``WindowKey``: fired windows, each one new
        to this sink, so a route cached per key would only cost) column by column: the message keys
        (``str(key)``) with one format, the queues from the keys' bytes as ``_route`` has them, then
        each queue's share with ``compress``, in the chunk's order. False, and nothing appended,
        for any other chunk or a key that marshal cannot write."""
        keys = chunk.keys
        if not keys or type(keys[0]) is not WindowKey or set(map(type, keys)) != {WindowKey}:
            return False
        if self.queues == 1:
            queues = None
        else:
            try:
                kbs = list(map(marshal.dumps, map(tuple, keys), repeat(MARSHAL_VERSION)))
            except ValueError:  # a key marshal cannot write: routed one by one (pickled, as encode does)
                return False
            queues = list(map(stable_queue, kbs, repeat(self.queues)))
        mkeys = list(map(WINDOW_KEY_FORMAT.format, *zip(*keys)))  # str(key), per column
        for q in sorted(set(queues)) if queues is not None else (0,):
            out = self._outs[q]
            if queues is None or queues.count(q) == len(queues):
                out.keys.extend(mkeys)
                out.bodies.extend(bodies)
                out.borns.extend(chunk.times)
                continue
            mask = list(map(eq, queues, repeat(q)))
            out.keys.extend(compress(mkeys, mask))
            out.bodies.extend(compress(bodies, mask))
            out.borns.extend(compress(chunk.times, mask))
        return True

    def _adder(self, key: Any, cache: bool = True) -> tuple[Any, Any, Any, Any]:
        """The appends of the columns of the key's queue (the input queue's for no key), and the
        message key; cached for the batch."""
        out: Any
        out, mkey = (self._keyless, None) if key is None else self._route(key)
        add = (out.keys.append, out.bodies.append, out.borns.append, mkey)
        if cache:
            self._adds[key] = add
        return add

    def _route(self, key: Any) -> tuple[list[Any], Any]:
        """The output list of the key's queue, and the message key (str or bytes). A window's result
        goes by the bytes of its plain tuple ``(key, start, end)``: marshal writes those, where a
        ``WindowKey`` would be pickled (three times slower, and bound to where the class lives)."""
        if self.queues == 1:
            out = self._outs[0]
        else:
            out = self._outs[stable_queue(encode(tuple(key) if type(key) is WindowKey else key), self.queues)]
        return out, key if type(key) is str or type(key) is bytes else str(key)


def _as_bytes(body: Any) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"the serializer must return bytes, got {type(body).__name__}: {body!r:.80}")


def _make_sink(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return SinkProcessor(name, params["topic"], sink_queues[params["topic"]], params["serializer"],
                         on_commit=params.get("visible") is Visible.ON_COMMIT)


#: ``sink(topic, serializer, visible=...)``: every record to ``topic``.
SINK = register(OperatorSpec("sink", SINK_STYLE, _make_sink, role=Role.SINK, writes="topic"))
