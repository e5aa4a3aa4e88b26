"""The qemu.jumpstarter.dev pool in Pods on the real node, end to end.

One bed, one real node (containerd + kubelet, tests/testbed/node.py) with
the images the project builds (scripts/images) under the provisioner's
default names, one controller stand-in serving gRPC over TLS on the node's
bridge address (where the Pods reach it), and, for each test, the real
operator installed with ``kubectl apply -k`` and run as a Pod on the node
(tests/operator_pod.py). The instance Pods really run: the images init
container fetches the guest's kernel and initramfs from a server on the node's address, QEMU
(TCG) boots them in the runtime container, and the exporter sidecar's own
``jmp run`` registers with the controller using the config Secret the
operator wrote. A lessee's program under a real ``jmp shell`` leases by
label, powers the VM off and on, reads its console and reads the
line the guest's port 22 writes, through the exporter's ``TcpNetwork``
driver (JEP-0014's entry, ``port: 22`` and no host) and QEMU's forward.
With ``InPlaceReuse`` a lessee flashes an image onto the guest's disk
through the exporter's flasher and the guest reads it; the next lessee
finds the same Pod with a fresh VM, the image gone.

Select with ``-m realnode`` (root; ``scripts/realnode build`` installs what
it needs).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from jumpstarter_standin import condition_true, wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_pod import OperatorPod
from pool_helpers import GROUP, SET_LABEL, make_set
from qemu_vm import GUEST_BANNER, GUEST_DIR
from realnode_guest import BOARD, guest_class
from testbed import namespace_name

pytestmark = [pytest.mark.realnode, pytest.mark.testbed]

USER = "incluster-user"
# JEP-0014's template: the VM and its SSH port, by port alone.
DRIVERS = [
    {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
    {"name": "ssh", "type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}},
]
# What the test guest's port 22 writes to each connection (scripts/guest-image).
PORT22_BANNER = "SSH-2.0-jumpstarter-guest"
JMP = os.path.join(os.path.dirname(sys.executable), "jmp")
# The lessee's program, run by a real `jmp shell` that leases by label (as
# docs/lessee.md shows: `jmp shell -- pytest ...`): the VM powered off, then
# for "flash" MARK flashed onto the guest's disk through the exporter's
# flasher (only while off), then powered on, its banner on the console, and:
# - "network": a command on the console, then the guest's port 22 through
#   the exporter of the Pod; then it waits for the test's go-ahead, so the
#   test decides when the lease ends (jmp shell releases it when the program
#   exits). Its result is the file it writes: `jmp shell` 0.9.0 exits
#   non-zero after a lease whose exporter ends with it (docs/lessee.md).
# - "flash" and "read": whether the guest's disk starts with MARK, read by
#   the guest.
MARK = "lessee-one-was-here"
LESSEE = """
import os, sys, tempfile, time
from jumpstarter.utils.env import env
banner, action, *rest = sys.argv[1:]
with env() as client:
    vm = client.qemu
    vm.power.off()
    if action == "flash":
        with tempfile.NamedTemporaryFile("w", suffix=".img", delete=False) as image:
            image.write(rest[0] + "\\n")
        vm.flasher.flash(image.name)
        print("lessee: flashed", flush=True)
    vm.power.on()
    with vm.console.pexpect() as console:
        console.expect(banner, timeout=150)
        if action == "network":
            console.sendline("echo answer-$((40 + 2))")
            console.expect("answer-42", timeout=60)
            print("lessee: power and console ok", flush=True)
        else:
            console.sendline(f"echo disk-$(head -c {len(rest[0])} /dev/vda | grep -c {rest[0]})-end")
            console.expect(r"disk-(\\d)-end", timeout=60)
            print(f"lessee: the disk holds the mark: {console.match.group(1).decode()}", flush=True)
    if action == "network":
        port22, done, go = rest
        with client.ssh.stream() as stream:
            line = b""
            while b"\\n" not in line:
                line += stream.receive()
        print(f"lessee: port 22 of the guest says {line.decode().strip()!r}", flush=True)
        if line.decode().strip() != port22:
            sys.exit(f"lessee: port 22 answered {line!r}, not {port22!r}")
        open(done, "w").close()
        deadline = time.monotonic() + 300
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.1)
print("lessee: released", flush=True)
"""


class Pool:
    """The module's bed, node, controller and operator, and what a test asks of them."""

    def __init__(self, bed, node, namespace, standin, operator, api_client, workdir):
        self.bed = bed
        self.node = node
        self.namespace = namespace
        self.standin = standin
        self.operator = operator
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.workdir = workdir

    def live_exporters(self, set_name):
        return {e["metadata"]["name"]: e for e in self.standin.exporters(f"{SET_LABEL}={set_name}")
                if not e["metadata"].get("deletionTimestamp")
                and "dormant" not in e["metadata"]["name"]}

    def container_status(self, pod_name, container):
        pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        statuses = (pod.status.init_container_statuses or []) + (pod.status.container_statuses or [])
        return next((s for s in statuses if s.name == container), None)

    def logs(self, pod_name, container, previous=False):
        result = self.bed.kubectl("logs", "-n", self.namespace, pod_name, "-c", container,
                                  *(["--previous"] if previous else []), check=False)
        return result.stdout + result.stderr


@pytest.fixture
def pool(testbed, pod_real_node, request, tmp_path):
    """A namespace of the test's own, served by a controller stand-in on the
    node's address and by the operator, on the session's real node."""
    real_node = pod_real_node
    namespace = namespace_name(request.node.name)
    with testbed.api_client() as api_client, \
            serve_namespace(testbed.kubeconfig, namespace, grpc_host=real_node.ip, pod_exporters=False) as standin:
        operator = OperatorPod(real_node, namespace, tmp_path).start()
        view = Pool(testbed, real_node, namespace, standin, operator, api_client, tmp_path)
        view.images = real_node.images
        try:
            operator.wait_ready()
            yield view
        finally:
            if request.session.testsfailed:
                print(f"--- operator log ---\n{operator.log_tail(60)}")
                for what in (("get", "events", "--sort-by=.lastTimestamp"), ("get", "pods", "-o", "wide")):
                    print(testbed.kubectl(*what, "-n", namespace, check=False).stdout[-4000:])
            operator.stop()
            client.CoreV1Api(api_client).delete_namespace(namespace)


def make_client(pool, name):
    pool.custom.create_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", pool.namespace, "clients",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Client", "metadata": {"name": name}, "spec": {}})
    return pool.standin.grpc.write_client_config(pool.workdir / f"{name}.yaml", name)


class StatusLog:
    """Every (exporterStatus, Registered, Online, leaseRef) an Exporter went through, polled."""

    def __init__(self, standin, name):
        self.standin = standin
        self.name = name
        self.seen: list[tuple] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)

    def _poll(self):
        while not self._stop.wait(0.1):
            try:
                exporter = self.standin.exporter(self.name)
            except client.ApiException:
                continue
            status = exporter.get("status") or {}
            state = (status.get("exporterStatus"), condition_true(exporter, "Registered"),
                     condition_true(exporter, "Online"), (status.get("leaseRef") or {}).get("name"))
            if not self.seen or self.seen[-1] != state:
                self.seen.append(state)


def test_a_lessee_gets_a_real_qemu_pod_and_its_vm_is_never_offered_again(pool):
    """ExitAndReplace on the real node: the set's Pod boots QEMU and its
    exporter registers over TLS; a lessee leases it by label, powers it
    off and on and reads its console. The lease ends while the operator is
    not running (its Deployment scaled to none) and a second lease waits:
    the used exporter unregisters and its guard does not serve again, so the
    second lease is never given the used VM; once the operator runs again
    it replaces the instance with a fresh Pod, which takes the second lease."""
    guest_class(pool, "guest")
    created = time.monotonic()
    make_set(pool.custom, pool.namespace, board=BOARD, virtualTargetClassName="guest",
             minAvailableReplicas=1, maxReplicas=1,
             template={"metadata": {"labels": {"board": BOARD, "virtual": "true"}}, "spec": {"drivers": DRIVERS}})
    config = make_client(pool, USER)

    used = wait_for(lambda: next(iter(pool.live_exporters("pool")), None), timeout=60, interval=0.1,
                    message="the set's Exporter")
    seen = time.monotonic()
    exporter = pool.standin.wait_online(used, timeout=240)
    cold = time.monotonic() - created
    used_uid = exporter["metadata"]["uid"]
    pod = pool.core.read_namespaced_pod(used, pool.namespace)
    assert pod.spec.node_name == pool.node.name
    assert pod.metadata.owner_references[0].uid == used_uid
    qemu = pool.container_status(used, "qemu")
    assert qemu.state.running is not None, qemu
    print(f"cold start: ExporterSet created -> Exporter {used} Online in {cold:.1f} s "
          f"(Exporter created -> Online in {time.monotonic() - seen:.1f} s)")

    # The lessee, as a user's program runs it.
    done, go = pool.workdir / "lessee-done", pool.workdir / "lessee-go"
    leased_at = time.monotonic()
    lessee, output, reader = start_lessee(pool, config, "lessee", "network", PORT22_BANNER, str(done), str(go))
    try:
        first = wait_for(lambda: next((lease for lease in pool.standin.leases()), None), timeout=60,
                         message="the lessee's lease")["metadata"]["name"]
        assert pool.standin.wait_assigned(first, timeout=60) == used
        ready = time.monotonic() - leased_at
        wait_for(lambda: done.exists() or lessee.poll() is not None, timeout=240, interval=0.2,
                 message="the lessee's power and console steps")
        assert done.exists(), "".join(output)
        assert f"port 22 of the guest says {PORT22_BANNER!r}" in "".join(output), "".join(output)
        print(f"warm lease: lessee started -> lease Ready in {ready:.1f} s")

        # A second lessee waits; the operator stops; the first lease ends.
        pool.standin.create_lease("second", {"board": BOARD}, client_name=USER)
        pool.operator.scale(0)
        with StatusLog(pool.standin, used) as statuses:
            try:
                go.touch()
                end_lessee(lessee, output, reader, timeout=60)
                # The program's own end (jmp shell's code is the exporter's, above).
                assert "lessee: released" in "".join(output), "".join(output)
                wait_for(lambda: pool.standin.lease(first)["status"].get("ended"), timeout=30,
                         message="the first lease ended")
                # The exporter unregistered and its guard does not serve
                # again (its line); or else the second lease got the used VM.
                def settled():
                    lease = pool.standin.lease("second")
                    if (lease.get("status") or {}).get("exporterRef"):
                        return lease
                    return "not serving again" in pool.logs(used, "exporter") and lease
                second = wait_for(settled, timeout=90, interval=0.5,
                                  message="the used instance's exporter keeping out")
                assert not (second.get("status") or {}).get("exporterRef"), (
                    f"the second lease was given {second['status']['exporterRef']}; states {statuses.seen}")
                assert pool.standin.exporter(used)["status"]["exporterStatus"] == "Offline"
            finally:
                pool.operator.scale(1)
        print(f"used exporter's states after the lease: {statuses.seen}")
        after_lease = statuses.seen[next(i for i, s in enumerate(statuses.seen) if s[3] is None):]
        assert all(state[0] != "Available" for state in after_lease), statuses.seen
    finally:
        if lessee.poll() is None:
            lessee.kill()

    # ExitAndReplace: a fresh Pod under a new Exporter takes the second lease.
    fresh = pool.standin.wait_assigned("second", timeout=240)
    exporter = pool.standin.exporter(fresh)
    assert exporter["metadata"]["uid"] != used_uid
    pod = pool.core.read_namespaced_pod(fresh, pool.namespace)
    assert pod.metadata.owner_references[0].uid == exporter["metadata"]["uid"]
    assert pool.container_status(fresh, "qemu").state.running is not None
    wait_for(lambda: used_uid not in {e["metadata"]["uid"] for e in pool.live_exporters("pool").values()},
             timeout=60, message="the used Exporter gone")
    pool.standin.release("second")
    the_set = pool.custom.get_namespaced_custom_object(*GROUP, pool.namespace, "exportersets", "pool")
    print(f"set status: {json.dumps(the_set.get('status'), sort_keys=True)[:400]}")


def test_a_killed_qemu_is_reported_on_the_set_and_replaced(pool):
    """The JEP's Pod crash: QEMU's container is killed (SIGKILL through the
    node's containerd). It is not started again on the used disk: the Pod
    fails, the set reports the instance's failure (a ReplicaFailed Event
    naming it) and a new Exporter with a new Pod replaces it.

    Before that, the running instance's containers are looked into: QEMU's
    sees of the node's image cache its own kernel and initramfs alone,
    read-only, not another digest the cache holds; the exporter's sees none
    of it."""
    guest_class(pool, "guest")
    planted = plant_in_node_cache(b"another tenant's image")
    try:
        make_set(pool.custom, pool.namespace, board=BOARD, virtualTargetClassName="guest",
                 minAvailableReplicas=1, maxReplicas=1)
        name = wait_for(lambda: next(iter(pool.live_exporters("pool")), None), timeout=60, interval=0.1,
                        message="the set's Exporter")
        uid = pool.standin.wait_online(name, timeout=240)["metadata"]["uid"]
        sees_its_own_images_alone(pool, name, planted)
    finally:
        planted.unlink(missing_ok=True)
    # The kubelet writes the container's id a moment after it runs (the
    # Exporter can be Online before): wait for it.
    container = wait_for(lambda: getattr(pool.container_status(name, "qemu"), "container_id", None),
                         timeout=60, interval=0.2, message="QEMU's container id in the Pod's status")
    container = container.split("//", 1)[1]
    killed = time.monotonic()
    pool.node.ctr("tasks", "kill", "--signal", "SIGKILL", container)

    def reported():
        events = pool.core.list_namespaced_event(pool.namespace).items
        return [e.message for e in events if e.reason == "ReplicaFailed" and name in (e.message or "")]
    messages = wait_for(reported, timeout=90, interval=0.5, message="the set reporting the failed instance")
    print(f"QEMU killed -> reported on the set in {time.monotonic() - killed:.1f} s: {messages}")
    replacement = wait_for(lambda: next((e for e in pool.live_exporters("pool").values()
                                         if e["metadata"]["uid"] != uid), None),
                           timeout=120, interval=0.5, message="a new Exporter replacing the failed one")

    def fresh_pod():
        try:
            pod = pool.core.read_namespaced_pod(replacement["metadata"]["name"], pool.namespace)
        except client.ApiException:
            return None
        # Made by the operator, then bound by the scheduler: read once bound.
        return (pod.metadata.owner_references[0].uid == replacement["metadata"]["uid"]
                and pod.spec.node_name and pod)
    pod = wait_for(fresh_pod, timeout=60, interval=0.5, message="the replacement's Pod, scheduled")
    assert pod.spec.node_name == pool.node.name
    print(f"QEMU killed -> replacement Pod in {time.monotonic() - killed:.1f} s")


def plant_in_node_cache(content):
    """A valid entry of the node's image cache that no instance of the test
    uses; used just now, so no ``images`` container prunes it meanwhile."""
    path = Path(k8s_pod.NODE_IMAGE_CACHE) / "sha256" / hashlib.sha256(content).hexdigest()
    path.parent.mkdir(exist_ok=True)
    os.chown(path.parent, k8s_pod.IMAGE_FETCH_UID, k8s_pod.IMAGE_FETCH_UID)
    path.write_bytes(content)
    os.chmod(path, 0o444)
    return path


def sees_its_own_images_alone(pool, name, planted):
    """What the instance ``name``'s containers see of the node's image cache:
    QEMU's container its class's digests alone, read-only; the exporter's nothing."""
    parameters = pool.custom.get_namespaced_custom_object(*GROUP, pool.namespace, "virtualtargetclasses",
                                                          "guest")["spec"]["parameters"]
    own = sorted(parameters[key]["digest"].split(":", 1)[1] for key in ("kernel", "initrd"))
    cache = f"{k8s_pod.IMAGE_CACHE_DIR}/sha256"

    def run(container, script):
        done = pool.bed.kubectl("exec", "-n", pool.namespace, name, "-c", container, "--",
                                "/bin/sh", "-c", script, check=False)
        return done.stdout.split(), done

    assert run("qemu", f"ls -A {k8s_pod.IMAGE_CACHE_DIR}")[0] == ["sha256"]
    # The node's cache holds the planted digest too; the container does not see it.
    assert planted.exists() and run("qemu", f"ls -A {cache}")[0] == own
    said, done = run("qemu", f"cat {cache}/{planted.name} || echo unreadable; "
                             f"touch {cache}/{own[0]} || echo read-only; wc -c < {k8s_pod.RUN_DIR}/kernel")
    assert said == ["unreadable", "read-only", str((GUEST_DIR / "vmlinuz").stat().st_size)], done
    said, done = run("exporter", f"ls -A {k8s_pod.IMAGE_CACHE_DIR} || echo none")
    assert said[-1:] == ["none"], done
    pod = pool.core.read_namespaced_pod(name, pool.namespace)
    assert next(v for v in pod.spec.volumes if v.name == "run").empty_dir.size_limit


def start_lessee(pool, config, name, *args):
    """``LESSEE`` (with ``args``) started under a real `jmp shell` that
    leases by label: the process, the list its output goes to, and the
    thread reading it."""
    script = pool.workdir / f"{name}.py"
    script.write_text(LESSEE)
    env = {**os.environ, "HOME": str(pool.workdir), "JMP_CLIENT_CONFIG_HOME": str(pool.workdir), "NO_COLOR": "1"}
    lessee = subprocess.Popen(
        [JMP, "shell", "--client-config", str(config), "--selector", f"board={BOARD}", "--duration", "30m",
         "--", sys.executable, str(script), GUEST_BANNER.decode(), *args],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output = []
    reader = threading.Thread(target=lambda: output.extend(lessee.stdout), daemon=True)
    reader.start()
    return lessee, output, reader


def end_lessee(lessee, output, reader, timeout):
    """Once the lessee's program has ended (within ``timeout`` seconds):
    `jmp shell` 0.9.0 then waits for the exporter's afterLease hook; it may
    miss the hook's failure (the exporter goes Offline at once) and wait five
    minutes: the user's Ctrl+C, which it offers, skips that wait and
    releases the lease (docs/lessee.md)."""
    wait_for(lambda: "lessee: released" in "".join(output) or lessee.poll() is not None, timeout=timeout,
             interval=0.2, message="the lessee's program to end")
    try:
        lessee.wait(timeout=15)
    except subprocess.TimeoutExpired:
        lessee.send_signal(signal.SIGINT)
        lessee.wait(timeout=60)
    reader.join(timeout=5)


def run_lessee(pool, config, name, *args, timeout=300):
    """``LESSEE`` under a real `jmp shell` that leases by label; its
    output once the program has ended and `jmp shell` released the lease
    (with the Ctrl+C docs/lessee.md tells users of, should it wait on)."""
    before = {lease["metadata"]["name"] for lease in pool.standin.leases()}
    lessee, output, reader = start_lessee(pool, config, name, *args)
    try:
        end_lessee(lessee, output, reader, timeout=timeout)
    finally:
        if lessee.poll() is None:
            lessee.kill()
    said = "".join(output)
    leases = [lease for lease in pool.standin.leases() if lease["metadata"]["name"] not in before]
    assert len(leases) == 1, (leases, said)
    wait_for(lambda: pool.standin.lease(leases[0]["metadata"]["name"])["status"].get("ended"), timeout=30,
             message=f"the lease of {name} ended; jmp shell said:\n{said}")
    return said


def test_in_place_reuse_gives_the_next_lessee_the_same_pod_with_a_fresh_vm(pool):
    """InPlaceReuse on the real node: a lessee flashes the guest's disk
    through the exporter and its lease ends; the operator resets the instance in its running Pod
    (the reset command in QEMU's container, through the API's exec, run by
    the operator's Pod under its own account): the same Exporter and Pod,
    QEMU's container never restarted, a fresh disk. The exporter serves
    again and the next lessee, on the same instance, finds no trace of the
    first one's image."""
    guest_class(pool, "guest")
    make_set(pool.custom, pool.namespace, board=BOARD, virtualTargetClassName="guest",
             minAvailableReplicas=1, maxReplicas=1, recycleStrategy="InPlaceReuse",
             template={"metadata": {"labels": {"board": BOARD, "virtual": "true"}}, "spec": {"drivers": DRIVERS}})
    config = make_client(pool, USER)
    name = wait_for(lambda: next(iter(pool.live_exporters("pool")), None), timeout=60, interval=0.1,
                    message="the set's Exporter")
    uid = pool.standin.wait_online(name, timeout=240)["metadata"]["uid"]
    pod_uid = pool.core.read_namespaced_pod(name, pool.namespace).metadata.uid
    qemu = pool.container_status(name, "qemu")

    first = run_lessee(pool, config, "first", "flash", MARK)
    # Flashed through the exporter, read back by the guest.
    assert "lessee: flashed" in first and "lessee: the disk holds the mark: 1" in first, first
    ended = time.monotonic()
    # The lease ended: the exporter stops serving, then, reset in place,
    # registers again on the fresh VM.
    try:
        wait_for(lambda: "not serving again" in pool.logs(name, "exporter"), timeout=60, interval=0.5,
                 message="the used exporter keeping out")
    except AssertionError as error:
        raise AssertionError(f"{error}; the exporter's log:\n{pool.logs(name, 'exporter')[-3000:]}\n"
                             f"the first lessee's jmp shell:\n{first}") from None

    def serving_again():
        exporter = pool.standin.exporter(name)
        return (condition_true(exporter, "Online") and exporter.get("spec", {}).get("enabled", True)
                and "reused-after" in str(exporter["metadata"].get("annotations")) and exporter)
    exporter = wait_for(serving_again, timeout=180, interval=0.5, message="the instance reset and serving again")
    print(f"lease ended -> reset in place and Online again in {time.monotonic() - ended:.1f} s")
    assert exporter["metadata"]["uid"] == uid
    pod = pool.core.read_namespaced_pod(name, pool.namespace)
    assert pod.metadata.uid == pod_uid
    again = pool.container_status(name, "qemu")
    assert again.container_id == qemu.container_id and again.restart_count == 0, again
    # The exporter's own container went on too: its guard waited for the reset.
    assert pool.container_status(name, "exporter").restart_count == 0
    assert "reset in place: a fresh disk and a fresh QEMU" in pool.logs(name, "qemu")

    second = run_lessee(pool, config, "second", "read", MARK)
    assert "lessee: the disk holds the mark: 0" in second, second
    leases = [lease for lease in pool.standin.leases() if (lease.get("status") or {}).get("exporterRef")]
    assert {lease["status"]["exporterRef"]["name"] for lease in leases} == {name}, leases
