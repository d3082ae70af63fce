"""The state store of one input queue: RocksDB (rocksdict) locally, the compact state topic remotely.

Keys are namespaced ``operator \\x00 key``. Changes of a batch are staged in memory; at the end of the
batch they become changelog records for the state topic (appended with the batch's outputs in one
tagged transaction) and then one RocksDB ``WriteBatch`` that also records the input offset the
state now reflects (``applied_offset``). A local copy whose ``applied_offset`` is not the queue's
last committed offset is stale: it is rebuilt by ``replay`` from the state topic.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, Rdict, WriteBatch

from rstream.broker.base import Broker, RecordBlock, RecordTuple
from rstream.errors import RStreamError
from rstream.serde.codec import decode, encode

MISSING: Any = object()

_META = b"\x00rstream:"
_APPLIED = _META + b"applied"
_KEYS = _META + b"keys"
_LEN = struct.Struct(">I")
_END = struct.Struct(">Q")
_END_BIAS = 2**63  # timers sort by end time as unsigned big-endian bytes
#: Header that marks a delete in the state topic (its body is empty, as RIP-58 says).
DELETE_HEADER = "rstream-delete"


class StateError(RStreamError):
    """The state store cannot be opened or read."""


def _options() -> Options:
    """RocksDB options of a state store. A task opens its queue's store for every range, so the
    open is kept cheap: one info log kept (each open starts a new one and would keep the old), no
    pool of file-opening threads and no statistics read at open (a store holds few files)."""
    options = Options(raw_mode=True)
    options.set_keep_log_file_num(1)
    options.set_max_file_opening_threads(1)
    options.set_skip_stats_update_on_db_open(True)
    return options


def state_key(operator: str, key: Any) -> bytes:
    """The bytes of ``key`` in ``operator``'s namespace."""
    return operator.encode() + b"\x00" + encode(key)


def timer_key(operator: str, end: int, payload: Any) -> bytes:
    """A timer of ``operator`` at ``end`` (RocksDB keeps them ordered by end time)."""
    return operator.encode() + b"\x01" + _END.pack(end + _END_BIAS) + encode(payload)


def _separator(kb: bytes) -> int:
    # operator names never hold \x00 or \x01, so the first of them ends the name
    cut = [i for i in (kb.find(b"\x00"), kb.find(b"\x01")) if i >= 0]
    return min(cut) if cut else -1


def split_state_key(kb: bytes) -> tuple[str, Any]:
    """``(operator, key)`` of a namespaced state key."""
    i = _separator(kb)
    return kb[:i].decode(), decode(kb[i + 1:])


#: Keys an operator keeps for itself, not user state: its watermark table and its fired horizon.
BOOKKEEPING_PREFIX = "__"
HORIZON_KEY = "__horizon__"
#: The event time an operator that takes its records in data-time order has reached (``rstream.processors.ordered``).
POSITION_KEY = "__position__"
_BOOKKEEPING_KEYS = frozenset({HORIZON_KEY, POSITION_KEY})


def is_bookkeeping(operator: str, key: Any) -> bool:
    """Whether ``(operator, key)`` is an operator's own bookkeeping rather than user state."""
    return operator.startswith(BOOKKEEPING_PREFIX) or (type(key) is str and key in _BOOKKEEPING_KEYS)


def is_timer(kb: bytes) -> bool:
    """Whether a namespaced state key is a timer (``timer_key``) rather than a value."""
    i = _separator(kb)
    return i >= 0 and kb[i] == 1


def decode_state_message(body: bytes, headers: Any = None) -> tuple[bytes, str, Any, Any] | None:
    """``(state key bytes, operator, key, value)`` of a state-topic message that holds user state;
    None for a delete, a timer or an operator's bookkeeping."""
    if not body or (headers and DELETE_HEADER in headers):
        return None
    kb, vb = unframe(body)
    if is_timer(kb):
        return None
    operator, key = split_state_key(kb)
    if is_bookkeeping(operator, key):
        return None
    return kb, operator, key, decode(vb)


def _frame(kb: bytes, vb: bytes) -> bytes:
    return _LEN.pack(len(kb)) + kb + vb


def unframe(body: bytes) -> tuple[bytes, bytes]:
    """``(state key, value)`` from a state-topic message body."""
    n = _LEN.unpack_from(body)[0]
    return body[4:4 + n], body[4 + n:]


class StateStore:
    """State of one input queue. Open with ``open()``, or as a context manager."""

    def __init__(self, folder: str | Path, state_topic: str, queue: int) -> None:
        self.folder = Path(folder)
        self.state_topic = state_topic
        self.queue = queue
        self.db: Rdict | None = None
        self._changes: dict[bytes, bytes | None] = {}
        #: The timer keys ever staged in ``_changes`` this batch (a set, or a delete), by operator
        #: and end (the key's first bytes), so listing due timers walks only those due.
        self._timer_changes: dict[bytes, set[bytes]] = {}
        self._prepared: tuple[WriteBatch, int] | None = None
        self.replayed_keys = 0
        #: Whether the last ``open`` waited for another process to let go of the store.
        self.was_held = False

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self, read_only: bool = False, wait_s: float = 0.0) -> StateStore:
        """Open the store. RocksDB lets one process at a time write a store: ``wait_s`` is how long to
        wait for another process that holds it (another attempt of the same queue range) to let go;
        ``was_held`` then says whether it had to. Read-only opens never wait."""
        deadline = time.monotonic() + wait_s
        pause = 0.005
        self.was_held = False
        while True:
            try:
                if read_only:
                    self.db = Rdict(str(self.folder), _options(), access_type=AccessType.read_only())
                else:
                    self.folder.mkdir(parents=True, exist_ok=True)
                    self.db = Rdict(str(self.folder), _options())
                return self
            except Exception as exc:
                held = not read_only and "LOCK" in str(exc)
                if held and time.monotonic() < deadline:
                    self.was_held = True
                    time.sleep(pause)
                    pause = min(pause * 2, 0.1)
                    continue
                if held:
                    raise StateError(
                        f"cannot open the state store at {str(self.folder)!r}: another process holds it"
                        + (f" (waited {wait_s:g} s)" if wait_s else "") + f": {exc}") from exc
                raise StateError(f"cannot open the state store at {str(self.folder)!r}: {exc}") from exc

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def __enter__(self) -> StateStore:
        return self if self.db is not None else self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def exists(self) -> bool:
        return (self.folder / "CURRENT").exists()

    def _require(self) -> Rdict:
        if self.db is None:
            raise StateError(f"the state store at {str(self.folder)!r} is not open")
        return self.db

    # -- metadata -------------------------------------------------------------------------------
    @property
    def applied_offset(self) -> int | None:
        """The input offset up to which this local copy reflects committed work (None: never)."""
        raw = self._require().get(_APPLIED)
        return None if raw is None else int(raw)

    @property
    def key_count(self) -> int:
        raw = self._require().get(_KEYS)
        return 0 if raw is None else int(raw)

    # -- reads and staged writes ----------------------------------------------------------------
    def get(self, operator: str, key: Any) -> Any:
        """The value of ``key`` for ``operator`` (staged changes first), or ``MISSING``."""
        kb = state_key(operator, key)
        if kb in self._changes:
            raw = self._changes[kb]
        else:
            raw = self._require().get(kb)
        return MISSING if raw is None else decode(raw)

    def set_timer(self, operator: str, end: int, payload: Any, value: Any = None) -> None:
        """Stage a timer: ``timers_due`` returns it once the watermark reaches ``end``. A ``value``
        (None: none) is kept with it, for ``timer_values``: a record an operator holds until then."""
        self.stage_timer(timer_key(operator, end, payload), b"" if value is None else encode(value))

    def stage_timer(self, kb: bytes, value: bytes = b"") -> None:
        """Stage a timer by its key (``timer_key``), as ``set_timer`` does: for an operator that keeps
        the timers it sets in a batch to itself until the batch ends."""
        self._changes[kb] = value
        self._stage_timer(kb)

    def has_timer(self, operator: str, end: int, payload: Any) -> bool:
        """Whether the timer of ``operator`` at ``end`` for ``payload`` is set (staged changes first)."""
        kb = timer_key(operator, end, payload)
        if kb in self._changes:
            return self._changes[kb] is not None
        return self._require().get(kb) is not None

    def has_timers(self, operator: str) -> bool:
        """Whether the store holds a committed timer of ``operator`` (staged changes not counted)."""
        prefix = operator.encode() + b"\x01"
        for kb in self._require().keys(from_key=prefix):
            return isinstance(kb, bytes) and kb.startswith(prefix)
        return False

    def unstage(self, kb: bytes) -> None:
        """Drop what this batch staged for ``kb`` (a key the store never held, such as a timer set
        in this batch and due in it): nothing of it reaches the state topic."""
        self._changes.pop(kb, None)

    def cancel_timer(self, operator: str, end: int, payload: Any, new: bool = False) -> None:
        """Stage the timer's delete; ``new``: it was set in this batch and was never committed, so
        the staged set is dropped instead (no delete for the state topic)."""
        kb = timer_key(operator, end, payload)
        self._stage_delete(kb, new)
        self._stage_timer(kb)

    def _stage_timer(self, kb: bytes) -> None:
        group = kb[:kb.index(b"\x01") + 9]  # the operator's name, \x01 and the end (names hold no \x01)
        staged = self._timer_changes.get(group)
        if staged is None:
            staged = self._timer_changes[group] = set()
        staged.add(kb)

    def timers_due(self, operator: str, watermark: int) -> list[tuple[int, Any]]:
        """``(end, payload)`` of ``operator``'s timers with ``end <= watermark``, earliest first
        (RIP-58's ``searchStateLessThanWatermark``)."""
        return self._timers(operator, watermark)

    def timers(self, operator: str) -> list[tuple[int, Any]]:
        """Every pending timer of ``operator``, earliest first."""
        return self._timers(operator, None)

    def timer_values(self, operator: str) -> list[tuple[int, Any, Any]]:
        """``(end, payload, value)`` of every pending timer of ``operator`` set with a value, earliest
        first (staged changes applied)."""
        out = []
        for end, payload in self._timers(operator, None):
            kb = timer_key(operator, end, payload)
            raw = self._changes[kb] if kb in self._changes else self._require().get(kb)
            out.append((end, payload, decode(raw) if raw else None))
        return out

    def _timers(self, operator: str, watermark: int | None) -> list[tuple[int, Any]]:
        prefix = operator.encode() + b"\x01"
        n = len(prefix)
        found: dict[bytes, None] = {}
        for kb in self._require().keys(from_key=prefix):
            assert isinstance(kb, bytes)
            if not kb.startswith(prefix):
                break
            if watermark is not None and _END.unpack_from(kb, n)[0] - _END_BIAS > watermark:
                break
            found[kb] = None
        changes = self._changes
        for group, staged in self._timer_changes.items():
            if group.startswith(prefix) and (watermark is None or _END.unpack_from(group, n)[0] - _END_BIAS <= watermark):
                for kb in staged:
                    if changes.get(kb) is None:  # a delete, or a timer set and cancelled in this batch
                        found.pop(kb, None)
                    else:
                        found[kb] = None
        return [(_END.unpack_from(kb, n)[0] - _END_BIAS, decode(kb[n + 8:])) for kb in sorted(found)]

    def put(self, operator: str, key: Any, value: Any) -> None:
        """Stage a new value; it is persisted by ``changelog`` / ``commit``."""
        self._changes[state_key(operator, key)] = encode(value)

    def delete(self, operator: str, key: Any, new: bool = False) -> None:
        """Stage a delete; ``new``: the key was made in this batch and never committed, so only what
        was staged for it is dropped (a delete of a key the store never held is not written)."""
        self._stage_delete(state_key(operator, key), new)

    def _stage_delete(self, kb: bytes, new: bool) -> None:
        """A delete of ``kb`` staged; for a key made in this batch (``new``), what it staged dropped."""
        if new:
            self.unstage(kb)
        else:
            self._changes[kb] = None

    @property
    def changed_keys(self) -> int:
        return len(self._changes)

    def staged_changes(self) -> dict[bytes, bytes | None]:
        """A copy of this batch's staged changes: state key bytes -> value bytes (None: delete)."""
        return dict(self._changes)

    def committed_raw(self, kb: bytes) -> bytes | None:
        """The committed value bytes of a namespaced state key (staged changes not applied)."""
        raw = self._require().get(kb)
        return None if raw is None else bytes(raw)

    def changelog(self) -> list[RecordTuple]:
        """The state-topic records for this batch's changes: key = hex of the state key, body =
        state key + value; a delete has an empty body and the delete header."""
        now = time.time_ns() // 1_000_000
        out: list[RecordTuple] = []
        for kb, vb in self._changes.items():
            if vb is None:
                out.append((kb.hex(), b"", now, {DELETE_HEADER: "1"}, None))
            else:
                out.append((kb.hex(), _frame(kb, vb), now, None, None))
        return out

    def prepare(self) -> int:
        """Turn the staged changes into one RocksDB write batch (written by ``commit``); returns how
        many keys the store will hold then, so the count can be reported before the commit."""
        db = self._require()
        count = self.key_count
        batch = WriteBatch(raw_mode=True)
        for kb, vb in self._changes.items():
            existed = db.get(kb) is not None
            if vb is None:
                if existed:
                    batch.delete(kb)
                    count -= 1
            else:
                batch.put(kb, vb)
                count += 0 if existed else 1
        self._prepared = (batch, count)
        return count

    def commit(self, applied_offset: int) -> None:
        """Write the staged changes and ``applied_offset`` in one RocksDB write batch."""
        batch, count = self._prepared if self._prepared is not None else (None, 0)
        if batch is None:
            self.prepare()
            assert self._prepared is not None
            batch, count = self._prepared
        batch.put(_KEYS, str(count).encode())
        batch.put(_APPLIED, str(applied_offset).encode())
        self._require().write(batch)
        self._changes.clear()
        self._timer_changes.clear()
        self._prepared = None

    def discard(self) -> None:
        """Drop staged changes (their batch did not commit)."""
        self._changes.clear()
        self._timer_changes.clear()
        self._prepared = None

    # -- replay ---------------------------------------------------------------------------------
    def replay(self, broker: Broker, applied_offset: int | None, state_end: int | None = None) -> int:
        """Rebuild the local copy from the state topic: per key the message with the highest offset
        wins, deletes are skipped. One write batch wipes the stale copy and loads the new one, so a
        crash leaves either the old copy (replayed again next time) or the new one. With
        ``state_end``, only the state topic's messages below that offset count (the state as an
        earlier batch left it). Returns the keys loaded."""
        if self.db is None:
            self.open()
        self._changes.clear()
        self._timer_changes.clear()
        # Per key its latest message wins, with no dict of every key's body built first: the
        # stored batches are taken newest first, and a key's first message seen is its latest.
        # Below the queue's compaction point a key is held at most once, so there a stored batch
        # only drops the keys a newer message holds (``seen``, from the uncompacted tail). A
        # delete is a key seen and not put (the write batch starts by wiping every key).
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(b"\x00", b"\xff")  # every key: meta keys start with \x00, operator names are ASCII
        seen: set[Any] = set()
        loaded = 0
        if broker.has_topic(self.state_topic):
            # as the broker keeps the queue: its compacted part (a key at most once) first, then the rest
            blocks = list(broker.read_compacted(self.state_topic, self.queue, state_end))
            for block, compacted in reversed(blocks):
                loaded += _load_block(batch, block, seen, unique=compacted)
        batch.put(_KEYS, str(loaded).encode())
        if applied_offset is not None:
            batch.put(_APPLIED, str(applied_offset).encode())
        self._require().write(batch)
        self.replayed_keys = loaded
        return loaded

    # -- inspection -----------------------------------------------------------------------------
    def items(self, operator: str | None = None) -> Iterator[tuple[str, Any, Any]]:
        """``(operator, key, value)`` of every committed key (of one operator if given)."""
        db = self._require()
        prefix = None if operator is None else operator.encode() + b"\x00"
        it = db.items() if prefix is None else db.items(from_key=prefix)
        for kb, vb in it:
            assert isinstance(kb, bytes) and isinstance(vb, bytes)  # the store is opened in raw mode
            if kb.startswith(_META):
                continue
            if prefix is not None and not kb.startswith(prefix):
                break
            i = _separator(kb)
            if kb[i] == 1:
                continue  # a timer, not a value
            yield kb[:i].decode(), decode(kb[i + 1:]), decode(vb)


def _load_block(batch: WriteBatch, block: RecordBlock, seen: set[Any], unique: bool) -> int:
    """Put the records of ``block`` whose key ``seen`` (the keys of newer records) does not hold;
    returns the keys put. ``unique``: no key is twice in the block and no later block of the
    replay needs to know its keys (it lies below the compaction point)."""
    keys, bodies = block.keys, block.bodies
    put, unpack = batch.put, _LEN.unpack_from
    if block.headers.count(None) == len(bodies) and b"" not in bodies:  # no delete: the usual case
        if seen and not seen.isdisjoint(keys):
            bodies = [body for key, body in zip(keys, bodies) if key not in seen]
        if unique:
            loaded = len(bodies)
        else:
            before = len(seen)
            seen.update(keys)
            loaded = len(seen) - before  # a key twice in the block is put twice: the later put wins
        for body in bodies:
            n = unpack(body)[0]
            put(body[4:4 + n], body[4 + n:])
        return loaded
    loaded = 0
    for key, body, headers in zip(reversed(keys), reversed(bodies), reversed(block.headers)):
        if key in seen:
            continue
        seen.add(key)
        if body and not (headers and DELETE_HEADER in headers):
            put(*unframe(body))
            loaded += 1
    return loaded
