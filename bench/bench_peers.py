"""This operator side by side with its peers, on one private test bed.

    source scripts/common.sh && link_collection && export PATH=$VENV_DIR/bin:$PATH
    python bench/bench_peers.py --upstream-controller PATH --ansible-operator PATH \\
        --runner-plugin-path DIR [--repetitions 3] [--json bench/results/peers.json]

Controllers (run one at a time against the same bed, a fresh namespace for
each controller and repetition, each with its own client certificate so the
audit log tells their requests apart):
- ours: ``python -m exporterset_operator`` from this repository;
- ours-LABEL, with ``--ours-tree LABEL=PATH``: the same from another
  checkout (``git worktree add PATH COMMIT``, then ``link_collection`` of
  its scripts/common.sh there), for a before/after comparison within one
  run, each repetition running both, so the machine's load falls on both;
- upstream: Jumpstarter's exporter-set controller, a ``go build`` of the
  package ``./cmd/exporter-set-controller`` of the Go module
  ``github.com/jumpstarter-dev/jumpstarter/controller`` at commit
  b1f2bb41aac09cda79a2afa4b2f4fe07f3c6b0ea (the ``controller/`` directory of
  the jumpstarter repository). It needs the ``jumpstarter-service-ca-cert``
  ConfigMap and reads ``NAMESPACE``; every namespace here gets both;
- ansible-operator: the Ansible Operator SDK runtime, a ``go build`` of
  ``./cmd/ansible-operator`` of the Go module
  ``github.com/operator-framework/ansible-operator-plugins`` at v1.42.3
  (commit 292a56a4877c8093037c0533f3ef3c7a6bbd78e2), running
  ``playbooks/reconcile.yml`` through a copy of ``operator/watches.yaml``
  made at run time (the SDK refuses our finalizer entry, which names no
  playbook, role or vars: the copy adds ``vars: {exporterset_teardown:
  true}``, and makes the playbook path absolute). It reads every run's result through the ansible-runner event
  plugin its container image installs (``images/ansible-operator/
  ansible_runner_http`` of the same commit, plus requests-unixsocket
  0.4.1); --runner-plugin-path is a directory where both were installed
  with ``pip install --no-deps --target DIR``. It binds localhost:8888 (its
  proxy; the address is fixed in its reconciler) and localhost:5050.

The Jumpstarter controller is the test stand-in (``serve_namespace`` of
``tests/jumpstarter_standin/``), serving every namespace the same way
whichever controller is under test: its reconcile loops issue the
credentials and match leases on their own, in the real controller's order
(the first free online Exporter by name); it serves its gRPC services over
TLS with a private CA and publishes that CA as the
``jumpstarter-service-ca-cert`` ConfigMap; and it plays the ``jmp run``
process of every Running exporter Pod (kwok runs no containers), which
registers with the ExporterConfig its Pod mounts, so an Exporter is Online
once that process is up, whichever controller made the Pod. It talks to the API server as the bed's admin, so
its requests never count for the controller under test.

Scenarios, in this order, per controller and repetition (``--scenarios``
for a subset):
- fill: an empty set asks for 50 warm exporters; time until 50 exist and
  until 50 are ready (Online);
- steady: API requests by verb per minute while the filled pool is idle;
- latency: a set keeping one warm exporter; for each of --events leases,
  from a settled set (every Exporter online, exactly one free), the time
  from the API server receiving the Lease to the API server having stored
  the controller's create of the replacement Exporter, both read from the
  audit log (one clock, so never negative); p50/p95 over the events, an
  event without a replacement counting as infinitely late;
- burst: a set with a floor of one Exporter, held by a first lease, gets
  20 more leases (Pending: nothing free); time until 20 new Exporters exist
  and until the Jumpstarter controller assigned all 20;
- shrink: the burst's 21 leases end (floor 2, cooldown 20 s); time until 2
  remain;
- over the run: CPU seconds and peak RSS of the controller's process tree
  (from /proc, every 0.5 s), CPU per scenario, API requests by verb (audit
  log), and the load average while it ran.

Two regimes: as is, each controller may use every CPU of the machine; with
``--cpu-limit N`` each controller's process tree runs in a cgroup of its
own whose CPU quota is N CPUs (``cpu.cfs_quota_us``, or ``cpu.max`` on
cgroup v2), as a container under a Deployment's CPU limit does (ours asks
for ``limits.cpu: "1"``, config/manager; the slot Jumpstarter's operator
gives an exporter-set controller, 500m: ``--cpu-limit 0.5``). The controller
starts inside its group, so everything it forks (our fork server and every
backend run) counts against the same quota. Both sides run under the same
quota; the results then go to ``results/peers-cpu<N>.json`` unless
``--json`` says otherwise. Root only, for the cgroup. ``--background-load
N`` keeps N busy processes (a Python loop each) running beside the whole
run, so that the controllers compete for the CPU as on a busy machine;
with it the results go to ``results/peers-load<N>[-cpu<M>].json``.

A figure a repetition does not reach is a miss with its reason (in the
run's ``misses``), never left out: the summary gives n per figure, the
median and min–max of what was measured, every miss, and for issue 16's
targets the target and whether the medians meet it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import yaml
from bench_operator import DORMANT, percentile
from jumpstarter_standin import JS, JumpstarterStandIn, wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT, OperatorProcess, free_port
from pool_helpers import GROUP, make_class, make_set
from testbed import TestBed, issue_certificate

PROVISIONER = "qemu.jumpstarter.dev"
FILL = 50
BURST = 20
SHRINK_FLOOR = 2
COOLDOWN = "20s"
# Every set's ceiling, above what any scenario asks for. Not 0 ("no
# ceiling"): upstream's Go type leaves a 0 out when it writes a set back (its
# surplus annotation), and the CRD's default of 4 then applies.
CEILING = 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def bench_set(custom, namespace: str, name: str, min_replicas: int, min_available: int) -> dict:
    """A set of the benchmark: its own board (its name), at most CEILING
    Exporters, scaling down after COOLDOWN."""
    return make_set(custom, namespace, name=name, board=name, minReplicas=min_replicas, maxReplicas=CEILING,
                    minAvailableReplicas=min_available, scaleDownCooldown=COOLDOWN)


# -- identities ------------------------------------------------------------


def make_identity(bed: TestBed, name: str, workdir: Path) -> tuple[Path, str]:
    """A client certificate signed by the bed's CA and a kubeconfig for it."""
    user = f"bench-{name}"
    certificate, key = issue_certificate(bed.pki_dir, workdir, user, f"/O=system:masters/CN={user}",
                                         "client.ext", days=2)
    kubeconfig = workdir / f"{user}.kubeconfig"
    bed.write_kubeconfig(kubeconfig, user, certificate, key)
    return kubeconfig, user


# -- controllers -----------------------------------------------------------


class Controller:
    """One controller process limited to one namespace, ready when its
    ``/readyz`` answers."""

    name = ""

    def __init__(self, kubeconfig: Path, namespace: str, workdir: Path):
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}-{self.namespace}.log"

    def command(self) -> tuple[list[str], dict]:
        raise NotImplementedError

    def start(self) -> None:
        argv, env = self.command()
        log = open(self.log_path, "ab")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "KUBECONFIG": str(self.kubeconfig), **env},
        )

    def wait_ready(self, timeout: float = 120.0) -> None:
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_for(ready, timeout=timeout, interval=0.2, message=f"{self.name} ready")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


class Ours(Controller):
    name = "ours"

    def start(self) -> None:
        # Its own identity (a client certificate), by which the audit log
        # tells its requests apart.
        self._operator = OperatorProcess(
            str(self.kubeconfig), self.namespace, self.workdir, provisioners=(PROVISIONER,),
            service_account=False,
        )
        self.port = self._operator.port
        self._operator.start()
        self.proc = self._operator.proc

    @property
    def log_path(self) -> Path:
        return self._operator.log_path


def ours_at(label: str, tree: Path) -> type:
    """``ours`` as another checkout of this repository has it (``--ours-tree``):
    its operator and collection on the path instead of this one's, the
    Python environment the same. The tree needs its collection link
    (``link_collection`` of its scripts/common.sh)."""
    collections = tree / ".cache" / "collections"
    if not (collections / "ansible_collections" / "jumpstarter" / "virtual_exporters").exists():
        raise SystemExit(f"--ours-tree {label}={tree}: no collection link; run link_collection there first")

    main = (tree / "operator" / "exporterset_operator" / "__main__.py").read_text()

    class OursAt(Controller):
        name = f"ours-{label}"

        def command(self):
            # Its own CLI: a checkout from before the probes had a port of
            # their own serves them on the metrics port.
            probes = ["--metrics-bind-address", f"127.0.0.1:{self.port}"]
            if "--health-probe-bind-address" in main:
                probes = ["--metrics-bind-address", f"127.0.0.1:{free_port()}",
                          "--health-probe-bind-address", f"127.0.0.1:{self.port}"]
            argv = [sys.executable, "-m", "exporterset_operator", "--kubeconfig", str(self.kubeconfig),
                    "--namespace", self.namespace, *probes, "--artifacts-dir", str(self.workdir / "artifacts"),
                    "--log-level", "DEBUG", "--provisioner", PROVISIONER]
            return argv, {"PYTHONPATH": f"{collections}:{tree / 'operator'}",
                          "ANSIBLE_COLLECTIONS_PATH": str(collections)}

    return OursAt


class Upstream(Controller):
    name = "upstream"
    binary = ""

    def command(self):
        return (
            [
                self.binary,
                "--provisioner",
                PROVISIONER,
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                f"127.0.0.1:{self.port}",
            ],
            {"NAMESPACE": self.namespace},
        )


class AnsibleOperator(Controller):
    name = "ansible-operator"
    binary = ""
    plugin_path = ""

    def watches_file(self) -> Path:
        """operator/watches.yaml as the SDK accepts it: the SDK refuses a
        finalizer without a playbook, role or vars, so ours gets the variable
        that sends the role down its teardown path (extra vars win over the
        role's own observation)."""
        watches = yaml.safe_load((ROOT / "operator" / "watches.yaml").read_text())
        for watch in watches:
            finalizer = watch.get("finalizer")
            if finalizer and not any(key in finalizer for key in ("playbook", "role", "vars")):
                finalizer["vars"] = {"exporterset_teardown": True}
            watch["playbook"] = str(ROOT / watch["playbook"])
        path = self.workdir / "ansible-operator-watches.yaml"
        path.write_text(yaml.safe_dump(watches))
        return path

    def command(self):
        python_path = os.pathsep.join(p for p in (self.plugin_path, os.environ.get("PYTHONPATH")) if p)
        return (
            [
                self.binary,
                "run",
                "--watches-file",
                str(self.watches_file()),
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                f"127.0.0.1:{self.port}",
            ],
            {
                "WATCH_NAMESPACE": self.namespace,
                "PYTHONPATH": python_path,
                "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            },
        )


# -- a CPU quota for a process tree -------------------------------------------


class CpuQuota:
    """A cgroup of its own with a CPU quota of ``cpus`` CPUs; a process moved
    into it takes its threads along, and whatever it starts after is in it
    too."""

    ROOT = Path("/sys/fs/cgroup")
    PERIOD_US = 100_000

    def __init__(self, cpus: float, name: str):
        self.cpus = cpus
        v1 = self.ROOT / "cpu"
        self.v2 = not (v1 / "cpu.cfs_quota_us").exists()
        self.path = (self.ROOT if self.v2 else v1) / name
        self.path.mkdir(exist_ok=True)
        quota = int(cpus * self.PERIOD_US)
        if self.v2:
            (self.path / "cpu.max").write_text(f"{quota} {self.PERIOD_US}")
        else:
            (self.path / "cpu.cfs_period_us").write_text(str(self.PERIOD_US))
            (self.path / "cpu.cfs_quota_us").write_text(str(quota))

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    @contextlib.contextmanager
    def entered(self):
        """This process in the group for the block: what it starts there is
        in the group from its first instruction, before it forks anything
        (our operator forks its fork server at start, and sizes its
        concurrency by its cgroup's quota then)."""
        own = self._own_group()
        self.add(os.getpid())
        try:
            yield
        finally:
            (own / "cgroup.procs").write_text(str(os.getpid()))

    def _own_group(self) -> Path:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if (controllers == "") if self.v2 else ("cpu" in controllers.split(",")):
                return self.path.parent / path.lstrip("/")
        raise RuntimeError("this process is in no cpu cgroup")

    def throttled_s(self) -> float:
        """Seconds the group was held back by its quota so far."""
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "throttled_time":  # v1, nanoseconds
                return int(value) / 1e9
            if key == "throttled_usec":  # v2
                return int(value) / 1e6
        return 0.0

    def remove(self) -> None:
        """Once every process of the group has ended (a kill waits for that)."""
        deadline = time.monotonic() + 30
        while True:
            try:
                self.path.rmdir()
                return
            except OSError:
                left = (self.path / "cgroup.procs").read_text().split()
                for pid in left:
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


# -- measuring a process tree ----------------------------------------------


def _process_table() -> dict[int, tuple[int, float, int]]:
    """pid → (parent pid, CPU seconds including reaped children, RSS bytes)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            rss_pages = int(Path(f"/proc/{entry}/statm").read_text().split()[1])
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # fields[1] is the parent pid; utime, stime, cutime, cstime follow at 11..14.
        cpu = sum(int(v) for v in fields[11:15]) / CLOCK_TICKS
        table[int(entry)] = (int(fields[1]), cpu, rss_pages * PAGE_SIZE)
    return table


def _pss(pid: int) -> int:
    """Proportional set size in bytes: every page shared by n processes
    counts 1/n to each, so a tree's sum is the memory it really holds (the
    RSS sum counts a page a forked child shares with its parent twice)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _process_label(pid: int) -> str:
    """A short name for a process: the name the operator's fork server
    gives itself and its runs (jve-forkserver, jve-run), the script a Python
    runs (ansible-playbook, exporterset_operator), else the program."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        if comm.startswith("jve-"):
            return comm
    except OSError:
        pass
    try:
        argv = [a for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return "?"
    words = [a.decode(errors="replace") for a in argv]
    if not words:
        return "?"
    program = os.path.basename(words[0])
    if program.startswith("python") and len(words) > 1:
        rest = [w for w in words[1:] if not w.startswith("-")]
        if "-m" in words[1:]:
            return words[words.index("-m") + 1]
        return os.path.basename(rest[0]) if rest else f"{program} (stdin)"
    return program


class TreeSampler:
    """Samples CPU time, RSS and the load average of a process tree."""

    def __init__(self, pid: int, interval: float = 0.5):
        self.pid = pid
        self.cpu_s = 0.0
        self.peak_rss = 0
        self.peak_pss = 0
        # What the process tree held at its RSS peak: label → [processes, RSS, PSS].
        self.peak_composition: dict[str, list] = {}
        self.loads: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def sample(self) -> None:
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in table.items():
            children.setdefault(parent, []).append(pid)
        tree, todo = [], [self.pid]
        while todo:
            pid = todo.pop()
            if pid in table:
                tree.append(pid)
                todo.extend(children.get(pid, ()))
        if tree:
            self.cpu_s = max(self.cpu_s, sum(table[p][1] for p in tree))
            rss = sum(table[p][2] for p in tree)
            pss = {p: _pss(p) for p in tree}
            self.peak_pss = max(self.peak_pss, sum(pss.values()))
            if rss > self.peak_rss:
                self.peak_rss = rss
                composition: dict[str, list] = {}
                for p in tree:
                    entry = composition.setdefault(_process_label(p), [0, 0.0, 0.0])
                    entry[0] += 1
                    entry[1] += table[p][2] / 2**20
                    entry[2] += pss[p] / 2**20
                self.peak_composition = {k: [n, round(r, 1), round(s, 1)] for k, (n, r, s) in composition.items()}
        self.loads.append(os.getloadavg()[0])

    def _run(self, interval):
        while not self._stop.wait(interval):
            self.sample()

    def split(self) -> dict[str, float]:
        """The tree's CPU seconds so far by part: the controller's own, what
        it reaped (ours: the runs' clients, and the runs ansible-playbook
        ran itself), and the fork server's own and its runs' (every forked
        run's processes, once reaped)."""
        def times(pid):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return [int(v) / CLOCK_TICKS for v in fields[11:15]]
        parts = {}
        try:
            own = times(self.pid)
        except OSError:
            return parts
        parts["controller"], parts["reaped by the controller"] = own[0] + own[1], own[2] + own[3]
        for pid, (parent, _, _) in _process_table().items():
            if parent == self.pid and _process_label(pid) == "jve-forkserver":
                try:
                    server = times(pid)
                except OSError:
                    continue
                parts["fork server"] = server[0] + server[1]
                parts["forked runs (reaped)"] = server[2] + server[3]
        return parts

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join()
        return {
            "cpu_s": self.cpu_s,
            "peak_rss_mib": self.peak_rss / 2**20,
            "peak_pss_mib": self.peak_pss / 2**20,
            "peak_rss_by_process": self.peak_composition,
            "load1_mean": statistics.fmean(self.loads) if self.loads else None,
            "load1_max": max(self.loads, default=None),
        }


# -- the floor of one playbook run ------------------------------------------

# One task running one module, run by the operator's own PlaybookRunner (its
# settings, inventory and artifact handling): the least any backend run costs.
FLOOR_PLAYBOOK = """\
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.command: "true"
      changed_when: false
"""
FLOOR_SCRIPT = """\
import json, os, resource, shutil, sys, tempfile, time
from pathlib import Path
from exporterset_operator.runner import PlaybookRunner
TICK = os.sysconf("SC_CLK_TCK")
def used(server=None):
    # This process, the children it reaped (the client; a cold run whole)
    # and, through the fork server, the runs it forked and reaped.
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    total = sum(u.ru_utime + u.ru_stime for u in usage)
    if server:
        fields = Path(f"/proc/{server}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(f) for f in fields[11:15]) / TICK
    return total
work = Path(tempfile.mkdtemp(prefix="jve-floor-"))
(work / "floor.yml").write_text(sys.argv[2])
figures = {}
for mode in ("cold", "warm"):
    with PlaybookRunner(sys.argv[1], str(work / mode), fork_server=mode == "warm") as runner:
        server = None
        if mode == "warm":  # the server's start and first run are not a run's cost
            runner.run(str(work / "floor.yml"), ("floor", "floor"), {})
            server = runner.fork_server.pid
        cpu, wall = used(server), time.monotonic()
        result = runner.run(str(work / "floor.yml"), ("floor", "floor"), {})
        figures[mode] = {"status": result.status, "cpu_s": used(server) - cpu, "wall_s": time.monotonic() - wall}
shutil.rmtree(work, ignore_errors=True)
print(json.dumps(figures))
"""


def runner_floor(repetitions: int) -> dict:
    """CPU and wall seconds of a one-module playbook run through the
    operator's PlaybookRunner, from a Python that has it imported already,
    as the operator has: ``cold``, ansible-playbook started afresh (and the
    module's own Python, which every run starts); ``warm``, forked from the
    operator's fork server once it serves runs (forkserver.py), as the
    operator runs them."""
    samples = []
    for _ in range(repetitions):
        out = subprocess.run([sys.executable, "-c", FLOOR_SCRIPT, str(ROOT), FLOOR_PLAYBOOK],
                             capture_output=True, text=True, check=True, timeout=120)
        sample = json.loads(out.stdout.strip().splitlines()[-1])
        for mode, figures in sample.items():
            if figures["status"] != "successful":
                raise RuntimeError(f"the {mode} floor run ended {figures['status']}: {out.stderr[-500:]}")
        samples.append(sample)

    def summary(mode):
        return {key: {"median": statistics.median(s[mode][key] for s in samples),
                      "min": min(s[mode][key] for s in samples), "max": max(s[mode][key] for s in samples)}
                for key in ("cpu_s", "wall_s")}

    return {**summary("warm"), "cold": summary("cold"), "n": len(samples)}


# -- what the Jumpstarter controller shows ------------------------------------


def _condition_true(obj: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


def is_available(exporter: dict) -> bool:
    """What the controller would give the next lease: registered, online,
    enabled, not leased, not going away."""
    return (
        _condition_true(exporter, "Registered")
        and _condition_true(exporter, "Online")
        and (exporter.get("spec") or {}).get("enabled") is not False
        and not (exporter.get("status") or {}).get("leaseRef")
        and not exporter["metadata"].get("deletionTimestamp")
    )


# -- scenarios ---------------------------------------------------------------


def set_members(standin: JumpstarterStandIn, exporter_set: dict) -> list[dict]:
    """Exporters the set controls (by owner reference, which every controller
    sets), without ours' dormant Exporter: it has no backend and exists only
    while the set has no other, so that a lease waits instead of ending."""
    uid = exporter_set["metadata"]["uid"]
    return [
        e
        for e in standin.exporters()
        if any(ref.get("uid") == uid and ref.get("controller") for ref in e["metadata"].get("ownerReferences") or [])
        and DORMANT not in (e["metadata"].get("annotations") or {})
    ]


def _reached(figures, figure, follows, timeout, predicate, reason) -> bool:
    """Wait up to ``timeout`` for ``predicate``; when it is not reached,
    record ``figure`` as a miss with ``reason()``, and ``follows`` (the figure
    measured after it) as not measured. Returns whether it was reached."""
    try:
        wait_for(predicate, timeout=timeout, interval=0.1, message=figure)
        return True
    except AssertionError:
        why = reason()
        figures["misses"][figure] = why
        figures["misses"][follows] = f"not measured: {why}"
        return False


def scenario_fill(standin, custom, namespace, figures, timeout):
    started = time.monotonic()
    pool = bench_set(custom, namespace, "pool", min_replicas=0, min_available=FILL)
    if not _reached(figures, "fill_exist_s", "fill_ready_s", timeout,
                    lambda: len(set_members(standin, pool)) >= FILL,
                    lambda: f"{len(set_members(standin, pool))} of {FILL} exporters after {timeout:g} s"):
        return
    figures["fill_exist_s"] = time.monotonic() - started
    try:
        wait_for(
            lambda: sum(_condition_true(e, "Online") for e in set_members(standin, pool)) >= FILL,
            timeout=timeout,
            interval=0.1,
            message=f"{FILL} ready exporters",
        )
    except AssertionError:
        online = sum(_condition_true(e, "Online") for e in set_members(standin, pool))
        figures["misses"]["fill_ready_s"] = (
            f"{online} of {FILL} exporters online {time.monotonic() - started:.0f} s after the set was made"
        )
        return
    figures["fill_ready_s"] = time.monotonic() - started


def audited_requests(log, user, begin, end) -> dict[str, int]:
    """Requests by verb that ``user`` sent between ``begin`` and ``end``,
    read from the audit log's current position on."""
    time.sleep(3)  # the audit backend writes in batches of up to 1 s
    requests: dict[str, set] = {}
    for line in log:
        entry = json.loads(line)
        if entry["user"]["username"] != user:
            continue
        received = datetime.fromisoformat(entry["requestReceivedTimestamp"].replace("Z", "+00:00"))
        if begin <= received < end:
            requests.setdefault(entry["verb"], set()).add(entry["auditID"])
    return {verb: len(ids) for verb, ids in sorted(requests.items())}


def scenario_steady(bed, user, figures, seconds):
    """Requests by verb per minute while nothing changes."""
    time.sleep(5)  # let the last status writes of the fill land
    with open(bed.audit_log) as log:
        log.seek(0, os.SEEK_END)
        begin = datetime.now(UTC)
        time.sleep(seconds)
        end = datetime.now(UTC)
        requests = audited_requests(log, user, begin, end)
    per_minute = 60 / (end - begin).total_seconds()
    figures["steady_requests_per_min"] = {verb: count * per_minute for verb, count in requests.items()}
    figures["steady_requests_per_min_total"] = sum(figures["steady_requests_per_min"].values())


def _burst_leases(standin, namespace) -> dict[str, str]:
    """The burst's leases that the Jumpstarter controller assigned, with their Exporters."""
    items = standin.custom.list_namespaced_custom_object(*JS, namespace, "leases")["items"]
    return {
        i["metadata"]["name"]: i["status"]["exporterRef"]["name"]
        for i in items
        if i["metadata"]["name"].startswith("burst-")
        and ((i.get("status") or {}).get("exporterRef") or {}).get("name")
    }


def scenario_burst(standin, custom, namespace, figures, timeout, event_timeout):
    """20 pending leases with nothing free. The set keeps one Exporter (a
    floor of 1) and a first lease holds it: the Jumpstarter controller then
    sets the 20 that follow Pending (NotAvailable), which is what upstream's
    controller scales up for; a lease matching no Exporter at all is refused
    instead (Unsatisfiable, NoAccess), as the real controller does."""
    burst = bench_set(custom, namespace, "burst", min_replicas=1, min_available=0)
    wait_for(
        lambda: _settled(set_members(standin, burst)),
        timeout=timeout,
        interval=0.1,
        message="the burst set's one exporter online",
    )
    standin.create_lease("burst-hold", {"board": "burst"})
    standin.wait_assigned("burst-hold", timeout=timeout)
    leases = [f"burst-{index}" for index in range(BURST)]
    started = time.monotonic()
    for lease in leases:
        standin.create_lease(lease, {"board": "burst"})
    if not _reached(figures, "burst_exist_s", "burst_assigned_s", event_timeout,
                    lambda: len(set_members(standin, burst)) >= BURST + 1,
                    lambda: f"{len(set_members(standin, burst)) - 1} of {BURST} new exporters "
                            f"after {event_timeout:g} s"):
        return
    figures["burst_exist_s"] = time.monotonic() - started

    def assigned():
        return len(set(_burst_leases(standin, namespace)) & set(leases))

    try:
        wait_for(lambda: assigned() == BURST, timeout=timeout, interval=0.1, message="all burst leases assigned")
    except AssertionError:
        figures["misses"]["burst_assigned_s"] = f"{assigned()} of {BURST} leases assigned after {timeout:g} s"
        return
    figures["burst_assigned_s"] = time.monotonic() - started
    figures["burst_exporters_when_assigned"] = len(set_members(standin, burst))


def scenario_shrink(standin, custom, namespace, figures, timeout):
    """The burst's 21 leases end; with a floor of 2, 19 Exporters are
    surplus after the cooldown (a floor does not grow a set of leased ones)."""
    burst = custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", "burst")
    custom.patch_namespaced_custom_object(
        *GROUP, namespace, "exportersets", "burst", {"spec": {"minReplicas": SHRINK_FLOOR}}
    )
    # Timed from the last release (all asked to end, as `jmp delete lease`
    # does; the Jumpstarter controller ends them); the controllers' surplus
    # clocks start at the first, so the release time is recorded beside it.
    releasing = time.monotonic()
    for lease in _burst_leases(standin, namespace):
        standin.release(lease)
        custom.delete_namespaced_custom_object(*JS, namespace, "leases", lease)
    started = time.monotonic()
    figures["shrink_release_s"] = started - releasing
    figures["shrink_from"] = len(set_members(standin, burst))
    try:
        wait_for(
            lambda: len(set_members(standin, burst)) == SHRINK_FLOOR,
            timeout=timeout,
            interval=0.1,
            message=f"{SHRINK_FLOOR} remaining",
        )
    except AssertionError:
        remaining = len(set_members(standin, burst))
        figures["shrink_remaining_at_timeout"] = remaining
        figures["misses"]["shrink_s"] = f"{remaining} exporters remained after {timeout:g} s"
        return
    figures["shrink_s"] = time.monotonic() - started


def _stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def audit_entries(log) -> list[dict]:
    """Audit entries from the log's current position on, once the batch
    backend (up to 1 s behind) has written them."""
    time.sleep(3)
    return [json.loads(line) for line in log]


def _settled(members: list[dict]) -> bool:
    """Every Exporter of the set up (none starting, none going away) and
    exactly one of them free: what each event starts from."""
    return (
        all(_condition_true(e, "Online") and not e["metadata"].get("deletionTimestamp") for e in members)
        and sum(is_available(e) for e in members) == 1
    )


def _describe(members: list[dict]) -> str:
    return (
        f"{len(members)} exporters, {sum(_condition_true(e, 'Online') for e in members)} online, "
        f"{sum(is_available(e) for e in members)} free"
    )


def scenario_latency(bed, standin, custom, namespace, user, figures, events, timeout):
    """Lease → replacement Exporter, once per event, from a settled set (every
    Exporter online, exactly one free). Timed on the API server's clock from
    the audit log: from the server receiving the Lease to the server having
    stored the controller's create of the replacement; the local clock only
    decides when to go on."""
    lat = bench_set(custom, namespace, "lat", min_replicas=0, min_available=1)
    outcomes: list[dict] = []  # per event: lease, new (names), or miss (reason)
    with open(bed.audit_log) as log:
        log.seek(0, os.SEEK_END)
        for index in range(events):
            lease = f"lat-{index}"
            try:
                wait_for(
                    lambda: _settled(set_members(standin, lat)),
                    timeout=timeout,
                    interval=0.05,
                    message="the set settled (all online, one free)",
                )
            except AssertionError:
                reason = f"set not settled before the event: {_describe(set_members(standin, lat))} after {timeout:g} s"
                outcomes.extend({"lease": f"lat-{i}", "miss": reason} for i in range(index, events))
                break
            known = {e["metadata"]["name"] for e in set_members(standin, lat)}
            # The event is the lease; the Jumpstarter controller assigns it to
            # the free exporter on its own.
            standin.create_lease(lease, {"board": "lat"})
            try:
                new = wait_for(
                    lambda known=known: {e["metadata"]["name"] for e in set_members(standin, lat)} - known,
                    timeout=timeout,
                    interval=0.02,
                    message="replacement exporter",
                )
                outcomes.append({"lease": lease, "new": sorted(new)})
                standin.wait_assigned(lease, timeout=timeout)
            except AssertionError as exc:
                if not outcomes or outcomes[-1]["lease"] != lease:
                    outcomes.append({"lease": lease, "miss": f"no replacement within {timeout:g} s"})
                else:  # the replacement came; the assignment did not
                    figures["errors"]["latency_assignment"] = str(exc)[:500]
        entries = audit_entries(log)
    received = {
        e["objectRef"]["name"]: _stamp(e["requestReceivedTimestamp"])
        for e in entries
        if e["verb"] == "create"
        and (e.get("objectRef") or {}).get("resource") == "leases"
        and e["objectRef"].get("namespace") == namespace
        and (e.get("responseStatus") or {}).get("code") == 201
    }
    creates = [
        (_stamp(e["requestReceivedTimestamp"]), _stamp(e["stageTimestamp"]), e["objectRef"].get("name") or "")
        for e in entries
        if e["verb"] == "create"
        and e["user"]["username"] == user
        and (e.get("objectRef") or {}).get("resource") == "exporters"
        and e["objectRef"].get("namespace") == namespace
        and (e.get("responseStatus") or {}).get("code") == 201
    ]
    latencies = []
    for outcome in outcomes:
        if "miss" in outcome:
            latencies.append(float("inf"))
            continue
        begin = received.get(outcome["lease"])
        # A create names its Exporter in the audit entry unless the name is
        # generated; then the first create by the controller after the lease.
        candidates = [
            (stored, name)
            for arrived, stored, name in creates
            if begin and arrived >= begin and (name in outcome["new"] or not name)
        ]
        if begin is None or not candidates:
            outcome["miss"] = f"no create of {', '.join(outcome['new'])} by {user} after the lease in the audit log"
            latencies.append(float("inf"))
            continue
        stored, name = min(candidates)
        outcome["exporter"] = name or outcome["new"][0]
        outcome["latency_s"] = (stored - begin).total_seconds()
        latencies.append(outcome["latency_s"])
    figures["latency_events"] = outcomes
    missed = [o for o in outcomes if "miss" in o]
    for key, fraction in (("event_to_create_p50_s", 0.5), ("event_to_create_p95_s", 0.95)):
        value = percentile(latencies, fraction) if latencies else float("inf")
        if value != float("inf"):
            figures[key] = value
        else:
            reasons = sorted({o["miss"] for o in missed}) or ["no event ran"]
            figures["misses"][key] = f"{len(missed)} of {events} events missed: " + "; ".join(reasons)[:400]


def drop_namespace(custom, core, namespace):
    """Delete the namespace; finalizers whose controller is gone are removed first."""
    for item in custom.list_namespaced_custom_object(*GROUP, namespace, "exportersets")["items"]:
        custom.patch_namespaced_custom_object(
            *GROUP, namespace, "exportersets", item["metadata"]["name"], {"metadata": {"finalizers": None}}
        )
    try:
        core.delete_namespace(namespace)
    except ApiException as exc:
        if exc.status != 404:  # never made: the run failed before
            raise


def run_one(bed, api, kind, identity, rep, workdir, args) -> dict:
    kubeconfig, user = identity
    namespace = f"peers-{kind.name}-{rep}"
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    figures: dict = {
        "controller": kind.name,
        "repetition": rep,
        "namespace": namespace,
        "user": user,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "errors": {},
        "misses": {},  # figure → why this repetition has none
    }
    served = False
    try:
        # The Jumpstarter controller for the namespace, the same for every
        # controller under test; it makes the namespace and publishes its CA.
        with serve_namespace(bed.kubeconfig, namespace) as standin:
            run_scenarios(bed, standin, kind, kubeconfig, user, namespace, workdir, args, figures)
            figures["jumpstarter_controller_passes"] = standin.controller.passes
            served = True
    except AssertionError as exc:
        if not served:
            raise
        # The stand-in's own defects (refused requests), found when it stops.
        figures["errors"]["jumpstarter_controller"] = str(exc)[:500]
    finally:
        drop_namespace(custom, core, namespace)
    return figures


def first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"


def run_scenarios(bed, standin: JumpstarterStandIn, kind, kubeconfig, user, namespace, workdir, args, figures):
    custom = client.CustomObjectsApi(standin.custom.api_client)
    make_class(custom, namespace)
    controller = kind(kubeconfig, namespace, workdir)
    audit = open(bed.audit_log)  # noqa: SIM115 (closed below, after the run)
    audit.seek(0, os.SEEK_END)
    begin = datetime.now(UTC)
    quota = None
    if args.cpu_limit:
        quota = CpuQuota(args.cpu_limit, f"jve-peers-{namespace}")
        with quota.entered():
            controller.start()
        figures["cpu_limit"] = args.cpu_limit
    else:
        controller.start()
    sampler = TreeSampler(controller.proc.pid)
    steps = {
        "fill": lambda: scenario_fill(standin, custom, namespace, figures, args.event_timeout),
        "steady": lambda: scenario_steady(bed, user, figures, args.steady_seconds),
        "latency": lambda: scenario_latency(
            bed, standin, custom, namespace, user, figures, args.events, args.event_timeout
        ),
        "burst": lambda: scenario_burst(standin, custom, namespace, figures, args.timeout, args.event_timeout),
        "shrink": lambda: scenario_shrink(standin, custom, namespace, figures, args.timeout),
    }
    cpu_by_step = figures["cpu_s_by_step"] = {}
    try:
        try:
            controller.wait_ready()
        except AssertionError as exc:
            figures["errors"]["start"] = str(exc)[:2000]
            reason = f"{kind.name} did not become ready: {first_line(exc)}"
            for step in args.scenarios:
                for key in SCENARIO_FIGURES[step]:
                    figures["misses"].setdefault(key, reason)
            return
        sampler.sample()
        cpu_by_step["start"] = sampler.cpu_s
        split_by_step = figures["cpu_s_split_by_step"] = {}
        split_before = sampler.split()
        split_by_step["start"] = split_before
        for step in SCENARIOS:  # in this order, whatever order they were asked in
            if step not in args.scenarios:
                continue
            began, cpu_before = time.monotonic(), sampler.cpu_s
            try:
                steps[step]()
            except Exception as exc:  # noqa: BLE001 (recorded; the next scenario still runs)
                figures["errors"][step] = traceback.format_exc()[-2000:]
                figures["errors"][f"{step}_log_tail"] = controller.log_tail(15)
                reason = f"{step} failed: {first_line(exc)}"
            else:
                reason = f"{step} ended without it"
            # Every figure of the scenario is either measured or a miss with its reason.
            for key in SCENARIO_FIGURES[step]:
                if key not in figures:
                    figures["misses"].setdefault(key, reason)
            sampler.sample()
            cpu_by_step[step] = sampler.cpu_s - cpu_before
            split_now = sampler.split()
            split_by_step[step] = {part: round(seconds - split_before.get(part, 0.0), 2)
                                   for part, seconds in split_now.items()}
            split_before = split_now
            print(f"  {kind.name} #{figures['repetition'] + 1} {step}: {time.monotonic() - began:.1f} s", flush=True)
    finally:
        sampler.sample()
        controller.stop()
        figures.update(sampler.stop())
        if quota is not None:
            figures["cpu_throttled_s"] = quota.throttled_s()
            quota.remove()
        figures["cpu_outside_shrink_s"] = figures["cpu_s"] - cpu_by_step.get("shrink", 0.0)
        with audit:
            figures["requests_over_run"] = audited_requests(audit, user, begin, datetime.now(UTC))
        figures["requests_over_run_total"] = sum(figures["requests_over_run"].values())
        figures["duration_s"] = (datetime.now(UTC) - begin).total_seconds()


# -- summary -----------------------------------------------------------------

SCENARIOS = ["fill", "steady", "latency", "burst", "shrink"]

# The memory limit of the slot Jumpstarter's operator gives an exporter-set
# controller (UPSTREAM-OPERATOR.md); the tree's PSS must stay a quarter under it.
SLOT_MEMORY_MIB = 512

# key, label, scenario ("run": measured over every run), its target (issue 16;
# the PSS one issue 36's):
# (kind, bound) with kind "ratio" (ours / upstream, medians) or "at most" (ours).
FIGURES = [
    ("fill_exist_s", "fill 0→50: all exist (s)", "fill", None),
    ("fill_ready_s", "fill 0→50: all ready (s)", "fill", ("ratio", 1.0)),
    ("steady_requests_per_min_total", "steady API requests/min", "steady", None),
    ("event_to_create_p50_s", "lease → replacement p50 (s)", "latency", ("at most", 0.1)),
    ("event_to_create_p95_s", "lease → replacement p95 (s)", "latency", None),
    ("burst_exist_s", "burst 20 leases: 20 new exist (s)", "burst", ("ratio", 0.5)),
    ("burst_assigned_s", "burst 20 leases: all assigned (s)", "burst", ("ratio", 1.0)),
    ("shrink_s", "shrink 21→2, cooldown 20 s (s)", "shrink", None),
    ("requests_over_run_total", "API requests over the run", "run", None),
    ("cpu_outside_shrink_s", "CPU, the run without the shrink (s)", "run", ("ratio", 2.0)),
    ("cpu_s", "CPU over the run (s)", "run", None),
    ("peak_rss_mib", "peak RSS of the process tree (MiB)", "run", ("at most", 150.0)),
    ("peak_pss_mib", "peak PSS of the process tree (MiB)", "run", ("at most", SLOT_MEMORY_MIB * 0.75)),
]
SCENARIO_FIGURES = {
    step: [key for key, _, scenario, _ in FIGURES if scenario == step] for step in SCENARIOS + ["run"]
}


def summarize(runs: list[dict], controllers: list[str], scenarios: list[str]) -> dict:
    """Per figure and controller: median, min, max and n over the repetitions
    that measured it, and every miss with its repetition and reason."""
    summary = {}
    for key, _, scenario, _ in FIGURES:
        if scenario != "run" and scenario not in scenarios:
            continue  # a scenario this run left out
        summary[key] = {}
        for name in controllers:
            mine = [r for r in runs if r["controller"] == name]
            values = [r[key] for r in mine if r.get(key) is not None]
            entry = {"n": len(values), "repetitions": len(mine)}
            if values:
                entry.update(median=statistics.median(values), min=min(values), max=max(values))
            entry["misses"] = [
                {
                    "repetition": r["repetition"],
                    "reason": (r.get("misses") or {}).get(key) or "not measured (see the run's errors)",
                }
                for r in mine
                if r.get(key) is None
            ]
            summary[key][name] = entry
    summary["steady_requests_per_min_by_verb"] = {
        name: {
            verb: statistics.median(
                [
                    r["steady_requests_per_min"].get(verb, 0)
                    for r in runs
                    if r["controller"] == name and "steady_requests_per_min" in r
                ]
            )
            for verb in sorted(
                {v for r in runs if r["controller"] == name for v in r.get("steady_requests_per_min", {})}
            )
        }
        for name in controllers
    }
    return summary


def target_verdict(summary: dict, key: str, target, ours: str = "ours", upstream: str = "upstream"):
    """(target text, verdict text) for a figure with a target."""
    kind, bound = target
    mine = summary[key].get(ours)
    if kind == "at most":
        text = f"≤ {bound:g}"
        compared = [mine]
    else:
        text = f"≤ {bound:g}× upstream"
        compared = [mine, summary[key].get(upstream)]
    if any(entry is None for entry in compared):
        return text, "–"
    misses = sum(len(entry["misses"]) for entry in compared)
    if misses or any("median" not in entry for entry in compared):
        return text, f"not shown ({misses} missed)"
    value = mine["median"] if kind == "at most" else mine["median"] / compared[1]["median"]
    return text, "met" if value <= bound else "not met"


def table(summary: dict, controllers: list[str]) -> str:
    base = "ours" if "ours" in controllers else controllers[0]
    peers = [c for c in controllers if c != base]
    header = ["figure", base] + [col for p in peers for col in (p, f"{base} / {p}")]
    with_targets = base == "ours" and "upstream" in controllers
    if with_targets:
        header += ["target", "met"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def cell(entry):
        if not entry:
            return "–"
        if "median" not in entry:
            return f"missed (n=0 of {entry['repetitions']})"
        spread = "" if entry["n"] == 1 else f" ({entry['min']:.3g}–{entry['max']:.3g})"
        return f"{entry['median']:.3g}{spread} n={entry['n']}" + (
            "" if entry["n"] == entry["repetitions"] else f" of {entry['repetitions']}"
        )

    misses = []
    for key, label, _, target in FIGURES:
        if key not in summary:
            continue
        row = [label, cell(summary[key].get(base))]
        for peer in peers:
            row.append(cell(summary[key].get(peer)))
            ours, theirs = summary[key].get(base), summary[key].get(peer)
            row.append(
                f"{ours['median'] / theirs['median']:.3g}"
                if ours and theirs and "median" in ours and theirs.get("median")
                else "–"
            )
        if with_targets:
            row.extend(target_verdict(summary, key, target) if target else ("", ""))
        lines.append("| " + " | ".join(row) + " |")
        for name in controllers:
            for miss in (summary[key].get(name) or {}).get("misses", []):
                misses.append(f"- {label}, {name} repetition {miss['repetition'] + 1}: {miss['reason']}")
    if misses:
        lines.append("\nmisses:")
        lines.extend(misses)
    by_verb = summary["steady_requests_per_min_by_verb"]
    for name in controllers:
        verbs = ", ".join(f"{verb} {count:.3g}" for verb, count in by_verb.get(name, {}).items()) or "none"
        lines.append(f"\nsteady requests/min by verb, {name}: {verbs}")
    return "\n".join(lines)


def describe_checkout() -> dict:
    """The commit the operator ran from, and whether the tree differed from it."""
    def git(*argv):
        return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    # The benchmark's own results files are left out: a run rewrites them.
    changed = git("diff", "--name-only", "HEAD").splitlines()
    modified = [path for path in changed if not path.startswith("bench/results/")]
    return {"commit": git("rev-parse", "HEAD"), "modified": bool(modified), "modified_files": modified}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream-controller", help="exporter-set-controller binary (see above)")
    parser.add_argument("--ansible-operator", help="ansible-operator binary (see above)")
    parser.add_argument(
        "--runner-plugin-path", default="", help="directory with the SDK's ansible-runner event plugin (see above)"
    )
    parser.add_argument(
        "--controllers",
        default="ours,upstream,ansible-operator",
        help="comma-separated subset, in the order each repetition runs them",
    )
    parser.add_argument(
        "--ours-tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="also a controller ours-LABEL: this operator as the checkout at PATH has it (a before/after run; "
        "name it in --controllers)",
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--events", type=int, default=10, help="leases per latency measurement")
    parser.add_argument(
        "--scenarios",
        type=lambda value: [v.strip() for v in value.split(",") if v.strip()],
        default=list(SCENARIOS),
        help=f"comma-separated subset of {','.join(SCENARIOS)}, run in that order (steady measures the filled "
        "pool, shrink needs burst)",
    )
    parser.add_argument("--steady-seconds", type=float, default=30)
    parser.add_argument("--timeout", type=float, default=600, help="for the shrink and the other waits, seconds")
    parser.add_argument(
        "--event-timeout",
        type=float,
        default=180,
        help="for the fill, the 20 burst exporters (the shrink goes on) and each latency event, seconds",
    )
    parser.add_argument(
        "--cpu-limit",
        type=float,
        default=None,
        help="CPUs each controller's process tree may use (a cgroup CPU quota, as a Deployment's CPU limit); "
        "the same for every controller",
    )
    parser.add_argument(
        "--background-load",
        type=int,
        default=0,
        help="busy processes kept running beside the whole run (a busy machine), the same for every controller",
    )
    parser.add_argument("--json", default=None,
                        help="results file (default bench/results/peers.json, peers-cpu<N>.json with --cpu-limit, "
                        "peers-load<N>[-cpu<M>].json with --background-load)")
    args = parser.parse_args()
    if args.json is None:
        parts = ([f"load{args.background_load}"] if args.background_load else []) + (
            [f"cpu{args.cpu_limit:g}"] if args.cpu_limit else [])
        args.json = str(ROOT / "bench" / "results" / ("-".join(["peers", *parts]) + ".json"))
    if args.cpu_limit is not None and args.cpu_limit <= 0:
        parser.error("--cpu-limit: a number of CPUs above 0")
    unknown = [step for step in args.scenarios if step not in SCENARIOS]
    if unknown:
        parser.error(f"--scenarios: unknown {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
    if "shrink" in args.scenarios and "burst" not in args.scenarios:
        parser.error("--scenarios: shrink needs burst (it releases the burst's leases)")
    args.scenarios = [step for step in SCENARIOS if step in args.scenarios]
    # A TERM (a CI timeout, a kill) unwinds like an exception, so the bed and the
    # controller are stopped by the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    kinds = {"ours": Ours, "upstream": Upstream, "ansible-operator": AnsibleOperator}
    for entry in args.ours_tree:
        label, _, tree = entry.partition("=")
        if not label or not tree:
            parser.error(f"--ours-tree: {entry!r} is not LABEL=PATH")
        kinds[f"ours-{label}"] = ours_at(label, Path(tree).resolve())
    controllers = [c.strip() for c in args.controllers.split(",") if c.strip()]
    strangers = [name for name in controllers if name not in kinds]
    if strangers:
        parser.error(f"--controllers: unknown {', '.join(strangers)} (known: {', '.join(kinds)})")
    Upstream.binary = args.upstream_controller
    AnsibleOperator.binary = args.ansible_operator
    AnsibleOperator.plugin_path = args.runner_plugin_path
    for name, binary in (("upstream", args.upstream_controller), ("ansible-operator", args.ansible_operator)):
        if name in controllers and not (binary and os.access(binary, os.X_OK)):
            parser.error(f"{name} needs an executable binary (got {binary!r})")

    runs: list[dict] = []
    revision = describe_checkout()
    binaries = {
        name: {"path": path, "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest()}
        for name, path in (("upstream", args.upstream_controller), ("ansible-operator", args.ansible_operator))
        if name in controllers
    }
    load_before = os.getloadavg()
    started = time.monotonic()
    floor = runner_floor(args.repetitions) if "ours" in controllers else None

    def write_results() -> dict:
        """Written after every run, so an interrupted benchmark keeps what it measured."""
        summary = summarize(runs, controllers, args.scenarios)
        result = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "load_before": load_before, "load_after": os.getloadavg()},
            "regime": (f"each controller's process tree under a CPU quota of {args.cpu_limit:g} CPU"
                       if args.cpu_limit else "each controller may use every CPU of the machine")
            + (f", beside {args.background_load} busy processes" if args.background_load else ""),
            "duration_s": time.monotonic() - started,
            "command": sys.argv,
            "revision": revision,
            "binaries": binaries,
            "parameters": {k: v for k, v in vars(args).items() if k != "json"},
            "summary": summary,
            # ansible-runner's floor: what each of our backend runs costs at the least.
            "runner_floor": floor,
            "runs": runs,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
        return summary

    with tempfile.TemporaryDirectory(prefix="jve-peers-") as tmp:
        workdir = Path(tmp)
        bed = TestBed(workdir / "bed", audit=True)
        bed.up()
        # A busy machine: loops that take the CPU whenever the run does not.
        load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.background_load)]
        try:
            identities = {name: make_identity(bed, name, workdir) for name in controllers}
            with bed.api_client() as api:
                for rep in range(args.repetitions):
                    for name in controllers:
                        print(f"{name} repetition {rep + 1}/{args.repetitions}", flush=True)
                        try:
                            runs.append(run_one(bed, api, kinds[name], identities[name], rep, workdir, args))
                        except Exception as exc:  # a controller that will not start must not end the others' run
                            reason = f"the run failed: {first_line(exc)}"
                            runs.append(
                                {
                                    "controller": name,
                                    "repetition": rep,
                                    "errors": {"run": traceback.format_exc()[-2000:]},
                                    "misses": {
                                        key: reason
                                        for step in [*args.scenarios, "run"]
                                        for key in SCENARIO_FIGURES[step]
                                    },
                                }
                            )
                        print(json.dumps(runs[-1], default=str), flush=True)
                        write_results()
        finally:
            for busy in load:
                busy.kill()
                busy.wait()
            bed.down(remove=True)
    print(table(write_results(), controllers))
    if floor:
        for label, figures in (("forked from the fork server", floor), ("ansible-playbook started afresh",
                                                                         floor["cold"])):
            print(f"\nfloor of one playbook run (one module, ansible-runner), {label}, n={floor['n']}: "
                  f"CPU {figures['cpu_s']['median']:.2f} s "
                  f"({figures['cpu_s']['min']:.2f}–{figures['cpu_s']['max']:.2f}), "
                  f"wall {figures['wall_s']['median']:.2f} s")


if __name__ == "__main__":
    main()
