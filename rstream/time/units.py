"""Durations in milliseconds: ``Time.seconds(5)`` is 5000 ms."""

from __future__ import annotations

from typing import Any


class Time(int):
    """A duration in milliseconds (an ``int``), made readable: ``Time.minutes(1) == 60_000``."""

    @classmethod
    def milliseconds(cls, n: float) -> Time:
        return cls(round(n))

    @classmethod
    def seconds(cls, n: float) -> Time:
        return cls(round(n * 1000))

    @classmethod
    def minutes(cls, n: float) -> Time:
        return cls(round(n * 60_000))

    @classmethod
    def hours(cls, n: float) -> Time:
        return cls(round(n * 3_600_000))

    @classmethod
    def days(cls, n: float) -> Time:
        return cls(round(n * 86_400_000))

    def __repr__(self) -> str:
        for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000)):
            if self and self % size == 0:
                return f"Time.{unit}({int(self) // size})"
        return f"Time.milliseconds({int(self)})"


def to_millis(value: Any, what: str) -> int:
    """``value`` as whole milliseconds; raises ``TypeError`` naming ``what`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a duration in milliseconds or a rstream.Time, got {value!r}")
    if isinstance(value, float) and not value.is_integer():
        raise TypeError(f"{what} must be whole milliseconds, got {value!r}")
    return int(value)
