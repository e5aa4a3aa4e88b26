"""The operator's default concurrency follows the CPU quota of its own cgroup."""

import os

from exporterset_operator import cgroup

CPUS = len(os.sched_getaffinity(0))


def _v1(root, path, quota, period=100_000):
    directory = root / "cpu" / path
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (directory / "cpu.cfs_period_us").write_text(f"{period}\n")


def test_v1_quota_of_its_own_cgroup_below_the_mount(tmp_path):
    """On a host (or a container without a cgroup namespace) the process's
    cgroup is a directory below the mount: its quota counts, not the
    mount root's (none)."""
    _v1(tmp_path, "", -1)
    _v1(tmp_path, "jve/pool", 50_000)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("5:cpuacct:/jve/pool\n4:cpu:/jve/pool\n1:name=systemd:/\n")
    assert cgroup.cpu_limit(tmp_path, proc) == 1
    # The mount root alone (a cgroup namespace): its quota.
    proc.write_text("4:cpu:/\n")
    _v1(tmp_path, "", 150_000)
    assert cgroup.cpu_limit(tmp_path, proc) == min(CPUS, 2)


def test_v1_path_missing_under_the_mount_falls_back_to_its_root(tmp_path):
    """A container without a cgroup namespace sees the host's path, which
    its mount does not hold: the mount root is its own cgroup."""
    _v1(tmp_path, "", 100_000)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:cpu,cpuacct:/kubepods/pod1/abc\n")
    assert cgroup.cpu_limit(tmp_path, proc) == 1


def test_v2_quota_and_no_quota(tmp_path):
    (tmp_path / "svc").mkdir()
    (tmp_path / "svc" / "cpu.max").write_text("100000 100000\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("0::/svc\n")
    assert cgroup.cpu_limit(tmp_path, proc) == 1
    (tmp_path / "svc" / "cpu.max").write_text("max 100000\n")
    assert cgroup.cpu_limit(tmp_path, proc) == CPUS
    # No cgroup file readable at all: the CPUs it may run on.
    assert cgroup.cpu_limit(tmp_path / "none", tmp_path / "missing") == CPUS
