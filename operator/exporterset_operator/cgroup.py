"""CPU limit of the container, so the default concurrency fits it."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> int:
    """Whole CPUs this process may use: the cgroup quota if one is set, else
    the CPUs it is allowed to run on. At least 1."""
    available = len(os.sched_getaffinity(0))
    quota = _cgroup_v2_quota(root) or _cgroup_v1_quota(root)
    if quota:
        return max(1, min(available, math.ceil(quota)))
    return max(1, available)


def _cgroup_v2_quota(root: Path) -> float | None:
    try:
        quota, period = (root / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    return int(quota) / int(period)


def _cgroup_v1_quota(root: Path) -> float | None:
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    if quota <= 0:
        return None
    return quota / period
