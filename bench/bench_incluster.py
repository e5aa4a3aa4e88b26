"""The in-cluster pool on the real node, timed: cold start (Exporter created
-> Online: the Pod scheduled, the guest's images fetched, the disk made,
QEMU started, the sidecar's ``jmp run`` registered over TLS), lease ->
Ready from a warm pool, and an InPlaceReuse reset (lease ended -> the same
Exporter Online again on a fresh VM in its running Pod), as
``tests/qemu/test_incluster_pool.py`` measures them.

Each run is one run of that test (its own bed, real node, controller
stand-in and operator); the figures are read from what it prints. Root
only, like the real node; ``scripts/realnode build`` first.

    python bench/bench_incluster.py --runs 3 [--json bench/results/incluster.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {
    "set_created_to_online_s": re.compile(r"cold start: ExporterSet created -> Exporter \S+ Online in ([\d.]+) s"),
    "exporter_created_to_online_s": re.compile(r"\(Exporter created -> Online in ([\d.]+) s\)"),
    "lease_to_ready_warm_s": re.compile(r"warm lease: lessee started -> lease Ready in ([\d.]+) s"),
    "lease_end_to_reset_online_s": re.compile(r"lease ended -> reset in place and Online again in ([\d.]+) s"),
    "node_up_s": re.compile(r"real node \S+ ready in ([\d.]+) s"),
}


def one_run() -> dict:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/qemu/test_incluster_pool.py", "-q", "-s", "-p", "no:cacheprovider"],
        cwd=ROOT, capture_output=True, text=True)
    figures = {"test_wall_s": round(time.monotonic() - started, 1), "passed": result.returncode == 0}
    for name, pattern in FIGURES.items():
        match = pattern.search(result.stdout)
        figures[name] = float(match.group(1)) if match else None
    if result.returncode != 0:
        figures["tail"] = result.stdout[-2000:]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=ROOT / "bench/results/incluster.json")
    args = parser.parse_args()
    runs = []
    for index in range(args.runs):
        figures = one_run()
        runs.append(figures)
        print(f"run {index + 1}: " + ", ".join(f"{k} {v}" for k, v in figures.items() if k != "tail"), flush=True)
    summary = {}
    for name in (*FIGURES, "test_wall_s"):
        values = [r[name] for r in runs if r.get(name) is not None]
        if values:
            summary[name] = {"median": round(statistics.median(values), 1), "min": min(values),
                             "max": max(values)}
    report = {"runs": runs, "summary": summary, "machine": {
        "cpus": os.cpu_count(), "kernel": platform.release(), "accel": "tcg",
        "note": "2 shared cores; other test runs may have been running at the same time"}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    for name, figures in summary.items():
        print(f"{name:32} median {figures['median']:6.1f}  min {figures['min']:6.1f}  max {figures['max']:6.1f}")
    return 0 if all(r["passed"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
