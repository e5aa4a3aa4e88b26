"""The CPU quota of bench/bench_peers.py (``--cpu-limit``): a controller
started in it is in its cgroup from its first instruction, with what it
forks, and the benchmark itself is back in its own cgroup afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from operator_process import ROOT

sys.path.insert(0, str(ROOT / "bench"))

from bench_peers import CpuQuota  # noqa: E402

# The cgroup a process is in, as it reads it itself: its first line, then
# that of a child it forks.
CGROUPS = "cat /proc/self/cgroup; sh -c 'cat /proc/self/cgroup'"


def cpu_group(text: str, v2: bool) -> list[str]:
    """The cpu controller's (or cgroup v2's) path in each /proc/<pid>/cgroup listing of ``text``."""
    paths = []
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        if (controllers == "") if v2 else ("cpu" in controllers.split(",")):
            paths.append(path)
    return paths


def test_a_process_started_in_the_quota_and_its_children_are_in_its_group(tmp_path):
    before = Path("/proc/self/cgroup").read_text()
    quota = CpuQuota(0.5, f"jve-test-quota-{os.getpid()}")
    try:
        with quota.entered():
            child = subprocess.run(["sh", "-c", CGROUPS], capture_output=True, text=True, check=True)
        name = "/" + quota.path.name
        assert cpu_group(child.stdout, quota.v2) == [name, name]
        # The benchmark, and what it starts after the block, are where they were.
        assert Path("/proc/self/cgroup").read_text() == before
        after = subprocess.run(["cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True)
        assert name not in cpu_group(after.stdout, quota.v2)
        limit = (quota.path / "cpu.max").read_text().split() if quota.v2 else [
            (quota.path / f"cpu.cfs_{key}_us").read_text().strip() for key in ("quota", "period")]
        assert limit == ["50000", "100000"]
    finally:
        quota.remove()
    assert not quota.path.exists()
