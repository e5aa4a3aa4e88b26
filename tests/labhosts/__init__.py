"""Test lab hosts: three network namespaces with a real sshd each (scripts/labhosts).

``lab_hosts`` brings them up once per session (reusing hosts that are already
up), prepares them with the real lab_bootstrap playbook, and takes them down
at the end of the session. What a test starts on them (QEMU guests, their
exporters and supervisors) ends with the test: after each test that used
them, every process of the instances it made (or of its namespace's) is
killed, and those instance directories are removed unless it failed (kept
for a post-mortem).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import qmp as qemu_qmp
from testbed import processes
from testbed.bed import CACHE_DIR

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "labhosts"
BIN = Path(sys.executable).parent
# The test guest's architectures (scripts/guest-image installs their QEMU
# packages on this machine, whose /usr the hosts share: they have no route
# to the internet).
BOOTSTRAP_VARS = {"lab_bootstrap_guest_archs": ["x86_64", "aarch64"]}
# The guest kernel and initramfs scripts/guest-image makes, and where the hosts keep them.
GUEST = CACHE_DIR / "guest"
GUEST_FILES = ("vmlinuz", "initramfs.cpio.gz")
IMAGES = "/var/lib/jumpstarter-virtual/images"
LAB_DIR = CACHE_DIR / "labhosts"
# scripts/labhosts names each host's network namespace jvelab<N>.
NETNS_DIR = Path("/run/netns")
NETNS_PREFIX = "jvelab"
# How a process of an instance names it, whatever the work directory: QEMU's
# files, the supervisor's service directory, the exporter's config are all
# in .../instances/<namespace>.<exporter>/.
INSTANCES_PATH = "/instances/"
_used = False
# Instance names (directory names, or "<namespace>." prefixes) of this
# process's tests: only their processes are this process's business.
_seen: set[str] = set()


@dataclass
class LabHosts:
    directory: Path
    inventory: Path
    hosts: dict  # name -> address

    @property
    def operator_key(self) -> Path:
        return self.directory / "operator"

    @property
    def known_hosts(self) -> Path:
        return self.directory / "known_hosts"

    def work_dir(self, host: str) -> Path:
        """What the host sees at /var/lib/jumpstarter-virtual."""
        return self.directory / host / "work"

    def bootstrap_vars(self) -> dict:
        return {**BOOTSTRAP_VARS, "lab_bootstrap_authorized_keys": [
            (self.directory / "operator.pub").read_text().strip()]}

    def playbook(self, playbook: str | Path, extra_vars: dict, *args: str) -> dict:
        """Runs a playbook against the hosts; returns the JSON report."""
        # sshd in a namespace of a busy 2-core machine can take seconds to greet.
        env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_TIMEOUT": "60"}
        completed = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(self.inventory), str(playbook),
             "-e", json.dumps(extra_vars), *args],
            env=env, capture_output=True, text=True, timeout=600,
        )
        assert completed.returncode == 0, completed.stdout[-6000:] + completed.stderr[-2000:]
        return json.loads(completed.stdout)

    def install_guest(self) -> None:
        """Puts the test guest's kernel and initramfs into every host's image directory."""
        for host in self.hosts:
            for name in GUEST_FILES:
                subprocess.run(["install", "-o", "jumpstarter", "-g", "jumpstarter", "-m", "0644",
                                str(GUEST / name), str(self.work_dir(host) / "images")], check=True)

    def parameters(self, slots: dict) -> dict:
        """qemu-baremetal parameters booting the test guest on the hosts named in ``slots``."""
        return {
            "arch": "x86_64",
            "resources": {"cpu": 1, "memory": "128Mi", "storage": "64Mi"},
            "kernel": {"path": f"{IMAGES}/vmlinuz"},
            "initrd": {"path": f"{IMAGES}/initramfs.cpio.gz"},
            "hosts": [{"name": name, "address": self.hosts[name], "slots": count}
                      for name, count in slots.items()],
        }

    def instance_dir(self, host: str, namespace: str, exporter: str) -> Path:
        return self.work_dir(host) / "instances" / f"{namespace}.{exporter}"

    def service_pid(self, host: str, namespace: str, exporter: str, service: str) -> int | None:
        """Pid of a running service of an instance (the supervisor's, for the exporter)."""
        pid_file = "pid" if service == "vm" else "supervise.pid"
        try:
            pid = int((self.instance_dir(host, namespace, exporter) / service / pid_file).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def vm_status(self, host: str, namespace: str, exporter: str) -> dict | None:
        """QMP query-status of an instance's QEMU, None if it does not answer
        (through a short link: socket paths are limited)."""
        with tempfile.TemporaryDirectory(prefix="jve-") as short:
            link = os.path.join(short, "i")
            os.symlink(self.instance_dir(host, namespace, exporter), link)
            return qemu_qmp.vm_status(os.path.join(link, "qmp.sock"), timeout=5)

    def instance_up(self, host: str, namespace: str, exporter: str) -> bool:
        """Whether the provision entry point would report the instance Running
        (QEMU and the exporter's supervisor alive, QMP saying running), read
        on this machine: a check that costs no playbook run, to wait on
        before the run that asserts it."""
        return bool(self.service_pid(host, namespace, exporter, "vm")
                    and self.service_pid(host, namespace, exporter, "exporter")
                    and (self.vm_status(host, namespace, exporter) or {}).get("status") == "running")

    def secret_data(self) -> dict:
        """The class Secret's data: the operator key and known_hosts."""
        return {key: base64.b64encode(path.read_bytes()).decode()
                for key, path in (("ssh-privatekey", self.operator_key), ("known_hosts", self.known_hosts))}

    def crash(self, host: str) -> None:
        subprocess.run([str(SCRIPT), "crash", host], check=True)

    def up(self) -> None:
        subprocess.run([str(SCRIPT), "up", str(len(self.hosts))], check=True)


def lab_up(count: int = 3) -> LabHosts:
    subprocess.run([str(SCRIPT), "up", str(count)], check=True)
    inventory = Path(subprocess.run([str(SCRIPT), "info"], check=True, capture_output=True,
                                    text=True).stdout.strip())
    hosts = yaml.safe_load(inventory.read_text())["lab_hosts"]["hosts"]
    return LabHosts(inventory.parent, inventory,
                    {name: spec["ansible_host"] for name, spec in hosts.items()})


def changed_count(report: dict) -> int:
    return sum(stats.get("changed", 0) for stats in report["stats"].values())


@pytest.fixture(scope="session")
def lab_hosts():
    """Three bootstrapped lab hosts (lab1..lab3) for the session."""
    global _used
    _used = True
    lab = lab_up()
    bootstrap(lab)
    lab.install_guest()
    yield lab
    # scripts/test runs the other tests beside this process; their stand-ins
    # may still advertise 10.213.0.1 (the lab bridge), so it takes the hosts
    # down itself once both are done.
    if not os.environ.get("JVE_KEEP_LAB_HOSTS"):
        lab_down()


def bootstrap(lab: LabHosts) -> None:
    """lab_bootstrap on the hosts. They share this machine's /etc and /opt
    (its users, packages and the exporter venv): the first host's run makes
    what they share, then the others, which only read it and make their own
    work directories, run side by side."""
    first, *others = sorted(lab.hosts)
    playbook = ROOT / "playbooks" / "lab_bootstrap.yml"
    lab.playbook(playbook, lab.bootstrap_vars(), "--limit", first)
    if others:
        lab.playbook(playbook, lab.bootstrap_vars(), "--limit", ",".join(others), "--forks", str(len(others)))


def lab_down() -> None:
    subprocess.run([str(SCRIPT), "down"], check=False)


def instance_dirs() -> set[Path]:
    """Every instance directory on every host (by their paths on this machine)."""
    return {entry for entry in LAB_DIR.glob("lab*/work/instances/*") if entry.is_dir()}


def instance_processes(names) -> list[tuple[str, int]]:
    """(host, pid) of the processes on the lab hosts that belong to an instance
    whose directory name is, or starts with, one of ``names``."""
    needles = [INSTANCES_PATH + name for name in names]
    if not needles:
        return []
    namespaces = {}
    for netns in NETNS_DIR.glob(NETNS_PREFIX + "*"):
        try:
            namespaces[netns.stat().st_ino] = "lab" + netns.name.removeprefix(NETNS_PREFIX)
        except OSError:
            continue
    found = []
    for entry in Path("/proc").iterdir() if namespaces else ():
        if not entry.name.isdigit():
            continue
        try:
            host = namespaces.get(os.stat(entry / "ns" / "net").st_ino)
            if host is None:
                continue
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(needle in argv for needle in needles):
            found.append((host, int(entry.name)))
    return found


def stop_instance_processes(names) -> list[str]:
    """Kills the processes of the instances ``names`` on every host; returns
    what ran."""
    running = instance_processes(names)
    described = [f"{host}: pid {pid} {processes.command_line(pid)}" for host, pid in running]
    # SIGKILL at once: a supervisor given time would restart its service.
    for _host, pid in running:
        try:
            os.kill(pid, 9)
        except ProcessLookupError:
            pass
    processes.kill([pid for _host, pid in running], timeout=5)
    return described


def leftover_instance_processes() -> list[str]:
    """At the end of the run: processes of this process's tests' instances
    still running on the hosts (killed)."""
    return stop_instance_processes(_seen)


def lab_hosts_used() -> bool:
    """Whether this process set the lab hosts up (only such a process may
    judge what runs on them: the other process of scripts/test does not)."""
    return _used


@pytest.fixture(autouse=True)
def _lab_instances_end_with_the_test(request):
    """After a test on the lab hosts (once its own fixtures, the operator
    among them, are torn down): the guests, exporters and supervisors of the
    instances it made, or of its namespace, are stopped, and the instance
    directories it made removed unless it failed."""
    if "lab_hosts" not in request.fixturenames:
        yield
        return
    before = instance_dirs()
    yield
    made = instance_dirs() - before
    names = {directory.name for directory in made}
    namespace = request.node.funcargs.get("namespace")
    if isinstance(namespace, str):
        names.add(namespace + ".")
    _seen.update(names)
    stop_instance_processes(names)
    if not request.node.stash.get(_FAILED, False):
        for directory in made:
            shutil.rmtree(directory, ignore_errors=True)


_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report
