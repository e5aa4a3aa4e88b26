"""An operator whose leader election Lease another holder takes stops at
once (operator/exporterset_operator/election.py): it exits, so it writes
nothing more and starts no backend run (its fork server ends with it); it
does not go on for the renew deadline beside the new leader.

The renew deadline is far longer than the test waits for the exit: without
``on_taken`` the operator would lead on for minutes, so the wait fails
whatever the machine's speed, and no duration is asserted."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path

from jumpstarter_standin import wait_for
from kubernetes import client
from operator_process import watches_file
from pool_helpers import make_class, make_set

RENEW_DEADLINE = 300
LEASE_DURATION = 330
# How long the test waits for the exit, which comes at the operator's next
# read of the Lease (the retry period, 1 s): a tenth of the renew deadline
# an election alone would wait out before giving up.
EXIT_WAIT = 30

HOLD_PLAYBOOK = """\
- name: A backend run that holds until the test releases it
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Say it started
      ansible.builtin.file:
        path: {started}
        state: touch
    - name: Wait for the release file
      ansible.builtin.wait_for:
        path: {release}
        timeout: 120
"""


def processes_with(text: str) -> list[int]:
    """The processes whose environment holds ``text``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as environ:
                if text.encode() in environ.read() + b"\0":
                    found.append(int(entry.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def comm(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


def test_an_operator_whose_lease_is_taken_stops_writing_and_starting_backend_runs(
        api, namespace, standin, operator, tmp_path):
    started, release = tmp_path / "started", tmp_path / "release"
    playbook = tmp_path / "hold.yml"
    playbook.write_text(HOLD_PLAYBOOK.format(started=started, release=release))
    watches = watches_file(tmp_path, lambda entry: entry.update(playbook=str(playbook)))
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1)
    proc = operator("--watches-file", str(watches), "--leader-elect", "--leader-election-id", "pool-operator",
                    "--leader-election-namespace", namespace,
                    "--leader-election-lease-duration", f"{LEASE_DURATION}s",
                    "--leader-election-renew-deadline", f"{RENEW_DEADLINE}s",
                    "--leader-election-retry-period", "1s")
    wait_for(proc.leads, message="the operator leads")
    # A backend run of the leader is at work (the Exporter got its credential).
    wait_for(started.exists, timeout=90, message="the backend run started")
    run_env = f"KUBECONFIG={proc.kubeconfig}\0"
    assert any(comm(pid) == "jve-forkserver" for pid in processes_with(run_env)), "no fork server of the operator"

    coordination = client.CoordinationV1Api(api)

    def take():
        """Write the Lease as another holder, on the leader's last renewal."""
        lease = coordination.read_namespaced_lease("pool-operator", namespace)
        assert lease.spec.holder_identity.endswith(f"_{proc.proc.pid}")
        lease.spec.holder_identity = "another-operator_1"
        lease.spec.acquire_time = lease.spec.renew_time = datetime.now(UTC)
        lease.spec.lease_duration_seconds = 30
        try:
            coordination.replace_namespaced_lease("pool-operator", namespace, lease)
        except client.ApiException as exc:
            if exc.status != 409:  # renewed between our read and our write: again
                raise
            return None
        return time.monotonic()

    taken = wait_for(take, timeout=10, interval=0.05, message="the Lease written as another holder")

    wait_for(lambda: proc.proc.poll() is not None, timeout=EXIT_WAIT, interval=0.1,
             message=f"the operator stops at its next read of the Lease (renew deadline {RENEW_DEADLINE}s)")
    print(f"stopped {time.monotonic() - taken:.1f}s after the Lease was taken (renew deadline {RENEW_DEADLINE}s)")
    assert proc.proc.returncode == 1, proc.log_tail()
    assert "the leader election Lease is held by another" in proc.log_path.read_text()
    # Its fork server goes with it: no run of it starts any more.
    wait_for(lambda: not [pid for pid in processes_with(run_env) if comm(pid) == "jve-forkserver"],
             timeout=10, interval=0.1, message="the operator's fork server ends")
    assert coordination.read_namespaced_lease("pool-operator", namespace).spec.holder_identity == "another-operator_1"
    # Nor any process of its held run: the run, its task worker (a session
    # of its own) and the module waiting for the release file.
    wait_for(lambda: not [pid for pid in processes_with(run_env) if comm(pid) != "ssh"],
             timeout=10, interval=0.1, message="no process of the operator's runs left")
    release.touch()


def test_the_lock_reports_a_lease_taken_from_it_once(api, namespace):
    """ResilientLeaseLock on the real API: ``on_taken`` is called when the
    holder reads the Lease held by another identity, once; a lock that never
    held it, or reads itself or no holder, is told nothing."""
    from exporterset_operator.election import ResilientLeaseLock
    from kubernetes.leaderelection.leaderelectionrecord import LeaderElectionRecord

    client.Configuration.set_default(api.configuration)
    coordination = client.CoordinationV1Api(api)
    now = str(datetime.now())
    told = {"ours": 0, "standby": 0}
    ours = ResilientLeaseLock("taken", namespace, "ours", on_taken=lambda: told.__setitem__("ours", told["ours"] + 1))
    standby = ResilientLeaseLock("taken", namespace, "standby",
                                 on_taken=lambda: told.__setitem__("standby", told["standby"] + 1))
    assert ours.create("taken", namespace, LeaderElectionRecord("ours", "15", now, now))
    assert ours.get("taken", namespace)[1].holder_identity == "ours"
    lease = coordination.read_namespaced_lease("taken", namespace)
    lease.spec.holder_identity = None
    coordination.replace_namespaced_lease("taken", namespace, lease)
    assert ours.get("taken", namespace)[0] and told == {"ours": 0, "standby": 0}

    lease = coordination.read_namespaced_lease("taken", namespace)
    lease.spec.holder_identity = "theirs"
    coordination.replace_namespaced_lease("taken", namespace, lease)
    for _ in range(2):
        assert ours.get("taken", namespace)[1].holder_identity == "theirs"
        assert standby.get("taken", namespace)[1].holder_identity == "theirs"
    assert told == {"ours": 1, "standby": 0}
