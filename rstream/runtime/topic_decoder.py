"""Reading any topic as Python values: what each topic is for in a job (its *role*) and how its
messages decode (shuffle and state topics hold the internal codec, watermark markers and idle ticks
are control records, late and dead-letter topics hold reports).

Used by ``job.trace`` and by the notebook toolkit's topic browser; nothing here writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rstream.graph.topology import STATE_TOPIC_SUFFIX, Topology
from rstream.processors.base import DLQ_ERROR
from rstream.serde.codec import decode
from rstream.shuffle import wire
from rstream.state.store import DELETE_HEADER, is_bookkeeping, is_timer, split_state_key, unframe

#: What a topic is for.
SOURCE, SHUFFLE, STATE, SINK, LATE, DLQ, OTHER = "source", "shuffle", "state", "sink", "late", "dead letter", "topic"


@dataclass(frozen=True)
class TopicRole:
    """A topic's role in a job (``SOURCE``, ``SHUFFLE``, ...); ``framed``: a shuffle topic feeding
    windows or joins, whose records also carry time, producer and join side."""

    role: str
    framed: bool = False


def topic_role(topic: str, topology: Topology | None = None, job_id: str | None = None) -> TopicRole:
    """The role of ``topic``: from ``topology`` when given, else from rstream's topic names."""
    if topology is not None:
        if topic in topology.shuffle_topics:
            return TopicRole(SHUFFLE, topic in topology.framed_topics)
        if topic in topology.state_topics.values():
            return TopicRole(STATE)
        if topic in topology.source_topics:
            return TopicRole(SOURCE)
        if topic in topology.sink_topics:
            return TopicRole(SINK)
        job_id = topology.job_id
    if topic.endswith(STATE_TOPIC_SUFFIX):
        return TopicRole(STATE)
    if topic.endswith("-shuffleTopic"):
        return TopicRole(SHUFFLE)
    if job_id is not None and topic == f"{job_id}-late" or job_id is None and topic.endswith("-late"):
        return TopicRole(LATE)
    if job_id is not None and topic == f"{job_id}-dlq" or job_id is None and topic.endswith("-dlq"):
        return TopicRole(DLQ)
    return TopicRole(OTHER)


@dataclass(frozen=True)
class Decoded:
    """One message as Python values. ``kind`` says what it is: ``data``, ``partial`` (a shuffle record
    a combine node sent instead of several records: its value says so in words, its detail holds how
    many and their times), ``watermark``, ``idle tick``, ``flush tick``, ``state``, ``delete``,
    ``timer``, ``bookkeeping``, ``late record`` or ``dead letter``; ``detail`` holds the rest (a
    shuffle record's watermark, producer and source offset; a state message's operator; a dead
    letter's error ...)."""

    kind: str
    key: Any
    value: Any
    detail: dict[str, Any] = field(default_factory=dict)


def decode_message(role: TopicRole, key: Any, body: bytes, headers: Any = None) -> Decoded:
    """Decode one message of a topic with the given role."""
    headers = headers or {}
    if role.role == SHUFFLE:
        return _shuffle(role, key, body, headers)
    if role.role == STATE:
        return _state(key, body, headers)
    if role.role == LATE:
        row = _json(body)
        if isinstance(row, dict):
            return Decoded("late record", row.get("key"), row.get("value"),
                           {k: v for k, v in row.items() if k not in ("key", "value")})
        return Decoded("late record", key, user_value(body))
    if role.role == DLQ or DLQ_ERROR in headers:
        return Decoded("dead letter", key, user_value(body),
                       {k.removeprefix("rstream-dlq-"): v for k, v in headers.items()})
    return Decoded("data", key, user_value(body))


def _shuffle(role: TopicRole, key: Any, body: bytes, headers: dict[str, str]) -> Decoded:
    record = wire.decode(key if isinstance(key, bytes) and key else None, body, headers, role.framed or None)
    kind, keyed, value, detail = record.shown()
    k = (record.key if isinstance(key, bytes) and key else key) if keyed else None
    return Decoded(kind, k, value, detail)


def _state(key: Any, body: bytes, headers: dict[str, str]) -> Decoded:
    if not body or DELETE_HEADER in headers:
        kb = bytes.fromhex(key) if isinstance(key, str) else b""
        operator, k = split_state_key(kb) if kb else (None, None)
        return Decoded("delete", k, None, {"operator": operator})
    kb, vb = unframe(body)
    operator, k = split_state_key(kb)
    if is_timer(kb):
        return Decoded("timer", None, None, {"operator": operator})
    kind = "bookkeeping" if is_bookkeeping(operator, k) else "state"
    return Decoded(kind, k, decode(vb), {"operator": operator})


def user_value(body: bytes) -> Any:
    """A user topic's body for display: JSON when it parses, else text, else the bytes."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return body
    parsed = _json(body)
    return text if parsed is _NOT_JSON else parsed


_NOT_JSON: Any = object()


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return _NOT_JSON


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)
