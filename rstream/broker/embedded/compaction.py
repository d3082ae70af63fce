"""Compaction of the embedded broker's compact topics: keep the latest record per key below a
point, as Kafka's log cleaner does, without changing any offset; and the policy that decides when
an append compacts a queue on its own."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from rstream.broker.base import MessageKey
from rstream.broker.embedded.format import decode_payload as _decode_payload
from rstream.broker.embedded.format import encode_records
from rstream.broker.embedded.sqlite import now_ms

if TYPE_CHECKING:
    from rstream.broker.embedded.broker import EmbeddedBroker


def compaction_due(broker: EmbeddedBroker, end: int, compacted: int, clean: int) -> bool:
    """The log cleaner's policy: enough dirty records below the lag, and a large enough share."""
    assert broker.compact_min_dirty is not None
    dirty = end - broker.compact_min_lag - compacted
    return dirty >= broker.compact_min_dirty and dirty >= broker.compact_dirty_ratio * (dirty + clean)


def compact_queue(broker: EmbeddedBroker, topic: str, queue: int, below: int | None, delete_retention_ms: int,
                  auto: bool = False) -> int:
    """Compact one queue below ``below`` (rounded down to a stored batch's start). Reads and
    decides in a read transaction without the write lock, then applies in a short write
    transaction if nobody compacted the queue meanwhile. Returns the messages removed."""
    conn = broker._conn("compact_conn")  # its own connection: the caller may hold an open cursor
    conn.execute("BEGIN")
    try:
        row = conn.execute(
            "SELECT q.next_offset, q.compacted_below, q.clean_records, t.created_ms, t.compact FROM queues q "
            "JOIN topics t ON t.name=q.topic WHERE q.topic=? AND q.queue=?", (topic, queue)).fetchone()
        if row is None or not row[4]:
            return 0  # gone, or replaced by a topic that is not compact
        end, compacted, clean, created, _compact = row
        now = now_ms()
        if auto and broker._not_before.get((topic, queue), 0) > now:
            return 0
        point = end if below is None else min(int(below), end)
        if auto:
            point = min(point, end - broker.compact_min_lag)
            if broker.compact_min_lag_ms > 0:
                first_young = conn.execute(
                    "SELECT base_offset, store_ms FROM batches WHERE topic=? AND queue=? AND store_ms>? "
                    "ORDER BY base_offset LIMIT 1", (topic, queue, now - broker.compact_min_lag_ms)).fetchone()
                if first_young is not None and first_young[0] < point:
                    point, born = first_young
                    # until that batch is old enough, the appends' checks need not look again
                    if not compaction_due(broker, point + broker.compact_min_lag, compacted, clean):
                        broker._not_before[(topic, queue)] = born + broker.compact_min_lag_ms + 1
        # a stored batch is compacted whole or not at all: round down to the start of the batch
        # holding the point (rows that compaction rewrote have explicit offsets at or above base)
        if point < end:
            start_of = conn.execute(
                "SELECT MAX(base_offset) FROM batches WHERE topic=? AND queue=? AND base_offset<=?",
                (topic, queue, point)).fetchone()[0]
            if start_of is not None and start_of < point:
                first_after = conn.execute(
                    "SELECT payload FROM batches WHERE topic=? AND queue=? AND base_offset=?",
                    (topic, queue, start_of)).fetchone()[0]
                cols = _decode_payload(first_after)
                last = cols.offsets[-1] if cols.offsets else start_of + len(cols.bodies) - 1
                if last >= point:
                    point = start_of
        if point < compacted or (point == compacted and (auto or point == 0)):
            return 0  # never backwards; a manual call at the same point still drops expired deletes
        if auto and not compaction_due(broker, point + broker.compact_min_lag, compacted, clean):
            return 0
        rows = conn.execute(
            "SELECT base_offset, store_ms, payload FROM batches WHERE topic=? AND queue=? AND base_offset<? "
            "ORDER BY base_offset", (topic, queue, point)).fetchall()
    finally:
        conn.execute("COMMIT")
    # Two passes over the stored batches, keeping only their encoded payloads in between: the
    # decoded records of a big state topic would not fit in a Spark worker's memory.
    latest: dict[MessageKey, int] = {}
    shapes = []  # per stored batch: (first offset, last offset, records, holds a delete)
    for base, _store_ms, payload in rows:
        cols = _decode_payload(payload)
        offs = cols.offsets if cols.offsets is not None else range(base, base + len(cols.bodies))
        latest.update(zip(cols.column("keys"), offs))
        shapes.append((offs[0], offs[-1], len(cols.bodies), not all(cols.bodies)))
        del cols, offs
    latest.pop(None, None)  # a compact topic keeps no message without key
    survivors = sorted(latest.values())
    del latest
    horizon = now - delete_retention_ms
    changes: list[tuple[int, bytes | None]] = []  # (base offset, new payload or None: delete the row)
    removed = kept_total = 0
    for (base, store_ms, payload), (first, last, count, has_delete) in zip(rows, shapes):
        # the batch's surviving offsets, by bisection: no per-record work for a batch left as is
        lo = bisect.bisect_left(survivors, first)
        hi = bisect.bisect_right(survivors, last)
        keep_deletes = store_ms > horizon
        if hi - lo == count and (keep_deletes or not has_delete):
            kept_total += count  # the usual clean batch: left as it is
            continue
        if hi == lo:
            removed += count
            changes.append((base, None))
            continue
        cols = _decode_payload(payload)
        offsets = cols.offsets
        if offsets is None:
            at = [o - base for o in survivors[lo:hi]]
        else:
            index = {o: i for i, o in enumerate(offsets)}
            at = [index[o] for o in survivors[lo:hi]]
        offs = offsets if offsets is not None else range(base, base + count)
        recs = list(cols.records())
        keep = [(offs[i], recs[i]) for i in at if keep_deletes or recs[i][1]]
        kept_total += len(keep)
        removed += count - len(keep)
        changes.append((base, encode_records([r for _, r in keep], [o for o, _ in keep]) if keep else None))
    with broker._write(conn):
        now_row = conn.execute(
            "SELECT q.compacted_below, t.created_ms FROM queues q JOIN topics t ON t.name=q.topic "
            "WHERE q.topic=? AND q.queue=?", (topic, queue)).fetchone()
        if now_row is None or tuple(now_row) != (compacted, created):
            return 0  # another process compacted this queue meanwhile (or the topic was replaced)
        for base, payload in changes:
            if payload is None:
                conn.execute("DELETE FROM batches WHERE topic=? AND queue=? AND base_offset=?", (topic, queue, base))
            else:
                conn.execute("UPDATE batches SET payload=? WHERE topic=? AND queue=? AND base_offset=?",
                             (payload, topic, queue, base))
        conn.execute("UPDATE queues SET compacted_below=?, clean_records=? WHERE topic=? AND queue=?",
                     (point, kept_total, topic, queue))
    return removed
