"""What an executed workshop notebook must show, read from its outputs (its teaching cells assert nothing).

Each notebook ends with a hidden cell tagged ``verify`` that prints one JSON object of facts about the
run (counts equal to a plain Python computation, windows equal to pandas, ...): every boolean fact must be
true, and the numbers must meet ``EXPECTED``. Each exercise's check cell must say "right" in a solution
notebook and "not yet" in a learner's (unanswered) one. Used by the headless tests and the browser suite.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

# The environment as it was before any test started Spark in this process (pytest imports this module
# while it collects): get_spark() sets SPARK_LOCAL_DIRS and PYTHONPATH for its own workers, and a kernel
# or a fresh interpreter must not inherit those.
CLEAN_ENV = dict(os.environ)

#: Per notebook (file stem), the numeric facts its verify cell must report, as checks with a name.
EXPECTED: dict[str, dict[str, Callable[[Any], bool]]] = {
    "00_start_here": {"errors": lambda v: v == 0},
    "01_wordcount": {
        "replayed_keys": lambda v: v > 0, "generator_sent": lambda v: v == 60,
        "errors": lambda v: v == 1,  # the one record sent that is not UTF-8: a dead letter
        "state_diff_rows": lambda v: v > 0, "batches": lambda v: v > 3,
        "flood_lag_left": lambda v: v == 0,
    },
    "02_windows_and_watermarks": {
        "open_windows_when_held": lambda v: v > 0, "chart_spans_fired": lambda v: v >= 4, "errors": lambda v: v == 0,
        "clock_late": lambda v: v == 0,  # processing time: a clock never goes back
    },
    "03_late_data": {
        "spark_dropped": lambda v: v == 1, "kafka_dropped": lambda v: v > 0, "late_records": lambda v: v > 2,
        "early_results": lambda v: v > 0,
        "errors": lambda v: v == 0,
    },
    "04_state_and_replay": {
        "stale_copy_replayed": lambda v: v > 0, "compaction_removed": lambda v: v > 0, "errors": lambda v: v == 0,
        "alerts": lambda v: v > 0, "orders_waiting_in_state": lambda v: v == 2,
        "driver_killed_mid_stream": lambda v: v is True,
    },
    "05_joins": {
        "late_records": lambda v: v == 0, "errors": lambda v: v == 0, "interval_join_unpaid": lambda v: v == 3,
        # two profile updates: the stream–table join writes nothing, the join without a window a click each
        "table_join_written_on_update": lambda v: v == 0, "unwindowed_written_on_update": lambda v: v == 2,
    },
    "06_scaling_and_failure": {
        "replayed_after_kill": lambda v: v > 0, "errors": lambda v: v == 0,
        "replayed_after_scale_out": lambda v: v > 0,  # queues moved to the added worker's executor
        # a task killed between its sink write and its commit: repeats at least once, never exactly once
        "at_least_once_written_twice": lambda v: v > 0, "exactly_once_written_twice": lambda v: v == 0,
        "missing_after_crashes": lambda v: v == 0,
    },
    "07_rocketmq": {
        "broker_killed_pid": lambda v: v > 0, "batches_after_restart": lambda v: v > 0,
        "official_received": lambda v: v > 0, "lost_attempt_records": lambda v: v >= 0, "errors": lambda v: v == 0,
    },
}
#: Facts that must be equal to each other (the second is the reference).
EQUAL = {"01_wordcount": [("trace_sink_messages", "words_in_traced_sentence")],
         "07_rocketmq": [("official_received", "messages_in_sink")]}

_CHECK = re.compile(r"(Exercise [^:]+): (right|not yet|not quite)\b")


def outputs_text(cell: dict[str, Any]) -> str:
    """Everything a code cell printed or displayed, as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]) if isinstance(out["text"], list) else out["text"])
        for key in ("text/plain", "text/html"):
            value = out.get("data", {}).get(key)
            if value is not None:
                parts.append("".join(value) if isinstance(value, list) else value)
    return "\n".join(parts)


def _tags(cell: dict[str, Any]) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def facts_of(notebook: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON object the notebook's ``verify`` cell printed (None: no such cell, or no output)."""
    for cell in notebook["cells"]:
        if cell.get("cell_type") == "code" and "verify" in _tags(cell):
            text = outputs_text(cell).strip()
            start = text.find("{")
            return json.loads(text[start:text.rfind("}") + 1]) if start >= 0 else None
    return None


def checks_of(notebook: dict[str, Any]) -> dict[str, str]:
    """Per exercise, the verdict its check cell showed."""
    found: dict[str, str] = {}
    for cell in notebook["cells"]:
        if cell.get("cell_type") == "code":
            for exercise, verdict in _CHECK.findall(outputs_text(cell)):
                found.setdefault(exercise, verdict)
    return found


def problems(name: str, notebook: dict[str, Any], solved: bool) -> list[str]:
    """What is wrong with the executed notebook ``name`` (a file stem): facts and exercise checks."""
    found = []
    facts = facts_of(notebook)
    if facts is None:
        return [f"{name}: its verify cell printed no facts"]
    found += [f"{name}: fact {k!r} is false" for k, v in facts.items() if v is False]
    for key, ok in EXPECTED.get(name, {}).items():
        if key not in facts:
            found.append(f"{name}: fact {key!r} is missing")
        elif not ok(facts[key]):
            found.append(f"{name}: fact {key!r} = {facts[key]!r} is not what the lesson shows")
    for key, reference in EQUAL.get(name, []):
        if facts.get(key) != facts.get(reference):
            found.append(f"{name}: {key} = {facts.get(key)!r} but {reference} = {facts.get(reference)!r}")
    exercises = [c for c in notebook["cells"] if "exercise" in _tags(c)]
    checks = checks_of(notebook)
    if len(exercises) < 2 or len(checks) < len(exercises):
        found.append(f"{name}: {len(exercises)} exercise cells, {len(checks)} check verdicts shown (at least 2 each)")
    want = "right" if solved else "not yet"
    found += [f"{name}: {exercise} says {verdict!r}, expected {want!r}" for exercise, verdict in checks.items()
              if verdict != want]
    return found
