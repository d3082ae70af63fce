"""Bench baselines: plain Python loops and Spark Structured Streaming on the same data."""

from __future__ import annotations

import collections
import datetime
import json
import time
from pathlib import Path
from typing import Any

from bench.data import LATENESS_MS, SENTINEL_PAGE, WINDOW_MS
from bench.report import diff


def python_dict_loop(sentences: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    get = counts.get
    for s in sentences:
        for w in s.split():
            counts[w] = get(w, 0) + 1
    return counts


def python_counter(sentences: list[str]) -> dict[str, int]:
    c: collections.Counter[str] = collections.Counter()
    update = c.update
    for s in sentences:
        update(s.split())
    return dict(c)


def run_python(sentences: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    result = None
    for name, fn in (("dict_loop", python_dict_loop), ("counter", python_counter)):
        t = time.perf_counter()
        result = fn(sentences)
        out[name] = time.perf_counter() - t
    out["counts"] = result
    out["seconds"] = min(out["dict_loop"], out["counter"])
    return out


def run_bytewax(sentences: list[str], expected: dict[str, int], final: bool) -> dict[str, Any]:
    """Bytewax 0.21 (the ``bench`` extra), one worker in this process (``run_main``), on the same
    sentences: running counts (``stateful_map`` emitting every update, as rstream's default) or
    ``count_final`` (one count per word at the end, as ``aggregate_emit="batch"``); read from a
    ``TestingSource`` in batches of 1 000 sentences, the faster setting here. Verified against ``expected``."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    flow = Dataflow("wordcount")
    words = op.flat_map("split", op.input("sentences", flow, TestingSource(sentences, batch_size=1000)), str.split)
    if final:
        counts = op.count_final("count", words, lambda w: w)
    else:
        def add(state: int | None, _word: str) -> tuple[int, int]:
            n = (state or 0) + 1
            return n, n

        counts = op.stateful_map("count", op.key_on("key", words, lambda w: w), add)
    out: list[tuple[str, int]] = []
    op.output("out", counts, TestingSink(out))
    t = time.perf_counter()
    run_main(flow)
    seconds = time.perf_counter() - t
    assert dict(out) == expected, "Bytewax's counts differ from the dict loop's"
    assert len(out) == (len(expected) if final else sum(expected.values()))
    return {"seconds": seconds, "records_out": len(out)}


def spark_trigger_ms(query: Any) -> float | None:
    """Sum of Spark's own ``triggerExecution`` durations of a finished query, if it can be read."""
    if query is None:
        return None
    try:
        return float(sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress))
    except Exception:
        return None


def query_phases(query: Any, started: float, ended: float) -> dict[str, float] | None:
    """Wall seconds from the start call to Spark's first trigger, and from the end of the last
    trigger to the return (``started``/``ended`` are ``time.time()`` values)."""
    try:
        progress = list(query.recentProgress)
        first = datetime.datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00")).timestamp()
        last = progress[-1]
        last_end = (datetime.datetime.fromisoformat(last["timestamp"].replace("Z", "+00:00")).timestamp()
                    + last["durationMs"].get("triggerExecution", 0) / 1000)
        return {"before_first_trigger_s": first - started, "after_last_trigger_s": ended - last_end,
                "triggers": len(progress)}
    except Exception:
        return None


def run_native_query(writer: Any) -> tuple[Any, float, dict[str, float] | None]:
    """Start a native availableNow query and wait for it: (query, seconds, phases)."""
    wall = time.time()
    t = time.perf_counter()
    query = writer.start()
    query.awaitTermination()
    seconds = time.perf_counter() - t
    phases = query_phases(query, wall, time.time())
    if query.exception() is not None:
        raise RuntimeError(f"native query failed: {query.exception()}")
    return query, seconds, phases


def run_spark_native(spark: Any, root: Path, text_dir: Path, name: str, expected: dict[str, int] | None) -> dict[str, Any]:
    from pyspark.sql import functions as F

    lines = spark.readStream.format("text").load(str(text_dir))
    words = lines.select(F.explode(F.split(F.col("value"), " ")).alias("word"))
    counts = words.groupBy("word").count()
    writer = (counts.writeStream.outputMode("update").format("memory").queryName(name)
              .option("checkpointLocation", str(root / "native-checkpoints" / name))
              .trigger(availableNow=True))
    query, seconds, phases = run_native_query(writer)
    out = {"seconds": seconds, "spark_trigger_ms": spark_trigger_ms(query), "phases": phases,
           "batches": len([p for p in query.recentProgress if p.get("numInputRows", 0)])}
    if expected is not None:
        # update mode appends each changed key per batch; counts only grow, so the max is the last
        rows = spark.sql(f"SELECT word, max(`count`) AS n FROM {name} GROUP BY word").collect()
        got = {r["word"]: int(r["n"]) for r in rows}
        assert got == expected, f"Spark native counts differ from Python: {diff(got, expected)}"
        out["verified"] = True
    spark.sql(f"DROP VIEW IF EXISTS {name}")
    return out


def python_windows(per_queue: list[list[bytes]], lateness: int, size: int,
                   decode_first: bool = False) -> tuple[dict[tuple[str, int, int], int], list[int]]:
    """Per queue in offset order: watermark = max(watermark, ts - lateness); ts < watermark is late;
    the rest counted per (page, window start). Returns ``{(page, start, end): n}`` and the late times.
    ``decode_first``: ``json.loads(body.decode())`` instead of ``json.loads(body)`` (which first
    sniffs the encoding of bytes: about 0.5 s per million bodies slower here)."""
    counts: dict[tuple[str, int], int] = {}
    get = counts.get
    late: list[int] = []
    loads = json.loads
    for bodies in per_queue:
        wm = -(1 << 62)
        for body in bodies:
            e = loads(body.decode()) if decode_first else loads(body)
            t = e["ts"]
            if t - lateness > wm:
                wm = t - lateness
            if t < wm:
                late.append(t)
                continue
            k = (e["page"], t - t % size)
            counts[k] = get(k, 0) + 1
    return {(page, start, start + size): c for (page, start), c in counts.items()}, late


def python_windows_parsed(per_queue: list[list[dict[str, Any]]], lateness: int, size: int,
                          key: str = "page") -> dict[tuple[Any, int], int]:
    """The same loop over already parsed dicts (to show what ``json.loads`` costs in (b)), counted
    per (``e[key]``, window start)."""
    counts: dict[tuple[str, int], int] = {}
    get = counts.get
    for events in per_queue:
        wm = -(1 << 62)
        for e in events:
            t = e["ts"]
            if t - lateness > wm:
                wm = t - lateness
            if t < wm:
                continue
            k = (e[key], t - t % size)
            counts[k] = get(k, 0) + 1
    return counts


def run_python_windows(per_queue: list[list[bytes]], parsed: list[list[dict[str, Any]]],
                       expected: dict[tuple[str, int, int], int]) -> dict[str, Any]:
    """(b): the loop from the bodies, with ``json.loads(bytes)`` (what ``JsonDeserializer`` does)
    and with ``json.loads(str)``; the faster one is the ceiling. Also the loop alone on parsed dicts."""
    out: dict[str, Any] = {}
    for name, decode_first in (("loads_bytes_s", False), ("loads_str_s", True)):
        t = time.perf_counter()
        counts, _late = python_windows(per_queue, LATENESS_MS, WINDOW_MS, decode_first)
        out[name] = time.perf_counter() - t
        assert counts == expected
    t = time.perf_counter()
    python_windows_parsed(parsed, LATENESS_MS, WINDOW_MS)
    out["without_json_s"] = time.perf_counter() - t
    out["seconds"] = min(out["loads_bytes_s"], out["loads_str_s"])
    return out


def spark_rule_model(batches: list[list[dict[str, Any]]], delay: int, size: int) -> dict[tuple[str, int, int], int]:
    """What Spark should count, by its rule as understood here: batch k runs with watermark
    W_k = max(W_k-1, max ts of all earlier batches - delay) (global; W_0 = 0), and drops a row when
    its window's end <= W_k-1 (the previous batch's watermark)."""
    counts: dict[tuple[str, int, int], int] = collections.Counter()
    w_prev = w = 0
    max_ts = None
    for batch in batches:
        late_wm = w_prev
        for e in batch:
            t = e["ts"]
            start = t - t % size
            if start + size <= late_wm:
                continue
            counts[(e["page"], start, start + size)] += 1
        top = max(e["ts"] for e in batch)
        max_ts = top if max_ts is None else max(max_ts, top)
        w_prev, w = w, max(w, max_ts - delay)
    return {k: v for k, v in counts.items() if k[0] != SENTINEL_PAGE}


def run_spark_windows(spark: Any, root: Path, folder: Path, name: str, files_per_trigger: int | None) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    schema = StructType([StructField("page", StringType()), StructField("ts", LongType())])
    reader = spark.readStream.schema(schema)
    if files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", files_per_trigger)
    clicks = reader.json(str(folder)).select("page", F.timestamp_millis("ts").alias("ts"))
    counts = (clicks.withWatermark("ts", f"{LATENESS_MS // 1000} seconds")
              .groupBy(F.window("ts", f"{WINDOW_MS // 1000} seconds"), "page").count())
    rows = counts.select("page", F.unix_millis(F.col("window.start")).alias("start"),
                         F.unix_millis(F.col("window.end")).alias("end"), "count")
    writer = (rows.writeStream.outputMode("append").format("memory").queryName(name)
              .option("checkpointLocation", str(root / "native-checkpoints" / name))
              .trigger(availableNow=True))
    query, seconds, phases = run_native_query(writer)
    progress = list(query.recentProgress)
    got: dict[tuple[str, int, int], int] = {}
    for r in spark.sql(f"SELECT page, start, `end`, `count` FROM {name} WHERE page != '{SENTINEL_PAGE}'").collect():
        key = (r["page"], int(r["start"]), int(r["end"]))
        assert key not in got, f"Spark emitted window {key} twice"
        got[key] = int(r["count"])
    spark.sql(f"DROP VIEW IF EXISTS {name}")
    dropped_rows = sum(int(s.get("numRowsDroppedByWatermark", 0)) for p in progress for s in p.get("stateOperators", []))
    return {"seconds": seconds, "spark_trigger_ms": spark_trigger_ms(query), "phases": phases,
            "batches": len([p for p in progress if p.get("numInputRows", 0)]), "triggers": len(progress),
            "rows_dropped_by_watermark": dropped_rows, "counts": got}
