"""Bench reporting: result checks, profiles, git state and the printed summary."""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import subprocess
from pathlib import Path
from typing import Any


def diff(got: dict[Any, int], expected: dict[Any, int], limit: int = 5) -> str:
    keys = sorted(set(got) | set(expected))
    bad = [(k, got.get(k), expected.get(k)) for k in keys if got.get(k) != expected.get(k)]
    return f"{len(bad)} keys differ (len {len(got)} vs {len(expected)}), e.g. {bad[:limit]}"


def compare_windows(got: dict[tuple[str, int, int], int], expected: dict[tuple[str, int, int], int]) -> dict[str, int]:
    keys = set(got) | set(expected)
    differ = [k for k in keys if got.get(k, 0) != expected.get(k, 0)]
    return {"windows": len(got), "windows_expected": len(expected), "windows_differ": len(differ),
            "only_here": len(set(got) - set(expected)), "only_expected": len(set(expected) - set(got)),
            "records": sum(got.values()), "records_expected": sum(expected.values()),
            "abs_count_diff": sum(abs(got.get(k, 0) - expected.get(k, 0)) for k in differ)}


def top_rows(prof: cProfile.Profile, top: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in sorted(
            stats.stats.items(), key=lambda kv: -kv[1][2])[:top]:  # type: ignore[attr-defined]
        rows.append({"function": f"{short_path(file)}:{line}({fn})", "calls": nc,
                     "tottime_s": round(tt, 3), "cumtime_s": round(ct, 3)})
    return rows


def short_path(file: str) -> str:
    for marker in ("/rstream/", "/site-packages/", "/lib/python"):
        i = file.rfind(marker)
        if i >= 0:
            return file[i + 1:]
    return file


def git_state() -> dict[str, Any]:
    """The commit measured, and whether rstream/ had uncommitted changes (they are measured too)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "rstream"], cwd=repo, capture_output=True,
                               text=True, check=True).stdout.split("\n")
        return {"commit": commit, "rstream_uncommitted": [line[3:] for line in dirty if line.strip()]}
    except Exception as exc:
        return {"commit": None, "error": str(exc)}


#: Where a bench writes its JSON unless ``--json`` names a file: ignored by git (``.gitignore``), so dated
#: results never land in the tree. ``bench/RESULTS.md`` holds the current numbers, each with its command
#: and commit; the past is in git history.
OUT = Path(__file__).resolve().parent / "out"
JSON_HELP = "write every number here as JSON (default: bench/out/<bench>-<commit>.json, ignored by git)"


def results_path(requested: str | Path | None, bench: str) -> Path:
    """``requested``, or ``bench/out/<bench>-<commit>.json``; its folder is made if missing."""
    path = Path(requested) if requested else OUT / f"{bench}-{git_state().get('commit') or 'unknown'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def fmt_rate(n: float, s: float) -> str:
    return f"{n / s / 1e6:6.2f} M/s" if n / s >= 1e6 else f"{n / s / 1e3:6.0f} K/s"


def print_phases(runs: list[dict[str, Any]]) -> None:
    phases = [r["phases"] for r in runs if r.get("phases")]
    if phases:
        before = statistics.median(p["before_first_trigger_s"] for p in phases)
        after = statistics.median(p["after_last_trigger_s"] for p in phases)
        print(f"      start -> first trigger     {before:7.2f} s;  last trigger -> return {after:.2f} s;  "
              f"{phases[-1]['triggers']} triggers")


def print_top(rows: list[dict[str, Any]]) -> None:
    print(f"  {'tottime':>8} {'cumtime':>8} {'calls':>9}  function")
    for row in rows:
        print(f"  {row['tottime_s']:8.3f} {row['cumtime_s']:8.3f} {row['calls']:9d}  {row['function']}")
