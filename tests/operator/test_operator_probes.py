"""/readyz and /healthz of the real operator process on the test bed: what a
kubelet sees, a rolling update of two replicas, a reconcile that hangs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from jumpstarter_standin import wait_for
from kubernetes import client, watch
from operator_process import ROOT, OperatorProcess, free_port, leader_and_standby, watches_file
from pool_helpers import GROUP, make_class, make_set, settle_pool

ELECTION = ("--leader-elect", "--leader-election-id", "pool-operator")
KINDS = "ExporterSet, VirtualTargetClass, Exporter, Lease, ExporterSetPolicy, Pod"


class GatedProxy:
    """A TCP port in front of the API server that refuses connections until
    ``open()``: bound but not listening, so a connect is refused at once."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._sockets: list[socket.socket] = []

    def open(self) -> None:
        self.listener.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.upstream)
            self._sockets += [downstream, upstream]
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()
        for sock in self._sockets:
            sock.close()


def _probe_is(proc: OperatorProcess, path: str, status: int, contains: str = ""):
    def check():
        assert proc.proc.poll() is None, f"operator exited:\n{proc.log_tail()}"
        answer = proc.probe(path)
        return answer if answer and answer[0] == status and contains in answer[1] else None

    return check


def test_not_ready_before_the_caches_sync_then_ready_without_leading(testbed, namespace, tmp_path):
    """Before its first list the process answers 503 and names every cache;
    its watches, silent for longer than the bound, fail /healthz. Once the
    API server can be reached it is ready and healthy."""
    server = json.loads(testbed.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    proxy = GatedProxy((host, int(port)))
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *ELECTION, "--leader-election-namespace",
                           namespace, "--watch-silence-timeout", "2", server=f"https://127.0.0.1:{proxy.port}")
    try:
        proc.start()
        status, body = wait_for(lambda: proc.probe("/readyz"), timeout=60, message="/readyz answers")
        assert (status, body) == (503, f"caches not synced: {KINDS}\n")
        status, body = wait_for(_probe_is(proc, "/healthz", 503), timeout=30, message="/healthz fails")
        assert "ExporterSet informer has not heard from the API server for" in body
        assert proc.probe("/readyz") == (503, f"caches not synced: {KINDS}\n")

        proxy.open()
        wait_for(_probe_is(proc, "/readyz", 200), timeout=90, message="/readyz ready once synced")
        wait_for(_probe_is(proc, "/healthz", 200), timeout=90, message="/healthz healthy again")
    finally:
        proc.stop()
        proxy.close()
        print(f"--- operator log ---\n{proc.log_tail(40)}")


def test_a_rolling_update_of_two_replicas_completes(testbed, api, namespace, standin, tmp_path):
    """A Deployment of 2 replicas, RollingUpdate with maxSurge 1 and
    maxUnavailable 0, as the kubelet gates it: a new Pod must be ready before
    an old one is stopped. The new Pods are followers while an old one leads;
    were only the leader ready, the first new Pod would never be and the
    rollout would stall."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    election = (*ELECTION, "--leader-election-namespace", namespace)

    def replica():
        return OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()

    old = [replica(), replica()]
    new: list[OperatorProcess] = []
    try:
        for proc in old:
            proc.wait_ready()
        settle_pool(standin, 1, custom, namespace)
        assert sum(proc.leads() for proc in old) == 1

        started = time.monotonic()
        for index, retiring in enumerate(old):
            surge = replica()
            new.append(surge)
            surge.wait_ready(timeout=60)
            print(f"new replica {index} ready after {time.monotonic() - started:.1f}s "
                  f"(leading: {surge.leads()})")
            retiring.stop()
        rollout = time.monotonic() - started
        print(f"rollout of 2 replicas took {rollout:.1f}s")

        # The new replicas take over: one leads once the old lease expires,
        # and serves new demand; the other only stands by.
        leader = wait_for(lambda: next((p for p in new if p.leads()), None), timeout=60, message="a new leader")
        print(f"a new replica leads {time.monotonic() - started:.1f}s after the rollout began")
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                              {"spec": {"minAvailableReplicas": 2}})
        settle_pool(standin, 2, custom, namespace, timeout=120)
        follower = next(p for p in new if p is not leader)
        assert leader.metric("jumpstarter_exporterset_reconciles_total") > 0
        assert follower.metric("jumpstarter_exporterset_reconciles_total") == 0
        assert [p.leads() for p in new].count(True) == 1
        for proc in new:
            assert proc.probe("/readyz") == (200, "ok")
            assert proc.probe("/healthz") == (200, "ok")
    finally:
        for proc in old + new:
            proc.stop()


# What __main__.py gives the election (LeaderElection's lease_duration).
LEASE_DURATION_SECONDS = 15


def test_a_stopped_leader_releases_its_lease_and_the_standby_takes_over_at_once(
        testbed, api, namespace, standin, tmp_path):
    """SIGTERM (a rollout, a drain): the leader finishes its reconciles and
    clears the Lease's holder; the standby takes over at its next attempt
    instead of waiting out the lease duration. Watched on the Lease itself:
    leader, then no holder, then the standby."""
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    election = (*ELECTION, "--leader-election-namespace", namespace)
    first = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    second = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *election).start()
    holders: list[str | None] = []
    watcher = watch.Watch()

    def record():
        coordination = client.CoordinationV1Api(api)
        try:
            for event in watcher.stream(coordination.list_namespaced_lease, namespace,
                                        field_selector="metadata.name=pool-operator", timeout_seconds=300):
                holder = event["object"].spec.holder_identity
                if not holders or holders[-1] != holder:
                    holders.append(holder)
        except Exception as exc:  # the test's waits on ``holders`` then fail, naming it
            holders.append(f"watch failed: {exc}")

    try:
        leader, standby = leader_and_standby(first, second)
        settle_pool(standin, 1, custom, namespace)
        threading.Thread(target=record, daemon=True).start()
        wait_for(lambda: holders and holders[-1].endswith(f"_{leader.proc.pid}"), message="the watch sees the leader")

        started = time.monotonic()
        leader.stop()
        wait_for(standby.leads, timeout=4 * LEASE_DURATION_SECONDS, interval=0.1, message="the standby leads")
        handover = time.monotonic() - started
        print(f"handover after SIGTERM: {handover:.1f}s (lease duration {LEASE_DURATION_SECONDS}s)")
        assert leader.proc.returncode == 0, leader.log_tail()
        wait_for(lambda: (holders[-1] or "").endswith(f"_{standby.proc.pid}"), message="the watch sees the standby")
        pids = [holder and holder.rsplit("_", 1)[1] for holder in holders]
        assert pids[pids.index(str(leader.proc.pid)):] == [str(leader.proc.pid), None, str(standby.proc.pid)], holders
        # Generous: without the release it cannot be under the lease duration.
        assert handover < LEASE_DURATION_SECONDS
        # The new leader serves new demand.
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                              {"spec": {"minAvailableReplicas": 2}})
        settle_pool(standin, 2, custom, namespace)
    finally:
        watcher.stop()
        first.stop()
        second.stop()


def test_the_lock_releases_only_its_own_lease_and_then_stops_renewing(api, namespace):
    """ResilientLeaseLock.release on the real API: the holder is cleared only
    when this process holds the Lease; once released the lock neither
    renews nor takes the Lease again."""
    from exporterset_operator.election import ResilientLeaseLock
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

    client.Configuration.set_default(api.configuration)
    coordination = client.CoordinationV1Api(api)
    now = str(datetime.now())
    ours = ResilientLeaseLock("released", namespace, "ours")
    assert ours.create("released", namespace, LeaderElectionRecord("ours", "15", now, now))
    theirs = ResilientLeaseLock("released", namespace, "theirs")
    assert theirs.release() is False
    assert coordination.read_namespaced_lease("released", namespace).spec.holder_identity == "ours"

    assert ours.release() is True
    lease = coordination.read_namespaced_lease("released", namespace)
    assert lease.spec.holder_identity is None
    assert ours.get("released", namespace)[0]
    assert ours.update("released", namespace, LeaderElectionRecord("ours", "15", now, now)) is False
    assert ours.create("other", namespace, LeaderElectionRecord("ours", "15", now, now)) is False
    assert coordination.read_namespaced_lease("released", namespace).spec.holder_identity is None


HOLD_PLAYBOOK = """\
- name: Hold the reconcile until the test releases it
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Wait for the release file
      ansible.builtin.wait_for:
        path: {release}
        timeout: 600

- name: Then reconcile as always
  ansible.builtin.import_playbook: {reconcile}
"""


def test_healthz_fails_while_a_reconcile_hangs_and_recovers(testbed, api, namespace, standin, tmp_path):
    """The reconcile playbook (named by watches.yaml) hangs until released:
    past --stuck-reconcile-timeout /healthz names the worker and the set;
    once the playbook ends and the pool settles, it is healthy again."""
    release = tmp_path / "release"
    playbook = tmp_path / "hold.yml"
    playbook.write_text(HOLD_PLAYBOOK.format(release=release, reconcile=ROOT / "playbooks" / "reconcile.yml"))
    watches = watches_file(tmp_path, lambda entry: entry.update(playbook=str(playbook)))

    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, "--watches-file", str(watches),
                           "--stuck-reconcile-timeout", "3").start()
    try:
        proc.wait_ready()
        assert proc.probe("/healthz") == (200, "ok")
        _, body = wait_for(_probe_is(proc, "/healthz", 503), timeout=120, message="/healthz fails on the hang")
        assert f"has been reconciling {namespace}/pool for" in body and "(bound 3s)" in body
        # Still serving: only a kubelet acts on /healthz.
        assert proc.probe("/readyz") == (200, "ok")

        Path(release).touch()
        settle_pool(standin, 1, custom, namespace, timeout=180)
        wait_for(_probe_is(proc, "/healthz", 200), timeout=60, message="/healthz healthy again")
    finally:
        proc.stop()
        print(f"--- operator log ---\n{proc.log_tail(40)}")


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def test_idle_connections_to_both_ports_take_no_thread_and_the_probes_still_answer(testbed, namespace, tmp_path):
    """Three hundred connections to each of the operator's ports that never
    send a whole request: the process starts no thread for them, and the
    kubelet's probe (timeout 1 s) and a scrape still answer among them."""
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path).start()
    clients = []
    try:
        proc.wait_ready()
        before = _threads(proc.proc.pid)
        for index in range(300):
            for port in (proc.health_port, proc.port):
                connection = socket.create_connection(("127.0.0.1", port))
                if index % 2:
                    connection.sendall(b"GET /metrics HTTP/1.1\r\n")
                clients.append(connection)
        started = time.monotonic()
        assert proc.probe("/readyz") == (200, "ok")
        assert time.monotonic() - started < 1
        assert "jumpstarter_exporterset_leader" in proc.metrics()
        # The informers and workers may start one or two of their own meanwhile.
        assert _threads(proc.proc.pid) <= before + 2
    finally:
        for connection in clients:
            connection.close()
        proc.stop()


def _listening_ports(pid: int) -> set[int]:
    """The TCP ports process ``pid`` listens on (its sockets in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_slots_command_line_and_namespace_env_serve_probes_alone_and_lead_there(
        testbed, api, namespace, tmp_path):
    """Started as upstream's Jumpstarter operator starts an exporter-set
    controller (these args, env NAMESPACE, granted in that namespace alone):
    ready on the probe port, no metrics port, its caches and its leader
    election Lease in NAMESPACE."""
    port = free_port()
    slot = ("--provisioner=qemu.jumpstarter.dev", "--leader-elect", f"--health-probe-bind-address=:{port}",
            "--metrics-bind-address=0", "--zap-log-level=info")
    proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *slot, exact=True,
                           env={"NAMESPACE": namespace, "WATCH_NAMESPACE": "", "LEADER_ELECTION_NAMESPACE": ""})
    try:
        proc.start().wait_ready()
        coordination = client.CoordinationV1Api(api)

        def held():
            leases = coordination.list_namespaced_lease(namespace).items
            return [lease.metadata.name for lease in leases
                    if (lease.spec.holder_identity or "").endswith(f"_{proc.proc.pid}")]

        assert wait_for(held, message="the operator holds a Lease in NAMESPACE") == [
            "exporter-set-controller-qemu.jumpstarter.dev"]
        assert _listening_ports(proc.proc.pid) == {port}
        started = next(entry for entry in map(json.loads, proc.log_path.read_text().splitlines())
                       if entry["msg"] == "starting")
        assert started["namespace"] == namespace
        assert proc.probe("/healthz") == (200, "ok")
    finally:
        proc.stop()
        print(f"--- operator log ---\n{proc.log_tail(20)}")


def test_an_unknown_provisioner_exits_with_the_supported_list():
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners

    done = subprocess.run([sys.executable, "-m", "exporterset_operator", "--provisioner=nope", "--leader-elect"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == ("exporterset-operator: error: unknown provisioner 'nope'; supported: "
                                            + ", ".join(provisioners.names()))
    assert "Traceback" not in done.stderr
