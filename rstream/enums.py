"""Enums whose members are their text: ``str(member)`` and ``f"{member}"`` give the value, and a member
equals its value, so settings and rows show and compare as the plain words they were given as."""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
