"""One identity per instance on a lab host, and the host's lock of a set.

Each instance's QEMU and exporter run as a user and group of their own
(roles/lab_bootstrap/files/jumpstarter-instance, run by the service user
through sudo), so a guest that names another instance's file (a qcow2
backing file, a kernel path) gets nothing; one run at a time acts on a
set's instances (baremetal_instances' lock).
"""

from __future__ import annotations

import fcntl
import importlib.machinery
import importlib.util
import json
import os
import pwd
import subprocess
import sys
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jumpstarter_standin import wait_for
from labhosts import ROOT, instance_processes

HELPER = ROOT / "roles" / "lab_bootstrap" / "files" / "jumpstarter-instance"
MODULE = ROOT / "plugins" / "modules" / "baremetal_instances.py"
PREFIX = "/opt/jumpstarter-exporter"
WORK = "/var/lib/jumpstarter-virtual"


def _helper():
    loader = importlib.machinery.SourceFileLoader("jumpstarter_instance", str(HELPER))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


helper = _helper()

label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
subdomain = st.lists(label, min_size=1, max_size=4).map(".".join).filter(lambda name: len(name) <= 253)


@given(namespace=label, exporter=subdomain)
def test_every_instance_name_of_a_namespace_and_an_exporter_is_accepted(namespace, exporter):
    name = f"{namespace}.{exporter}"
    assert helper.check_instance(name) == name


@given(st.text(max_size=80))
def test_a_name_that_could_leave_the_instances_directory_is_refused(name):
    """Whatever the service user passes, the helper acts on one entry of
    instances/ and nothing else."""
    try:
        helper.check_instance(name)
    except helper.Refused:
        return
    assert "/" not in name and "\0" not in name and name not in (".", "..")
    assert not name.startswith(".") and "." in name and name == name.lower()


@pytest.mark.parametrize("name", ["../x.y", "a.b/../../etc", "a/b.c", ".a.b", "a.", "..", "a.b\n", "A.b"])
def test_traversals_are_refused(name):
    with pytest.raises(helper.Refused):
        helper.check_instance(name)


@given(st.lists(st.sampled_from([f"jve-i{n}" for n in range(6)]), unique=True, min_size=1),
       st.sets(st.sampled_from([f"jve-i{n}" for n in range(8)])))
def test_a_claim_takes_the_first_identity_no_instance_has(slots, used):
    chosen = helper.free_slot(slots, used)
    if chosen is None:
        assert set(slots) <= used
    else:
        assert chosen not in used
        assert all(slot in used for slot in slots[:slots.index(chosen)])


def test_services_run_without_other_groups_privileges_or_environment():
    argv = helper.setpriv_argv(1001, 1002, [1002, 900], "/w/i", ["/w/i/vm/run"])
    assert argv[:3] == ["/usr/bin/setpriv", "--reuid=1001", "--regid=1002"]
    assert "--groups=1002,900" in argv and "--no-new-privs" in argv
    assert "--inh-caps=-all" in argv and "--bounding-set=-all" in argv
    assert argv[argv.index("--") + 1:argv.index("--") + 3] == ["/usr/bin/env", "-i"]
    assert argv[-1] == "/w/i/vm/run"


# -- the host's lock of a set --------------------------------------------------

def _module(tmp_path, timeout, exporterset="pool"):
    args = tmp_path / f"args-{exporterset}-{time.monotonic_ns()}.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
        "namespace": "team-a", "exporterset": exporterset, "work_dir": str(tmp_path / "work"),
        "prefix": str(tmp_path / "prefix"), "lock_timeout": timeout, "keep": []}}))
    return subprocess.Popen([sys.executable, str(MODULE), str(args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _holds(pid, path):
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_a_second_run_on_the_same_set_waits_for_the_first_or_fails_naming_it(tmp_path):
    lock_path = tmp_path / "work" / "locks" / "team-a.pool.lock"
    lock_path.parent.mkdir(parents=True)
    with open(lock_path, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        refused = _module(tmp_path, 0.5)
        out, err = refused.communicate(timeout=60)
        result = json.loads(out)
        assert result.get("failed"), out + err
        assert "team-a/pool" in result["msg"] and str(lock_path) in result["msg"]
        # Another set of the namespace has a lock of its own.
        other = _module(tmp_path, 0.5, exporterset="other")
        out, err = other.communicate(timeout=60)
        assert not json.loads(out).get("failed"), out + err
        waiting = _module(tmp_path, 60)
        wait_for(lambda: _holds(waiting.pid, lock_path), timeout=30, interval=0.05,
                 message="the second run opened the set's lock")
        assert waiting.poll() is None
    out, err = waiting.communicate(timeout=60)
    assert not json.loads(out).get("failed"), out + err


# -- two tenants' instances on one lab host ------------------------------------

def _config(namespace, name):
    return {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "ExporterConfig",
            "metadata": {"namespace": namespace, "name": name},
            "endpoint": "10.213.0.1:9", "tls": {"insecure": True}, "export": {}}


def _as(lab, uid, gid, groups, *argv):
    """``argv`` on lab1 (its mount namespace) as uid:gid with ``groups``."""
    sshd = (lab.directory / "lab1" / "sshd.pid").read_text().strip()
    return subprocess.run(["nsenter", "-t", sshd, "-m", "setpriv", f"--reuid={uid}", f"--regid={gid}",
                           "--groups=" + ",".join(map(str, groups)), *argv],
                          capture_output=True, text=True, timeout=30)


def test_instances_of_two_tenants_run_as_identities_that_reach_nothing_of_each_other(lab_hosts, tmp_path):
    lab = lab_hosts
    tenants = {"jve-ida": "a-0", "jve-idb": "b-0"}
    parameters = lab.parameters({"lab1": 2})
    login = {"ansible_user": "jumpstarter", "ansible_ssh_private_key_file": str(lab.operator_key),
             "ansible_python_interpreter": f"{PREFIX}/venv/bin/python"}

    def run(entry):
        playbook = tmp_path / "instances.yml"
        playbook.write_text(json.dumps([{"hosts": "lab1", "gather_facts": False, "tasks": [
            {"jumpstarter.virtual_exporters.baremetal_instances": {
                "namespace": namespace, "exporterset": "pool", "parameters": parameters,
                "configs": {name: _config(namespace, name)}, "tokens": {name: f"token-of-{namespace}"},
                "keep": [name], **entry.get(namespace, {})},
             "register": f"r_{namespace.replace('-', '_')}"} for namespace, name in tenants.items()]}]))
        return lab.playbook(playbook, login)

    run({namespace: {"present": [name]} for namespace, name in tenants.items()})
    for namespace, name in tenants.items():
        wait_for(lambda n=namespace, e=name: lab.instance_up("lab1", n, e), timeout=90, interval=0.2,
                 message=f"{namespace}.{name} up")

    service = pwd.getpwnam("jumpstarter")
    identities = {}
    for namespace, name in tenants.items():
        directory = lab.instance_dir("lab1", namespace, name)
        uid = os.stat(f"/proc/{(directory / 'vm' / 'pid').read_text().strip()}").st_uid
        assert uid not in (0, service.pw_uid)
        # QEMU, both supervisors, the exporter and the log keepers: all the instance's own.
        owners = {os.stat(f"/proc/{pid}").st_uid for _host, pid in instance_processes([directory.name])}
        assert owners == {uid}
        token = directory / "exporter.yaml"
        assert (token.stat().st_uid, oct(token.stat().st_mode & 0o777)) == (uid, "0o400")
        identities[namespace] = (pwd.getpwuid(uid), directory)
    assert len({user.pw_uid for user, _ in identities.values()}) == 2

    instances_gid = os.stat(lab.work_dir("lab1") / "images").st_gid
    on_host = {namespace: f"{WORK}/instances/{directory.name}" for namespace, (_, directory) in identities.items()}
    for namespace, (user, _directory) in identities.items():
        groups = [user.pw_gid, instances_gid]
        own = _as(lab, user.pw_uid, user.pw_gid, groups, "cat", f"{on_host[namespace]}/exporter.yaml")
        assert own.returncode == 0 and f"token-of-{namespace}" in own.stdout, own.stderr
        other = next(n for n in tenants if n != namespace)
        for path in ("exporter.yaml", "serial.log", ""):
            read = _as(lab, user.pw_uid, user.pw_gid, groups, "cat" if path else "ls",
                       f"{on_host[other]}/{path}")
            assert read.returncode != 0 and "Permission denied" in read.stderr, (path, read)
    # The service user writes the token but reads it no more.
    manager = _as(lab, service.pw_uid, service.pw_gid, os.getgrouplist("jumpstarter", service.pw_gid),
                  "cat", f"{on_host['jve-ida']}/exporter.yaml")
    assert manager.returncode != 0 and "Permission denied" in manager.stderr

    # The service user still runs the pool: QMP, a reset, a second actor on the
    # set's lock, a removal that leaves nothing of the identity behind.
    directory_a = identities["jve-ida"][1]
    qemu_before = (directory_a / "vm" / "pid").read_text()
    report = run({"jve-ida": {"reset": [tenants["jve-ida"]]}})
    assert (directory_a / "vm" / "pid").read_text() != qemu_before
    wait_for(lambda: lab.instance_up("lab1", "jve-ida", tenants["jve-ida"]), timeout=60, interval=0.2,
             message="the reset instance up")
    with open(lab.work_dir("lab1") / "locks" / "jve-ida.pool.lock") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        playbook = tmp_path / "locked.yml"
        playbook.write_text(json.dumps([{"hosts": "lab1", "gather_facts": False, "tasks": [
            {"jumpstarter.virtual_exporters.baremetal_instances": {
                "namespace": "jve-ida", "exporterset": "pool", "lock_timeout": 1}}]}]))
        with pytest.raises(AssertionError, match="jve-ida/pool"):
            lab.playbook(playbook, login)
    report = run({namespace: {"remove": [name], "keep": []} for namespace, name in tenants.items()})
    assert report["stats"]["lab1"]["failures"] == 0
    for user, directory in identities.values():
        assert not directory.exists()
        assert not instance_processes([directory.name])
        sshd_mnt = os.stat(f"/proc/{(lab.directory / 'lab1' / 'sshd.pid').read_text().strip()}/ns/mnt").st_ino
        assert not [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc")))
                    if _uid_in(pid, user.pw_uid, sshd_mnt)]


def _uid_in(pid, uid, mount_ns):
    try:
        return os.stat(f"/proc/{pid}").st_uid == uid and os.stat(f"/proc/{pid}/ns/mnt").st_ino == mount_ns
    except OSError:
        return False
