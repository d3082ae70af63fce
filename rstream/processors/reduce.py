"""``reduce(fn)``: combine a key's values (or a key's values in one window) two at a time with
``fn(acc, value)``, as ``functools.reduce`` does, starting from the first value. RocketMQ Streams and
Kafka Streams both have it. Keyed it emits the running result for every record; after
``window(...)``, one result per window when it fires; session windows merge with ``fn`` too.

It is one aggregation spec over one fold; ``rstream.processors.aggregate`` runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rstream.processors.aggregate import aggregation
from rstream.processors.fold import Fold


class _Empty:
    """A key's accumulator before its first value (never stored: a value is added before a store)."""

    def __repr__(self) -> str:
        return "<nothing yet>"


_EMPTY = _Empty()


class ReduceFold(Fold):
    """The accumulator is the reduced value itself, so the state shows what the sink shows."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(None)
        self.reduce = fn

    def initial(self) -> Any:
        return _EMPTY

    def add(self, acc: Any, x: Any) -> Any:
        return x if acc is _EMPTY else self.reduce(acc, x)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is _EMPTY else a if b is _EMPTY else self.reduce(a, b)


def _reduce(params: Mapping[str, Any]) -> Fold:
    return ReduceFold(params["fn"])


#: Not combined before the shuffle (``combines`` off): ``fn`` need not be commutative, and only the
#: order of a queue's records is kept, as a shuffle keeps it.
REDUCE = aggregation("reduce", _reduce)
