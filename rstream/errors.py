"""The root of every error rstream raises: catch ``RStreamError`` to catch them all."""

from __future__ import annotations


class RStreamError(Exception):
    """Base class of all rstream errors."""
