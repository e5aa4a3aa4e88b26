"""CPU limit of the container, so the default concurrency fits it."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cpu_limit(root: Path = Path("/sys/fs/cgroup"), proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """Whole CPUs this process may use: the quota of its own cgroup if one is
    set, else the CPUs it is allowed to run on. At least 1.

    Its own cgroup is read from ``proc_cgroup``: in a container with a cgroup
    namespace that is the mount's root, elsewhere (a process on a host, a
    container without one) a directory below it, tried first."""
    available = len(os.sched_getaffinity(0))
    v2_path, v1_path = _own_paths(proc_cgroup)
    quota = _first(_cgroup_v2_quota, [root / v2_path, root]) if v2_path is not None else None
    if quota is None:
        quota = _first(_cgroup_v1_quota, [root / "cpu" / v1_path, root / "cpu"] if v1_path else [root / "cpu"])
    if quota:
        return max(1, min(available, math.ceil(quota)))
    return max(1, available)


def _own_paths(proc_cgroup: Path) -> tuple[str | None, str | None]:
    """(cgroup v2 path, cgroup v1 cpu controller path) of this process,
    relative to their mounts; None where it has none."""
    v2 = v1 = None
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        relative = path.lstrip("/")
        if controllers == "":
            v2 = relative
        elif "cpu" in controllers.split(","):
            v1 = relative
    return v2, v1


def _first(read, directories):
    for directory in directories:
        quota = read(directory)
        if quota is not None:
            return quota
    return None


def _cgroup_v2_quota(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def _cgroup_v1_quota(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0:
        return None
    return quota / period
