"""Operators that write to topics: the shuffle sink (to a shuffle topic, by key) and the sink."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rstream.processors.base import Processor
from rstream.serde.codec import encode, stable_queue


class ShuffleSinkProcessor(Processor):
    """Sends each record to the shuffle topic queue chosen by a stable hash of its serialized key,
    so every record of a key meets the same aggregate, in whatever process it runs."""

    kind = "shuffle_sink"

    def __init__(self, name: str, topic: str, queues: int) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.records_out = 0

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self._outs = [ctx.output(self.topic, q) for q in range(self.queues)]

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        kb = encode(key)
        self._outs[stable_queue(kb, self.queues)].append((kb, encode(value), ts, None, None))

    def metrics(self) -> dict[str, Any]:
        return {"records_in": self.records_in, "records_out": self.records_in}


class SinkProcessor(Processor):
    """Writes ``serializer(key, value)`` to the sink topic. Records with a key go to the queue of a
    stable hash of the key, so each key's results stay in order; keyless records keep their
    input queue's order (input queue modulo the sink's queue count)."""

    kind = "sink"

    def __init__(self, name: str, topic: str, queues: int, serialize: Callable[[Any, Any], bytes]) -> None:
        super().__init__(name)
        self.topic = topic
        self.queues = queues
        self.serialize = serialize

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self._outs = [ctx.output(self.topic, q) for q in range(self.queues)]
        self._keyless = self._outs[ctx.queue % self.queues]

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        try:
            body = self.serialize(key, value)
            if type(body) is not bytes:
                body = _as_bytes(body)
        except Exception as exc:
            raise self.ctx.record_error(self.name, exc, (key, value)) from exc  # type: ignore[union-attr]
        if key is None:
            self._keyless.append((None, body, ts, None, None))
            return
        mkey = key if type(key) is str or type(key) is bytes else str(key)
        out = self._outs[stable_queue(encode(key), self.queues)] if self.queues > 1 else self._outs[0]
        out.append((mkey, body, ts, None, None))

    def metrics(self) -> dict[str, Any]:
        return {"records_in": self.records_in, "records_out": self.records_in}


def _as_bytes(body: Any) -> bytes:
    if isinstance(body, str):
        return body.encode()
    if isinstance(body, (bytearray, memoryview)):
        return bytes(body)
    raise TypeError(f"the serializer must return bytes, got {type(body).__name__}: {body!r:.80}")
