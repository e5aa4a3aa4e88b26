"""The whole story, as a user and a lab admin live it, on the test bed.

A ``qemu-baremetal`` set at zero, a real ``jmp`` client, the controller
stand-in serving gRPC over TLS with a private CA (the ``standin`` fixture),
the real operator, and real ``jmp run`` exporters with real QEMU on the lab
hosts. The user asks for a target with ``jmp shell``; the lease waits
Pending (never Unsatisfiable) on the set's dormant Exporter; the pending
lease makes the operator bring up an instance on a lab host, whose exporter
registers over TLS with the config the operator wrote; the lease becomes
Ready; the command runs through the router on the exporter; the lease is
released; the instance is recycled and the set goes back to zero; the lease
stays as history. Then once more: the instance made for the second lease
reuses the first one's name under a new UID and still registers, and the
lessee drives it with the stock ``j`` commands through the exporter's virtual
QEMU driver: power off and on, the console showing the guest boot, a flash
refused while on, power off, flash of the root filesystem image
scripts/guest-image makes, a dump of the disk showing the image on it, power
on and the flashed image booting with the CPUs, memory, disk and machine of
the class, and a power cycle booting it again. QEMU stays the provisioner's
process throughout. (One set, operator and pair of instances for both
stories: each boot of an instance on a lab host costs tens of seconds.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time

from jumpstarter_standin import LEASE_ENDED_LABEL, condition_true, wait_for
from kubernetes import client
from lab_beds import BOARD, PROVISIONER, Lab
from labhosts import GUEST
from pool_helpers import SET_LABEL, make_class, make_set

JMP = os.path.join(os.path.dirname(sys.executable), "jmp")
USER = "e2e-user"
CPUS = 2
MEMORY_MIB = 160
DISK_MIB = 48
BOOT_TIMEOUT = 240

# What the lessee types, in order (docs/lessee.md walks through the same).
# `j qemu console pipe` runs in the background while the guest boots; the
# console shows output from the latest power on, so it may attach after it.
SCRIPT = r"""
set -eu
wait_for() {  # FILE PATTERN SECONDS
    tries=0
    until grep -q "$2" "$1" 2>/dev/null; do
        tries=$((tries + 1))
        if [ "$tries" -gt $(($3 * 10)) ]; then
            echo "no '$2' on the console within $3s:"; cat "$1" 2>/dev/null; return 1
        fi
        sleep 0.1
    done
}
boot() {  # LOG PATTERN: the console of the boot that just started, until PATTERN
    # (a PATTERN that ends where the awaited line ends: the console is cut
    # as soon as it matches)
    j qemu console pipe --no-input -o "$1" & console=$!
    wait_for "$1" "$2" BOOT_TIMEOUT
    kill "$console"; wait "$console" || true
}
echo "== help"
j --help
echo "== power off, power on"
j qemu power off
j qemu power on
boot boot-1.log "jumpstarter-guest ready"
echo "== flash while on"
if j qemu flasher flash rootfs.img > refused.log 2>&1; then echo "flash while on succeeded"; exit 1; fi
echo "== power off, flash"
j qemu power off
j qemu flasher flash rootfs.img
echo "== dump"
j qemu flasher dump disk.img
echo "== power on"
j qemu power on
boot boot-2.log 'booted from its disk:.* machine="[^"]*"'
echo "== power cycle"
j qemu power cycle --wait 1
boot boot-3.log 'booted from its disk:.* machine="[^"]*"'
echo "== done"
""".replace("BOOT_TIMEOUT", str(BOOT_TIMEOUT))


class LeaseLog:
    """Every state a Lease of the user went through, as seen by a watch-like poll."""

    def __init__(self, standin):
        self.standin = standin
        self.seen: dict[str, list[dict]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> LeaseLog:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _poll(self) -> None:
        while not self._stop.wait(0.2):
            for lease in self.standin.leases():
                status = lease.get("status") or {}
                states = self.seen.setdefault(lease["metadata"]["name"], [])
                summary = {"ended": bool(status.get("ended")),
                           "exporter": (status.get("exporterRef") or {}).get("name"),
                           "conditions": {c["type"]: (c["status"], c.get("reason"))
                                          for c in status.get("conditions") or ()}}
                if not states or states[-1] != summary:
                    states.append(summary)


def make_client(standin, name):
    standin.custom.create_namespaced_custom_object(
        "jumpstarter.dev", "v1alpha1", standin.namespace, "clients",
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Client", "metadata": {"name": name}, "spec": {}})


def jmp_shell(config, home, *command, cwd=None, timeout=420):
    """``jmp shell`` as the user runs it: waits for a lease, runs ``command``
    through the exporter, releases the lease on the way out."""
    env = {**os.environ, "HOME": str(home), "JMP_CLIENT_CONFIG_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run(
        [JMP, "shell", "--client-config", str(config), "--selector", f"board={BOARD}",
         "--duration", "30m", "--acquisition-timeout", "400", "--", *command],
        env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


def live_exporters(standin):
    return {e["metadata"]["name"]: e for e in standin.exporters(f"{SET_LABEL}=pool")
            if not e["metadata"].get("deletionTimestamp")}


def one_lease(standin, known):
    """The lease the user's ``jmp shell`` made, once it exists."""
    def created():
        new = [lease for lease in standin.leases() if lease["metadata"]["name"] not in known]
        return new[0]["metadata"]["name"] if new else None
    return wait_for(created, timeout=60, message="the user's lease")


def test_a_lessee_gets_a_lab_host_target_from_a_set_at_zero(api, namespace, standin, operator, lab_hosts,
                                                            tmp_path):
    custom = client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name="lab-ssh"), data=lab_hosts.secret_data()))
    parameters = lab_hosts.parameters({"lab3": 1})
    parameters["resources"] = {"cpu": CPUS, "memory": f"{MEMORY_MIB}Mi", "storage": f"{DISK_MIB}Mi"}
    parameters["machineType"] = "pc"
    make_class(custom, namespace, name="lab", parameters=parameters,
               provisioner=PROVISIONER, credentialsSecretRef={"name": "lab-ssh"})
    make_set(custom, namespace, board=BOARD, virtualTargetClassName="lab", minReplicas=0,
             minAvailableReplicas=0, maxReplicas=1, scaleDownCooldown="1s")
    lab = Lab(standin, lab_hosts)
    operator(provisioners=(PROVISIONER,))
    wait_for(lambda: list(live_exporters(standin)) == ["pool-dormant-0"], message="the set at zero")
    make_client(standin, USER)
    config = standin.grpc.write_client_config(tmp_path / "client.yaml", USER)
    # The second lease is the lessee's walk-through, run in its work directory.
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copyfile(GUEST / "rootfs.img", workdir / "rootfs.img")
    commands = (("j", "--help"), ("sh", "-c", SCRIPT))

    uids = []
    history = []
    results = []
    with LeaseLog(standin) as log:
        for attempt, command in enumerate(commands):
            started = time.monotonic()
            outcome = {}
            shell = threading.Thread(target=lambda outcome=outcome, command=command: outcome.update(
                result=jmp_shell(config, tmp_path, *command, cwd=workdir, timeout=1500)), daemon=True)
            shell.start()
            lease = one_lease(standin, set(history))
            history.append(lease)

            # The lease waits on the dormant Exporter and makes the set grow.
            def instance_up():
                exporters = live_exporters(standin)
                return "pool-0" in exporters and exporters["pool-0"]
            exporter = wait_for(instance_up, timeout=120, message="pool-0 made for the pending lease")
            uids.append(exporter["metadata"]["uid"])
            # Registered over TLS by its own jmp run on the lab host, with
            # the endpoint, CA and token the operator wrote.
            standin.wait_online("pool-0", timeout=240)
            assert lab.running("pool-0", "lab3")
            qemu_pid = lab_hosts.service_pid("lab3", namespace, "pool-0", "vm")
            assert qemu_pid
            assert standin.wait_assigned(lease, timeout=60) == "pool-0"

            instance = lab_hosts.instance_dir("lab3", namespace, "pool-0")
            if command[0] == "sh":
                # The flashed image boots in the provisioner's QEMU, the process
                # that ran before the lease (its serial log, its pid): the
                # driver starts none.
                wait_for(lambda serial=instance / "serial.log", shell=shell:
                         "booted from its disk" in read(serial) or not shell.is_alive(),
                         timeout=1200, message="the flashed image booting in the instance's QEMU")
                assert lab_hosts.service_pid("lab3", namespace, "pool-0", "vm") == qemu_pid
            shell.join(timeout=1500)
            result = outcome["result"]
            exporter_log = instance / "exporter" / "log"
            assert result.returncode == 0, (
                result.stdout[-4000:] + result.stderr[-4000:]
                + (exporter_log.read_text()[-4000:] if exporter_log.exists() else ""))
            # `j --help` is answered by the drivers the exporter serves.
            assert "qemu" in result.stdout, result.stdout
            results.append(result)
            print(f"lease {attempt}: jmp shell done after {time.monotonic() - started:.0f}s")

            # Released on the way out; ExitAndReplace recycles the instance and
            # the set, asked for nothing, goes back to zero.
            ended = wait_for(lambda lease=lease: (obj := standin.lease(lease))["status"].get("ended") and obj,
                             timeout=60, message=f"lease {lease} ended")
            assert LEASE_ENDED_LABEL in ended["metadata"]["labels"]
            assert not condition_true(ended, "Ready")
            wait_for(lambda: list(live_exporters(standin)) == ["pool-dormant-0"], timeout=120,
                     message="back at zero")
            wait_for(lambda: not lab_hosts.instance_dir("lab3", namespace, "pool-0").exists(), timeout=60,
                     message="the recycled instance removed from lab3")

    # The second instance reused the first one's name with a new identity.
    assert len(set(uids)) == 2
    # Both leases are history: ended, kept, and never Unsatisfiable or Invalid.
    assert sorted(lease["metadata"]["name"] for lease in standin.leases()) == sorted(history)
    for lease in history:
        states = log.seen[lease]
        assert all("Unsatisfiable" not in s["conditions"] and "Invalid" not in s["conditions"]
                   for s in states), states
        assert any(s["conditions"].get("Pending", ("", ""))[1] == "Offline" for s in states), states
        assert states[-1]["ended"]

    # The walk-through's steps all ran.
    assert "== done" in results[1].stdout, results[1].stdout
    # Power on booted the guest the class describes, from its (blank) disk's
    # absence of a root filesystem: the initramfs.
    assert "jumpstarter-guest ready" in (workdir / "boot-1.log").read_text()
    # Flashing needs the target off, and says so.
    assert "power it off first" in (workdir / "refused.log").read_text()
    # The flashed image booted, twice (power on, power cycle), on the
    # hardware the class's parameters give.
    for boot_log in ("boot-2.log", "boot-3.log"):
        text = (workdir / boot_log).read_text()
        line = text.split("booted from its disk:", 1)[1].splitlines()[0]
        facts = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))
        assert int(facts["cpus"]) == CPUS, facts
        assert 0.95 * MEMORY_MIB * 1024 < int(facts["memory_kib"]) <= MEMORY_MIB * 1024, facts
        assert int(facts["disk_bytes"]) == DISK_MIB * 2**20, facts
        assert "i440FX" in facts["machine"], facts
        # Each boot's console starts at that boot: nothing of the first one.
        assert "jumpstarter-guest ready" not in text
    # Once flashed, the disk held the image, then zeros up to the class's
    # storage size (dumped before the guest mounted it).
    image = (workdir / "rootfs.img").read_bytes()
    disk = (workdir / "disk.img").read_bytes()
    assert len(disk) == DISK_MIB * 2**20
    assert disk[:len(image)] == image
    assert disk[len(image):].count(0) == len(disk) - len(image)


def read(path):
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
