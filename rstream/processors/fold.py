"""One fold for every aggregation: ``initial() / add(acc, x) / merge(a, b) / result(acc)``.

Keyed aggregates, windowed aggregates and the combining shuffle sink (``aggregate_emit="batch"``)
all fold through these objects, so count, sum, min, max, avg, reduce and user accumulators have
one definition each. ``extract(value)`` is what a record contributes (``fn(value)``, or the value).
The accumulator is what the state store keeps for a key (or a key and window), so it stays plain
data: a number, a list, or what a user accumulator returns.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar, cast

from rstream.time.windows import WindowError

V = TypeVar("V")
A = TypeVar("A")
R = TypeVar("R")


class Accumulator(Generic[V, A, R]):
    """How ``aggregate`` folds a key's values: ``initial()`` starts a key's accumulator,
    ``add(acc, value)`` returns the next one, ``result(acc)`` is what is emitted; session windows
    also need ``merge(acc1, acc2)``. Accumulators are stored in the state store, so they must be
    plain data (numbers, strings, tuples, lists, dicts) or picklable."""

    def initial(self) -> A:
        raise TypeError(f"{type(self).__name__} must define initial()")

    def add(self, acc: A, value: V) -> A:
        raise TypeError(f"{type(self).__name__} must define add(acc, value)")

    def result(self, acc: A) -> R:
        return cast(R, acc)


class Accumulated:
    """A value that is already an accumulator of the fold (a source range's values of one key folded
    before the shuffle): an aggregation merges it (``Fold.merge``) instead of adding it."""

    __slots__ = ("acc",)

    def __init__(self, acc: Any) -> None:
        self.acc = acc

    def __repr__(self) -> str:
        return f"Accumulated({self.acc!r})"


class Fold(ABC):
    """Base of the folds. ``fn`` picks what a record contributes; None: the value itself.

    What a fold allows is declared on it, for the speed paths to ask (never its type): ``counts``,
    every record adds one and its value is never read (so a chunk's records may be added up at once,
    a partial may hold only their times, and nothing can raise)."""

    counts: ClassVar[bool] = False

    def __init__(self, fn: Callable[[Any], Any] | None = None) -> None:
        self.fn = fn

    def extract(self, value: Any) -> Any:
        fn = self.fn
        return value if fn is None else fn(value)

    def initial(self) -> Any:
        return None  # nothing yet: the first add takes the value

    @abstractmethod
    def add(self, acc: Any, x: Any) -> Any:
        """The accumulator after one more contribution ``x`` (an ``extract``-ed value)."""

    @abstractmethod
    def merge(self, a: Any, b: Any) -> Any:
        """One accumulator for two (partials combined before a shuffle, sessions that meet)."""

    def step(self, acc: Any, value: Any) -> Any:
        """``add(acc, extract(value))``: what the hot path calls, once per record."""
        return self.add(acc, self.extract(value))

    def result(self, acc: Any) -> Any:
        return acc

    @property
    def result_is_acc(self) -> bool:
        """Whether ``result`` returns the accumulator itself (the hot path then skips the call)."""
        return type(self).result is Fold.result


class CountFold(Fold):
    counts = True

    def extract(self, value: Any) -> Any:
        return 1

    def step(self, acc: Any, value: Any) -> Any:
        return acc + 1

    def initial(self) -> Any:
        return 0

    def add(self, acc: Any, x: Any) -> Any:
        return acc + 1

    def merge(self, a: Any, b: Any) -> Any:
        return a + b


class SumFold(Fold):
    def add(self, acc: Any, x: Any) -> Any:
        return x if acc is None else acc + x

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is None else a if b is None else a + b


class MinFold(Fold):
    def add(self, acc: Any, x: Any) -> Any:
        return x if acc is None or x < acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is None else self.add(a, b)


class MaxFold(Fold):
    def add(self, acc: Any, x: Any) -> Any:
        return x if acc is None or x > acc else acc

    def merge(self, a: Any, b: Any) -> Any:
        return a if b is None else self.add(a, b)


class AvgFold(Fold):
    """The mean: the accumulator is ``[sum, count]``."""

    def initial(self) -> Any:
        return [0, 0]

    def add(self, acc: Any, x: Any) -> Any:
        return [acc[0] + x, acc[1] + 1]

    def merge(self, a: Any, b: Any) -> Any:
        return [a[0] + b[0], a[1] + b[1]]

    def result(self, acc: Any) -> Any:
        return acc[0] / acc[1] if acc[1] else None


class NumberAvgFold(AvgFold):
    """The mean of the values themselves (``avg()`` without a function), which must be numbers: a
    value that is none (a str, None, a bool) raises, so the record goes to the dead letters, as
    RocketMQ Streams 1.1's ``AvgAccumulator`` throws on a value that is no ``Number``."""

    def extract(self, value: Any) -> Any:
        if type(value) is int or type(value) is float or (
                isinstance(value, (int, float)) and not isinstance(value, bool)):
            return value
        raise TypeError(
            f"avg() without a function averages the values themselves, which must be numbers; got "
            f"{type(value).__name__} {value!r:.80}: pass the function that picks the number, "
            "e.g. avg(lambda v: v['amount'])"
        )


class AccumulatorFold(Fold):
    """A user ``Accumulator``: its ``initial``, ``add``, ``result`` and (sessions) ``merge``."""

    def __init__(self, accumulator: Accumulator[Any, Any, Any]) -> None:
        super().__init__(None)
        self.accumulator = accumulator

    def initial(self) -> Any:
        return self.accumulator.initial()

    def add(self, acc: Any, x: Any) -> Any:
        return self.accumulator.add(acc, x)

    def merge(self, a: Any, b: Any) -> Any:
        merge = getattr(self.accumulator, "merge", None)
        if merge is None:
            raise WindowError(f"merging sessions needs {type(self.accumulator).__name__}.merge(acc1, acc2); define it")
        return merge(a, b)

    def result(self, acc: Any) -> Any:
        return self.accumulator.result(acc)


class _Empty:
    """A key's accumulator before its first value (never stored: a value is added before a store)."""

    def __repr__(self) -> str:
        return "<nothing yet>"


_EMPTY = _Empty()


class ReduceFold(Fold):
    """``reduce(fn)``: combines a key's values two at a time with ``fn(acc, value)``, as
    ``functools.reduce`` does, starting from the first value. The accumulator is the reduced value
    itself, so the state shows what the sink shows."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        super().__init__(None)
        self.reduce = fn

    def initial(self) -> Any:
        return _EMPTY

    def add(self, acc: Any, x: Any) -> Any:
        return x if acc is _EMPTY else self.reduce(acc, x)

    def merge(self, a: Any, b: Any) -> Any:
        return b if a is _EMPTY else a if b is _EMPTY else self.reduce(a, b)
