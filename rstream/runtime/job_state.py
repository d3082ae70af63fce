"""A job's state: the local stores, the state at a past batch and diffs (read from the state topics),
replay, and deleting or resetting what the job keeps."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rstream.broker.base import Broker
from rstream.graph.topology import Topology
from rstream.progressbar import progress_bar
from rstream.runtime.config import state_folder
from rstream.runtime.job_core import JobCore
from rstream.runtime.job_progress import ProgressLog
from rstream.settings import JobError
from rstream.state.store import MISSING, StateError, StateStore, decode_state_message, is_bookkeeping
from rstream.time.windows import WindowKey


class StateHistory:
    """State inspection and the operations on a job's stored state. Reads the job's parts
    (``core``) and its commit tags (``progress_log``: where each batch left a state topic); owns a cache
    of the state at past batches. ``is_running`` says whether the job's query runs (the operations
    that write the stores refuse to while it does)."""

    def __init__(self, core: JobCore, progress_log: ProgressLog, is_running: Callable[[], bool]) -> None:
        self.core = core
        self.progress_log = progress_log
        self.is_running = is_running
        self._lock = threading.RLock()
        self._state_cache: dict[tuple[str, int, int, int], dict[bytes, tuple[str, Any, Any]]] = {}

    def state(self, operator: str | None = None, batch: int | None = None) -> Any:
        """The state as a DataFrame: one row per key, with its operator and queue.

        Without ``batch``: the local state stores (RocksDB, read-only, so it also works while the job
        runs). With ``batch=N`` (a ``BatchProgress.batch_id``): the state as it was right after batch N
        committed, read from the state topics, so it also works from a new job object after a restart
        or with the local state deleted. Raises ``StateError`` when compaction removed that past."""
        import pandas as pd

        rows = []
        if batch is None:
            for topic in self.core.topology.state_topics:
                for q in range(self.core.broker.topic(topic).queues):
                    store = self._local_store(topic, q)
                    if store is None:
                        continue
                    try:
                        rows += [{"operator": op, "queue": q, "key": key, "value": value}
                                 for op, key, value in store.items(operator) if not is_bookkeeping(op, key)]
                    finally:
                        store.close()
        else:
            rows = [{"operator": op, "queue": q, "key": key, "value": value}
                    for (q, _kb), (op, key, value) in self._state_at(batch).items()
                    if operator is None or op == operator]
        return pd.DataFrame(rows, columns=["operator", "queue", "key", "value"])

    def local_state_folders(self) -> Any:
        """Every local copy of a queue's state, on every executor that processed it: executor, topic,
        queue, the input offset it reflects (``applied_offset``), its keys, and whether it is the copy
        of the last committed batch (``fresh``). A queue whose task moved to another executor has a
        stale copy on the old one: the new one replayed it from the state topic."""
        import pandas as pd

        rows = []
        for topic, state_topic in self.core.topology.state_topics.items():
            for folder in sorted(self.core.state_dir.glob(f"*/{topic}/*")):
                if not (folder / "CURRENT").exists() or not folder.name.isdigit():
                    continue
                q = int(folder.name)
                last = self.core.broker.last_commit(self.core.job_id, topic, q)
                store = StateStore(folder, state_topic, q).open(read_only=True)
                try:
                    rows.append({"executor": folder.parent.parent.name, "topic": topic, "queue": q,
                                 "applied_offset": store.applied_offset, "state_keys": store.key_count,
                                 "fresh": last is not None and store.applied_offset == last.end_offset})
                finally:
                    store.close()
        return pd.DataFrame(rows, columns=["executor", "topic", "queue", "applied_offset", "state_keys", "fresh"])

    def _local_store(self, topic: str, queue: int) -> StateStore | None:
        return local_store(self.core.topology, self.core.broker, self.core.state_dir, topic, queue)

    def query(self, operator: str, key: Any) -> Any:
        """``RocketMQStream.query`` (its docstring says what a user gets)."""
        return query_state(self.core.topology, self.core.broker, self.core.state_dir, operator, key, self._committed)

    def _committed(self, topic: str, queue: int) -> list[tuple[str, Any, Any]]:
        """The ``(operator, key, value)`` entries of a queue's state topic as its last commit left them."""
        last = self.core.broker.last_commit(self.core.job_id, topic, queue)
        if last is None or last.batch_id is None:
            return []
        state_topic = self.core.topology.state_topics[topic]
        end = self.state_end(topic, queue, last.batch_id)
        return list(self._state_topic_at(topic, state_topic, queue, end, last.batch_id).values())

    def state_diff(self, from_batch: int, to_batch: int | None = None) -> Any:
        """What changed in the state between right after batch ``from_batch`` and right after batch
        ``to_batch`` (default: the latest committed batch): one row per key that differs, with
        ``change`` ``added``, ``changed`` or ``deleted`` and its value ``before`` and ``after``.
        ``state_diff(n - 1, n)`` is what batch n did to the state. Rows are sorted by operator, queue and
        the key's text."""
        import pandas as pd

        if to_batch is None:
            history = self.progress_log.history()
            if not history:
                raise JobError(f"job {self.core.job_id!r} has not committed a batch yet")
            to_batch = history[-1].batch_id
        before, after = self._state_at(from_batch), self._state_at(to_batch)
        rows = []
        def order(ident: tuple[int, bytes]) -> tuple[str, int, str]:
            op, key, _value = before.get(ident) or after[ident]
            return op, ident[0], str(key)

        for ident in sorted(before.keys() | after.keys(), key=order):
            old, new = before.get(ident), after.get(ident)
            if old is not None and new is not None and old[2] == new[2]:
                continue
            change = "added" if old is None else "deleted" if new is None else "changed"
            entry = new if new is not None else old
            assert entry is not None  # a key in neither would not be here
            op, key, _ = entry
            rows.append({"operator": op, "queue": ident[0], "key": key, "change": change,
                         "before": None if old is None else old[2], "after": None if new is None else new[2]})
        # object columns: a missing side stays None (pandas would turn it into NaN next to numbers)
        return pd.DataFrame(rows, columns=["operator", "queue", "key", "change", "before", "after"], dtype=object)

    def state_end(self, topic: str, queue: int, batch: int) -> int:
        """The offset of ``topic``'s state topic, queue ``queue``, right after batch ``batch``: its
        messages below it are the state then (0: no state yet)."""
        state_topic = self.core.topology.state_topics[topic]
        tags = self.progress_log.queue_tags(topic, queue)
        end = 0
        for tag in tags:
            rng = tag.output_range(state_topic, queue)
            if rng is not None and tag.batch_id is not None and tag.batch_id <= batch:
                end = max(end, rng[1])
        return end

    def _state_at(self, batch: int) -> dict[tuple[int, bytes], tuple[str, Any, Any]]:
        """Per (queue, state key bytes): ``(operator, key, value)`` right after batch ``batch``."""
        history = [p.batch_id for p in self.progress_log.history()]
        if not isinstance(batch, int) or isinstance(batch, bool):
            raise JobError(f"batch must be a batch id (an int), got {batch!r}")
        if batch >= 0 and batch not in history:
            known = f"batches {history[0]}..{history[-1]}" if history else "no batch yet"
            raise JobError(f"job {self.core.job_id!r} has no committed batch {batch}; it has {known}")
        out: dict[tuple[int, bytes], tuple[str, Any, Any]] = {}
        for topic, state_topic in self.core.topology.state_topics.items():
            if not self.core.broker.has_topic(state_topic):
                continue
            for q in range(self.core.broker.topic(state_topic).queues):
                end = self.state_end(topic, q, batch) if batch >= 0 else 0
                for kb, entry in self._state_topic_at(topic, state_topic, q, end, batch).items():
                    out[(q, kb)] = entry
        return out

    def _state_topic_at(self, topic: str, state_topic: str, queue: int, end: int,
                        batch: int) -> dict[bytes, tuple[str, Any, Any]]:
        if end == 0:
            return {}
        compacted = self.core.broker.compacted_below(state_topic, queue)
        if end < compacted:
            readable = [b.batch_id for b in self.progress_log.history() if self.state_end(topic, queue, b.batch_id) >= compacted]
            since = f"batch {readable[0]} on" if readable else "no batch"
            raise StateError(
                f"the state after batch {batch} is gone: {state_topic} queue {queue} was compacted up to offset "
                f"{compacted}, which keeps only each key's latest value; its state can be read from {since}")
        cache_key = (state_topic, queue, end, compacted)
        with self._lock:
            cached = self._state_cache.get(cache_key)
        if cached is not None:
            return cached
        entries: dict[bytes, tuple[str, Any, Any]] = {}
        for rec in self.core.broker.read_latest(state_topic, queue, end).values():
            decoded = decode_state_message(rec[1], rec[3])
            if decoded is not None:
                entries[decoded[0]] = decoded[1:]
        if self.core.broker.compacted_below(state_topic, queue) > end:
            # compacted while it was read (the broker compacts on its own): ask again, which raises
            return self._state_topic_at(topic, state_topic, queue, end, batch)
        with self._lock:
            if len(self._state_cache) > 256:
                self._state_cache.clear()
            self._state_cache[cache_key] = entries
        return entries

    def replay_state(self, progress: bool = True,
                     on_queue: Callable[[dict[str, Any], int, int], None] | None = None) -> Any:
        """``RocketMQStream.replay_state`` (its docstring says what a user sees): every queue's local
        state brought up to its last committed batch, one row per queue."""
        import pandas as pd

        if self.is_running():
            raise JobError("stop the job before replaying its state here (its tasks hold the stores)")
        queues = [(topic, state_topic, q) for topic, state_topic in self.core.topology.state_topics.items()
                  if self.core.broker.has_topic(topic) for q in range(self.core.broker.topic(topic).queues)]
        sizes = {}
        for topic, state_topic, q in queues:
            sizes[(topic, q)] = self.core.broker.end_offsets(state_topic)[q] if self.core.broker.has_topic(state_topic) else 0
        total, done = sum(sizes.values()), 0
        rows = []
        with progress_bar(total, f"{self.core.job_id}: replay state", unit="messages", enabled=progress) as bar:
            for topic, state_topic, q in queues:
                last = self.core.broker.last_commit(self.core.job_id, topic, q)
                committed = None if last is None else last.end_offset
                store = StateStore(state_folder(self.core.state_dir, topic, q), state_topic, q).open()
                try:
                    stale = store.applied_offset != committed
                    replayed = store.replay(self.core.broker, committed) if stale else 0
                    row = {"topic": topic, "queue": q, "committed_offset": committed, "replayed": stale,
                           "replayed_keys": replayed, "state_keys": store.key_count}
                finally:
                    store.close()
                rows.append(row)
                done += sizes[(topic, q)]
                bar.update(sizes[(topic, q)])
                bar.set_postfix_str(f"{topic}/{q}: {replayed} keys")
                if on_queue is not None:
                    on_queue(row, done, total)
        return pd.DataFrame(rows, columns=["topic", "queue", "committed_offset", "replayed", "replayed_keys", "state_keys"])

    def delete_local_state(self) -> None:
        """Delete every local RocksDB folder of this job; the next batch replays them from the
        state topics (what losing an executor does)."""
        if self.is_running():
            raise JobError("stop the job before deleting its local state")
        shutil.rmtree(self.core.state_dir, ignore_errors=True)

    def reset(self) -> None:
        """Forget everything this job did: checkpoint, local state, commit tags, and its shuffle and
        state topics. Source and sink topics stay."""
        if self.is_running():
            raise JobError("stop the job before resetting it")
        shutil.rmtree(self.core.job_dir, ignore_errors=True)
        delete_commits = getattr(self.core.broker, "delete_commits", None)
        if delete_commits is not None:
            delete_commits(self.core.job_id)
        for topic in [*self.core.topology.shuffle_topics, *self.core.topology.state_topics.values(), self.core.late_topic,
                      self.core.dlq_topic]:
            if self.core.broker.has_topic(topic):
                self.core.broker.delete_topic(topic)
        self.progress_log.forget()
        with self._lock:
            self._state_cache.clear()


def local_store(topology: Topology, broker: Broker, state_dir: Path, topic: str, queue: int) -> StateStore | None:
    """The local copy of a queue's state to read (opened read-only, so the job may run meanwhile): the
    one that reflects the last committed batch, else the most advanced one; None when no executor has one."""
    last = broker.last_commit(topology.job_id, topic, queue)
    best: tuple[int, StateStore] | None = None
    for folder in sorted(state_dir.glob(f"*/{topic}/{queue}")):
        if not (folder / "CURRENT").exists():
            continue
        store = StateStore(folder, topology.state_topics[topic], queue).open(read_only=True)
        applied = store.applied_offset if store.applied_offset is not None else -1
        rank = 2**62 if last is not None and applied == last.end_offset else applied
        if best is None or rank > best[0]:
            if best is not None:
                best[1].close()
            best = (rank, store)
        else:
            store.close()
    return None if best is None else best[1]


def query_state(topology: Topology, broker: Broker, state_dir: Path, operator: str, key: Any,
                committed: Callable[[str, int], Iterable[tuple[str, Any, Any]]] | None = None) -> Any:
    """``key``'s value in the state of ``operator`` (a stateful real node's name, as ``job.state()``
    shows it, or a table's: the join that keeps it answers) after the last committed batch; for a windowed operator ``{WindowKey: value}`` of the
    windows of ``key`` still open (fired windows leave the state), by start. None when the key has no
    state. Read from the local stores; a queue whose local copy is missing or behind its last commit
    (its state deleted, or processed elsewhere) is read through ``committed(topic, queue)``, the
    ``(operator, key, value)`` entries its state topic holds as of that commit, when given."""
    node = next((n for n in topology.nodes if n.name == operator), None)
    if node is None:  # a table (``to_table()``) is kept by the stream–table join that reads it
        node = topology.table_keeper(operator)
        operator = node.name if node is not None else operator
    if node is None or not node.stateful:
        known = sorted(n.name for n in topology.nodes if n.stateful)
        raise JobError(f"job {topology.job_id!r} has no stateful operator {operator!r}; "
                       f"its stateful operators are {', '.join(known) or 'none'}")
    if not node.spec.keyed_state:
        raise JobError(f"{operator} is a {node.kind}: its state is the records of each side waiting for a partner, "
                       f"not a value per key. job.state({operator!r}) shows them")
    topic = node.pipeline
    windows: dict[WindowKey, Any] = {}
    for q in range(broker.topic(topic).queues):
        store = local_store(topology, broker, state_dir, topic, q)
        try:
            last = broker.last_commit(topology.job_id, topic, q)
            if committed is not None and last is not None and (store is None or store.applied_offset != last.end_offset):
                entries: Iterable[tuple[str, Any, Any]] = committed(topic, q)
            elif store is None:
                continue
            elif not node.windowed:  # one key: a point read
                value = store.get(operator, key)
                if value is not MISSING:
                    return value
                continue
            else:
                entries = store.items(operator)
            for op, state_key, value in entries:
                if op != operator:
                    continue
                if not node.windowed:
                    if state_key == key:
                        return value
                elif type(state_key) is tuple and len(state_key) == 3 and state_key[0] == key:  # (key, start, end)
                    windows[WindowKey(*state_key)] = value
        finally:
            if store is not None:
                store.close()
    if not node.windowed:
        return None
    return dict(sorted(windows.items(), key=lambda kv: (kv[0].start, kv[0].end))) or None
