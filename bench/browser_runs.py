"""Run every notebook many times in a real JupyterLab in a real Chromium, and count the clean runs.

    python bench/browser_runs.py --runs 10                        # every notebooks/*.ipynb, 10 times each
    python bench/browser_runs.py --runs 3 --notebooks 02_windows_and_watermarks.ipynb --json out.json
    python bench/browser_runs.py --screenshots all --artifacts /tmp/shots

One JupyterLab (over a temporary copy of ``notebooks/``) and one headless Chromium for the whole bench
(``tools/browser.py``, the same code and checks as ``tests/browser``). Each notebook runs
``--runs`` times in a row, each time with JupyterLab's "Restart Kernel and Run All Cells"; after each
run its kernel is shut down and its whole process tree must exit. A run passes when every code cell
ran and none shows an error, a traceback, a stderr box, a widget error, a blank output or an output
wider than the notebook, every ``.rstream-live`` widget changed while cells ran, and nothing left
loopback. Prints a markdown table (runs, passed, first failure, median and max duration, peak RSS and
PSS of the kernel's process tree: ipykernel, the JVM, Spark's Python workers; what it kept after the
harness clicked the notebook's release button, ``release()``) and exits 1 if any run failed, 2 when the browser cannot run here.

Durations are wall-clock on whatever else the machine is doing: compare them, never assert on them.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.report import JSON_HELP, results_path  # noqa: E402  (the repo root must be on sys.path first)
from tools.browser import (  # noqa: E402
    NOTEBOOK_TIMEOUT,
    NOTEBOOKS,
    JupyterLab,
    artifacts_dir,
    browser_unavailable,
    launch_browser,
    open_lab_page,
    run_notebook,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10, help="runs per notebook (default 10)")
    ap.add_argument("--notebooks", nargs="+", metavar="NAME",
                    help="notebook file names in notebooks/ (default: every top-level *.ipynb)")
    ap.add_argument("--json", type=Path, metavar="FILE", help=JSON_HELP)
    ap.add_argument("--artifacts", type=Path, metavar="DIR",
                    help="screenshots and executed notebooks (default $RSTREAM_BROWSER_ARTIFACTS, else a temp dir)")
    ap.add_argument("--screenshots", choices=["all", "failures", "none"], default="failures",
                    help="which runs get per-cell screenshots (default: failed runs only)")
    ap.add_argument("--timeout", type=float, default=NOTEBOOK_TIMEOUT, help="seconds for one run (default 600)")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    return args


def commit() -> str:
    """The checked-out commit (with ``+dirty`` when the work tree differs), or ``unknown``."""
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "--no-optional-locks", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def summarize(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row: how many runs passed, the first failure, durations, the peak memory of the kernel's
    process tree (RSS, and PSS, which counts a page shared by several processes once) and what it kept
    after the harness clicked the notebook's release button (``release()``)."""
    durations = [r["duration_s"] for r in runs if r.get("duration_s") is not None]
    failed = [r for r in runs if not r["passed"]]
    first = None
    if failed:
        problems = failed[0]["problems"] or ["(no reason recorded)"]
        first = f"run {failed[0]['run']}: {problems[0]}" + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "")
    return {
        "notebook": name, "runs": len(runs), "passed": len(runs) - len(failed), "failures": len(failed),
        "first_failure": first,
        "median_s": round(statistics.median(durations), 1) if durations else None,
        "max_s": round(max(durations), 1) if durations else None,
        "peak_rss_mb": round(max((r.get("peak_kernel_tree_rss_mb") or 0) for r in runs), 1),
        "peak_pss_mb": round(max((r.get("peak_kernel_tree_pss_mb") or 0) for r in runs), 1),
        "max_residual_pss_mb": round(max((r.get("residual_kernel_tree_pss_mb") or 0) for r in runs), 1),
        "problems_seen": problem_counts(runs),
    }


def problem_counts(runs: list[dict[str, Any]]) -> dict[str, int]:
    """Per distinct problem (its text less the execution count), in how many runs it was seen."""
    counts: dict[str, int] = {}
    for r in runs:
        for p in dict.fromkeys(re.sub(r" \(execution count \d+\)", "", p) for p in r["problems"]):
            counts[p] = counts.get(p, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def table(rows: list[dict[str, Any]]) -> str:
    """The summary as a markdown table."""
    lines = ["| notebook | runs | passed | failures (first reason) | median s | max s | peak kernel-tree RSS MB "
             "| peak PSS MB | kept after the last cell, PSS MB |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        failures = str(r["failures"]) + (f": {r['first_failure']}".replace("|", "\\|") if r["first_failure"] else "")
        lines.append(f"| {r['notebook']} | {r['runs']} | {r['passed']} | {failures} | {r['median_s']} | "
                     f"{r['max_s']} | {r['peak_rss_mb']} | {r['peak_pss_mb']} | {r['max_residual_pss_mb']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = browser_unavailable()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    names = args.notebooks or sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    missing = [n for n in names if not (NOTEBOOKS / n).is_file()]
    if missing:
        print(f"not in {NOTEBOOKS}: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.artifacts:
        os.environ["RSTREAM_BROWSER_ARTIFACTS"] = str(args.artifacts)
    artifacts = artifacts_dir()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}

    lab = JupyterLab().start()
    try:
        with sync_playwright() as pw:
            browser = launch_browser(pw)
            page = open_lab_page(browser, lab)
            for name in names:
                for i in range(1, args.runs + 1):
                    t0 = time.monotonic()
                    try:
                        run = run_notebook(page, name, lab, artifacts=artifacts / f"run-{i:02d}",
                                           timeout=args.timeout, screenshots=args.screenshots)
                        result = dict(run.summary(), run=i)
                    except Exception as exc:  # a broken page or server: record it, go on with a new page
                        result = {"notebook": name, "run": i, "passed": False,
                                  "duration_s": round(time.monotonic() - t0, 1), "peak_kernel_tree_rss_mb": None,
                                  "peak_kernel_tree_pss_mb": None, "residual_kernel_tree_pss_mb": None,
                                  "problems": [f"the harness failed: {type(exc).__name__}: {str(exc)[:300]}"],
                                  "traceback": traceback.format_exc()}
                        lab.shutdown_kernel(name)
                        page.context.close()
                        page = open_lab_page(browser, lab)
                    runs[name].append(result)
                    status = "ok" if result["passed"] else f"FAILED: {result['problems'][0]}"
                    print(f"{name} run {i}/{args.runs}: {result['duration_s']} s, "
                          f"peak RSS {result['peak_kernel_tree_rss_mb']} MB, PSS {result['peak_kernel_tree_pss_mb']} MB, {status}", flush=True)
            browser.close()
    finally:
        leftovers = lab.stop()

    rows = [summarize(n, runs[n]) for n in names]
    print()
    print(table(rows))
    for r in rows:
        if r["problems_seen"]:
            print(f"\n{r['notebook']}, every problem seen (in how many of {r['runs']} runs):")
            for problem, n in r["problems_seen"].items():
                print(f"- {n}/{r['runs']}: {problem}")
    if leftovers:
        print("\nprocesses that outlived the JupyterLab server (killed):\n" + "\n".join(leftovers))
    print(f"\nartifacts: {artifacts}")
    out = results_path(args.json, "browser")
    out.write_text(json.dumps({
        "started": started, "commit": commit(), "runs_per_notebook": args.runs,
        "load_average": os.getloadavg(), "cpus": os.cpu_count(), "summary": rows, "runs": runs,
        "server_leftovers": leftovers, "artifacts": str(artifacts),
    }, indent=1))
    print(f"json: {out}")
    return 1 if leftovers or any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
