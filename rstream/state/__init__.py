"""State stores: RocksDB locally (one folder per input queue), the compact state topic remotely."""

from rstream.state.store import (
    MISSING,
    StateError,
    StateStore,
    decode_state_message,
    is_bookkeeping,
    split_state_key,
    state_key,
)

__all__ = [
    "MISSING",
    "StateError",
    "StateStore",
    "decode_state_message",
    "is_bookkeeping",
    "split_state_key",
    "state_key",
]
