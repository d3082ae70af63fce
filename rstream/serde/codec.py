"""The internal codec for keys and values that cross shuffle topics and state topics.

Built-in values (str, int, float, bytes, None, bool and tuples/lists/dicts of them) are written
with ``marshal`` version 2: fast, safe to read, and deterministic for the same value in every
process (version 2 has no back-references, so the bytes do not depend on reference counts). This
matters because a shuffle picks its queue by a hash of these bytes. Anything else falls back to
pickle, which starts with byte 0x80, a byte marshal never starts with.
"""

from __future__ import annotations

import marshal
import pickle
import zlib
from typing import Any

MARSHAL_VERSION = 2
#: The first byte of pickle's output, never the first byte of marshal's.
PICKLE_MARK = 0x80


def encode(obj: Any) -> bytes:
    """Bytes for ``obj``; the same value gives the same bytes in every process."""
    try:
        return marshal.dumps(obj, MARSHAL_VERSION)
    except ValueError:
        return pickle.dumps(obj, protocol=5)


def decode(data: bytes) -> Any:
    """The value ``encode`` was given."""
    if data[0] == PICKLE_MARK:
        return pickle.loads(data)
    return marshal.loads(data)


def stable_queue(key_bytes: bytes, queues: int) -> int:
    """The queue for a serialized key: crc32, so it is the same in every process and run."""
    return zlib.crc32(key_bytes) % queues
