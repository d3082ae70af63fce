"""A newcomer's operator, written against the operator contract only (``Processor`` in
``rstream/processors/base.py``): ``open``, ``process``, ``on_watermark``, ``flush``; no chunk method,
no speed path, nothing of another operator. Per key, the largest value of each ``size`` ms of data time,
emitted once the operator watermark passes the end of that span; a record behind the watermark its
source queue had when it was read (``ctx.at.frame.watermark``) is late and left out.

Its spec is declared beside it, as every operator's is; ``bucket_max(grouped, size)`` adds its node
the way a DSL method does (``_add(spec, ...)``). The tests run it in-process at several batch
caps with every rewrite on and with none (``tests/processors/test_one_contract.py``), and it is one of
the generated jobs of ``tests.support.batch_cuts``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rstream.dsl.streams import GroupedStream
from rstream.processors.base import Processor, StreamContext
from rstream.processors.spec import STATEFUL_STYLE, OperatorSpec, Shuffle, register
from rstream.settings import JobProperties
from rstream.state.store import MISSING


class BucketMaxProcessor(Processor):
    """Per key and ``size`` ms of data time, the largest on-time value, once the watermark passes."""

    def __init__(self, name: str, size: int) -> None:
        super().__init__(name)
        self.size = size

    def open(self, ctx: StreamContext) -> None:
        super().open(ctx)
        assert ctx.store is not None
        self.store = ctx.store
        ctx.time.operators.append(self)  # told of every move of the operator watermark

    def process(self, key: Any, value: Any, ts: int) -> None:
        self.records_in += 1
        if ts < self.ctx.at.frame.watermark:  # late where it was read: the same at every batch cut
            return
        end = ts - ts % self.size + self.size
        best = self.store.get(self.name, (key, end))
        if best is MISSING:
            self.store.set_timer(self.name, end, key)  # a timer is state: it survives restarts
        elif best >= value:
            return
        self.store.put(self.name, (key, end), value)

    def on_watermark(self, watermark: int) -> None:
        for end, key in self.store.timers_due(self.name, watermark):  # earliest end first
            self.forward(key, [end - self.size, self.store.get(self.name, (key, end))], end - 1)
            self.store.delete(self.name, (key, end))
            self.store.cancel_timer(self.name, end, key)

    def flush(self) -> None:
        """Nothing kept outside the store: what changed is staged there already."""


def _make(name: str, params: Mapping[str, Any], settings: JobProperties, sink_queues: Mapping[str, int]) -> Processor:
    return BucketMaxProcessor(name, params["size"])


#: Shuffled by key before it, stateful, timed (so its shuffle topic carries each record's watermark).
BUCKET_MAX = register(OperatorSpec("bucket_max", STATEFUL_STYLE, _make, shuffle=Shuffle.BY_KEY, stateful=True,
                                   timed=True))


def bucket_max(grouped: GroupedStream[Any, Any], size: int) -> GroupedStream[Any, Any]:
    """``grouped`` (a ``key_by`` result) through the operator: what a DSL method of its own would do
    (``GroupedStream.process`` is such a method: ``self._add(PROCESS, ...)``)."""
    return GroupedStream(grouped._builder, grouped._add(BUCKET_MAX, size=size, detail=f"{size} ms"))
