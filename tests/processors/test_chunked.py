"""Chunked execution (``rstream.processors.chunk``) against the per-record path, in this process.

The same job runs twice over the same records, once in chunks and once record by record (the plan
switched off): every topic it writes (sink, dead letters, late records, shuffle and state topics),
its state and its operators' metrics must be the same, also when user code raises in the middle of
a chunk, and for chunk sizes down to one record."""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rstream import (
    EmbeddedBroker,
    JsonSerializer,
    SlidingWindow,
    StreamBuilder,
    TextDeserializer,
    TextSerializer,
    TumblingWindow,
)
from rstream.processors.base import UnhashableKeyError
from rstream.processors.chunk import ChunkedPipeline
from rstream.processors.window import WindowAggregateProcessor
from rstream.runtime import queue_run
from rstream.runtime.inprocess import InProcessJob
from rstream.shuffle.wire import ACTIVE_HEADER, TICK_HEADER
from tests.support.inprocess import record_by_record

#: Words, numbers and the few bodies the functions below raise on ("x" in map, "boom" in flat_map,
#: "bad" in the serializer, "ouch" in a sum's function).
WORD = st.sampled_from(["a", "b", "c", "ab", "1", "22", "x", "boom", "bad", "ouch", ""])
BODIES = st.lists(st.lists(WORD, max_size=6).map(" ".join), min_size=1, max_size=60)


def _words(text: str) -> list[str]:
    if "boom" in text:
        raise ValueError("boom in the sentence")
    return text.split()


def _checked(word: str) -> str:
    if word == "x":
        raise ValueError("x is not a word")
    return word


def _serialize(key: Any, value: Any) -> bytes | str:
    if key == "bad":
        raise RuntimeError("cannot write bad")
    text = f"{key}={value}"
    return text if str(key).startswith("a") else text.encode()  # str bodies are written as utf-8


def _length(word: str) -> int:
    if word == "ouch":
        raise KeyError(word)
    return len(word)


def _by_word(job: str) -> StreamBuilder:
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(_words).map(_checked).filter(lambda w: w != "c")
     .key_by(lambda w: w).count().to_rstream().sink(f"{job}-out", _serialize))
    return b


def _summed(job: str) -> StreamBuilder:
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).key_by(lambda w: w[:1])
     .sum(_length).to_rstream().sink(f"{job}-out", TextSerializer(with_key=True)))
    return b


def _stateless(job: str) -> StreamBuilder:
    b = StreamBuilder(job)
    b.source("in", TextDeserializer()).map(str.upper).flat_map(_words).key_by(str.lower).sink(f"{job}-out", _serialize)
    return b


def _keys_as_read(body: bytes) -> tuple[Any, str]:
    """A deserializer's keys: none, a string, or an unhashable list (not checked as key_by's are)."""
    text = body.decode()
    return ([text] if text.startswith("a") else None if " " in text or not text else text), text


def _keyed_as_read(job: str) -> StreamBuilder:
    """The deserializer's keys straight to a sink: keyless records stay in their queue's order."""
    b = StreamBuilder(job)
    b.source("in", _keys_as_read).map(_checked).sink(f"{job}-out", _serialize)
    return b


def _windowed(job: str) -> StreamBuilder:
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: 1_000 * len(w))
     .key_by(lambda w: w[:1]).window(TumblingWindow(2_000)).count().to_rstream()
     .sink(f"{job}-out", JsonSerializer()))
    return b


def _odd_count(n: int) -> int:
    if n == 3:
        raise ValueError("three")
    return n


def _serialize_window(key: Any, value: Any) -> bytes:
    if key.key == "x":
        raise RuntimeError("cannot write window x")
    return f"{key}={value}".encode()


def _windowed_stages(job: str) -> StreamBuilder:
    """Window results through a map and a filter to a sink, where the map and the sink raise on some."""
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: 1_000 * len(w))
     .key_by(lambda w: w[:1]).window(TumblingWindow(2_000)).count().to_rstream().map(_odd_count)
     .filter(lambda n: n != 2).sink(f"{job}-out", _serialize_window))
    return b


def _windowed_avg(job: str) -> StreamBuilder:
    """A windowed average (its result is not its accumulator), per window to a JSON sink."""
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: 1_000 * len(w))
     .key_by(lambda w: w[:1]).window(TumblingWindow(3_000)).avg(len).to_rstream()
     .sink(f"{job}-out", JsonSerializer(with_key=True)))
    return b


PIPELINES: dict[str, Callable[[str], StreamBuilder]] = {
    "by_word": _by_word, "summed": _summed, "stateless": _stateless, "keyed_as_read": _keyed_as_read,
    "windowed": _windowed,
    "windowed_stages": _windowed_stages, "windowed_avg": _windowed_avg}


def _written(broker: EmbeddedBroker, job: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every topic of ``job`` (the job's name taken out of names and bodies), record by record, without what
    the wall clock wrote: the broker's append time, the state topic's born time (its commit's), when
    a watermark marker's producer was last active, an idle tick's time, the operator watermark's
    stored activity, and the born time of a marker a window fired on when it went to the dead
    letters (a window's result raised)."""
    out = {}
    for info in broker.topics():
        if info.name.startswith(job):
            state = info.name.endswith("stateTopic")
            out[info.name[len(job):]] = [
                (m.queue_id, m.offset, m.key, m.body.replace(job.encode(), b""),
                 None if state or TICK_HEADER in m.headers or _dead_marker(m.headers, m.body) else m.born_timestamp,
                 {k: v.replace(job, "") for k, v in m.headers.items() if k not in (ACTIVE_HEADER, TICK_HEADER)})
                for m in broker.read(info.name) if not (state and b"__watermarks__" in m.body)]
    return out


def _dead_marker(headers: dict[str, str], body: bytes) -> bool:
    """A dead letter of a shuffle topic's control record (a watermark marker: empty body)."""
    return body == b"" and headers.get("rstream-dlq-topic", "in") != "in"


def _metrics(job: InProcessJob) -> list[tuple[Any, ...]]:
    return [(i["topic"].replace(job.topology.job_id, ""), i["queue"], i["records_in"], i["error_count"],
             i.get("late"), json.dumps(i["operators"], sort_keys=True)) for i in job.infos]


def _run(tmp: Path, broker: EmbeddedBroker, make: Callable[[str], StreamBuilder], job: str, chunked: bool,
         **props: Any) -> InProcessJob:
    run = InProcessJob(make(job).build(), broker, tmp / job, {"max_records_per_queue": 7, **props})
    if chunked:
        run.run_until_idle()
    else:
        with record_by_record():
            run.run_until_idle()
    return run


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=BODIES, pipeline=st.sampled_from(sorted(PIPELINES)), size=st.sampled_from([1, 2, 3, 64]),
       emit=st.sampled_from(["record", "batch"]), queues=st.integers(1, 2))
@example(bodies=["a", "b c", "ab", "", "b", "x", "a", "bad", "b"], pipeline="keyed_as_read", size=64, emit="record",
         queues=2)  # list keys, no keys and string keys in one chunk
def test_chunks_write_what_record_by_record_writes(tmp_path: Path, bodies: list[str], pipeline: str, size: int,
                                                    emit: str, queues: int) -> None:
    root = tmp_path / f"{pipeline}-{size}-{emit}-{queues}-{abs(hash(tuple(bodies)))}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("in", queues=queues)
    broker.send_batch("in", bodies, born_timestamps=[1_000 * i for i in range(len(bodies))])
    _assert_chunks_write_what_records_write(root, broker, PIPELINES[pipeline], size, len(bodies), emit)


def _assert_chunks_write_what_records_write(root: Path, broker: EmbeddedBroker, make: Callable[[str], StreamBuilder],
                                            size: int, records: int, emit: str) -> None:
    # no source goes idle by the wall clock between runs (a slow machine would fire windows early in one
    # of them); the flush at the end of each run fires what is left
    props = {"aggregate_emit": emit, "time_type": "event_time", "allowed_lateness_ms": 1_000,
             "idle_timeout_ms": 600_000}
    reference = _run(root, broker, make, "ref", chunked=False, **props)
    runs = []
    real_run = ChunkedPipeline.run

    def counted(plan: ChunkedPipeline, records: Any) -> bool:
        runs.append(len(records))
        return real_run(plan, records)

    with (mock.patch.object(queue_run, "CHUNK_RECORDS", size), mock.patch.object(queue_run, "MIN_CHUNK_RECORDS", 1),
          mock.patch.object(ChunkedPipeline, "run", counted)):
        chunked = _run(root, broker, make, "chk", chunked=True, **props)
    assert runs and max(runs) <= size and sum(runs) >= records  # every source record went through a chunk
    assert _written(broker, "chk") == _written(broker, "ref")
    assert _metrics(chunked) == _metrics(reference)


def _split_by_key(job: str) -> StreamBuilder:
    """flat_map of records with keys (the deserializer's): every item keeps its record's key and time."""
    b = StreamBuilder(job)
    b.source("in", _keys_as_read).flat_map(_words).map(_checked).sink(f"{job}-out", _serialize)
    return b


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(bodies=BODIES, borns=st.lists(st.sampled_from([1_000, 2_000]), min_size=1, max_size=3),
       pipeline=st.sampled_from(["split_by_key", "by_word"]), size=st.sampled_from([2, 64]))
def test_a_flat_map_chunk_keeps_each_record_s_key_and_time(tmp_path: Path, bodies: list[str], borns: list[int],
                                                           pipeline: str, size: int) -> None:
    # records appended together share one born time (a chunk whose times are one value), or not
    root = tmp_path / f"{pipeline}-{size}-{abs(hash((tuple(bodies), tuple(borns))))}"
    broker = EmbeddedBroker(root / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", bodies, born_timestamps=[borns[i % len(borns)] for i in range(len(bodies))])
    make = _split_by_key if pipeline == "split_by_key" else PIPELINES[pipeline]
    _assert_chunks_write_what_records_write(root, broker, make, size, len(bodies), "record")


def test_a_word_count_in_chunks_equals_a_python_loop(tmp_path: Path) -> None:
    sentences = [" ".join(f"w{(i * 7 + j) % 13}" for j in range(i % 9)) for i in range(5_000)]
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=2)
    broker.send_batch("in", sentences)
    b = StreamBuilder("wc")
    b.source("in", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count().to_rstream().sink(
        "wc-out", TextSerializer(with_key=True))
    job = InProcessJob(b.build(), broker, tmp_path / "wc", {"aggregate_emit": "batch"})
    job.run_until_idle()
    expected: dict[str, int] = {}
    for s in sentences:
        for w in s.split():
            expected[w] = expected.get(w, 0) + 1
    last = {m.key: int(m.body.decode().rpartition(":")[2]) for m in sorted(broker.read("wc-out"), key=lambda m: m.offset)}
    assert last == expected
    source_infos = [i for i in job.infos if i["topic"] == "in"]
    assert sum(i["records_in"] for i in source_infos) == len(sentences)


@pytest.mark.parametrize("chunked", [True, False])
def test_an_unhashable_key_names_its_record_either_way(tmp_path: Path, chunked: bool) -> None:
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=1)
    broker.send_batch("in", ["a", "b", "list", "c"])
    b = StreamBuilder("keys")
    b.source("in", TextDeserializer()).key_by(lambda w: [w] if w == "list" else w).count().to_rstream().sink("keys-out")
    job = InProcessJob(b.build(), broker, tmp_path / "job")
    with pytest.raises(UnhashableKeyError, match=r"unhashable list: \['list'\] \(record at topic 'in' queue 0 offset 2\)"):
        if chunked:
            job.run_until_idle()
        else:
            with record_by_record():
                job.run_until_idle()
    assert broker.end_offsets("keys-out") == [0] * len(broker.end_offsets("keys-out"))  # nothing committed


def _windowed_by_word(job: str) -> StreamBuilder:
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: int(w.split("@")[1]))
     .key_by(lambda w: w.split("@")[0]).window(TumblingWindow(2_000)).count().to_rstream()
     .sink(f"{job}-out", JsonSerializer(with_key=True)))
    return b


def _windowed_pickled(job: str) -> StreamBuilder:  # values marshal cannot write: shuffled pickled
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: int(w.split("@")[1]))
     .map(lambda w: (w, datetime.date(2026, 1, 1))).key_by(lambda v: v[0].split("@")[0])
     .window(TumblingWindow(2_000)).count().to_rstream().sink(f"{job}-out", JsonSerializer(with_key=True)))
    return b


def _windowed_sliding(job: str) -> StreamBuilder:  # two windows per record: late for one, counted in the other
    b = StreamBuilder(job)
    (b.source("in", TextDeserializer()).flat_map(str.split).select_timestamp(lambda w: int(w.split("@")[1]))
     .key_by(lambda w: w.split("@")[0]).window(SlidingWindow(2_000, 1_000)).count().to_rstream()
     .sink(f"{job}-out", JsonSerializer(with_key=True)))
    return b


@pytest.mark.parametrize("size", [5, 64])
@pytest.mark.parametrize("make", [_windowed_by_word, _windowed_pickled, _windowed_sliding])
def test_a_windowed_count_in_chunks_writes_what_record_by_record_writes(tmp_path: Path, size: int,
                                                                         make: Callable[[str], StreamBuilder]) -> None:
    """Many keys and windows per chunk, records behind their queue's watermark and records whose
    window already fired: the framed chunk path (``WindowAggregateProcessor.take_chunk``) against
    the per-record path, topic by topic (state changelog order included)."""
    import random

    rng = random.Random(size)
    bodies = [" ".join(f"k{rng.randrange(40)}@{max(0, 300 * i + rng.randrange(-4_000, 1_000))}"
                       for _ in range(rng.randrange(1, 8))) for i in range(120)]
    broker = EmbeddedBroker(tmp_path / "broker")
    broker.create_topic("in", queues=2)
    broker.send_batch("in", bodies)
    props = {"time_type": "event_time", "allowed_lateness_ms": 500, "max_records_per_queue": 25,
             "idle_timeout_ms": 600_000}  # windows fire on data and on the final flush, never by the wall clock
    reference = _run(tmp_path, broker, make, "ref", chunked=False, **props)
    taken = []
    real_take = WindowAggregateProcessor.take_chunk
    fired: list[tuple[int, bool]] = []
    real_fire = WindowAggregateProcessor._fire_to_sink

    def counted(proc: WindowAggregateProcessor, chunk: Any, plan: ChunkedPipeline) -> None:
        taken.append(len(chunk.offsets))
        real_take(proc, chunk, plan)

    def fire(proc: WindowAggregateProcessor, due: list[tuple[int, Any]]) -> bool:
        fired.append((len(due), real_fire(proc, due)))
        return fired[-1][1]

    with (mock.patch.object(queue_run, "CHUNK_RECORDS", size),
          mock.patch.object(WindowAggregateProcessor, "take_chunk", counted),
          mock.patch.object(WindowAggregateProcessor, "_fire_to_sink", fire)):
        chunked = _run(tmp_path, broker, make, "chk", chunked=True, **props)
    # the end of each run fired every window (idle flush): records within the allowed lateness of
    # the newest now find their window fired
    newest = max(int(w.split("@")[1]) for body in bodies for w in body.split())
    broker.send_batch("in", [" ".join(f"k{rng.randrange(40)}@{newest - rng.randrange(400)}" for _ in range(5))
                             for _ in range(20)])
    reference.infos.extend(_run(tmp_path, broker, make, "ref", chunked=False, **props).infos)
    with (mock.patch.object(queue_run, "CHUNK_RECORDS", size),
          mock.patch.object(WindowAggregateProcessor, "take_chunk", counted)):
        chunked.infos.extend(_run(tmp_path, broker, make, "chk", chunked=True, **props).infos)
    assert taken and max(taken) > 1  # the window count took chunks
    assert max(n for n, done in fired if done) > 1  # and fired many windows at once
    written = _written(broker, "chk")
    late = [json.loads(row[3]) for name, rows in written.items() if name.endswith("-late") for row in rows]
    assert {"behind watermark", "window fired"} <= {row["cause"] for row in late}, late[:3]
    assert written == _written(broker, "ref")
    assert _metrics(chunked) == _metrics(reference)


def test_a_framed_block_splits_into_runs_of_data_and_of_control_records() -> None:
    """Control records (markers, ticks, partials: they carry headers) go record by record, data
    records in chunks; consecutive ones of a kind stay together, in order."""
    from rstream.broker.base import RecordBlock
    from rstream.runtime.queue_run import _split_controls

    for pattern in ("", "d", "c", "ddccdcd", "ccc", "dcdcdd", "cdddcc"):
        n = len(pattern)
        headers = [{"h": "1"} if c == "c" else None for c in pattern]
        block = RecordBlock(list(range(n)), [None] * n, [b""] * n, [0] * n, [0] * n, headers)
        runs = [(data, list(run.offsets)) for data, run in _split_controls(block)]
        assert [i for _, offsets in runs for i in offsets] == list(range(n))
        assert all(offsets and all((pattern[i] == "d") == data for i in offsets) for data, offsets in runs)
        assert all(a[0] != b[0] for a, b in zip(runs, runs[1:]))  # runs alternate: each as long as it goes
