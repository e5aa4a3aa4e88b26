"""lab_bootstrap against real sshd hosts: what it installs works.

That a second run changes nothing is checked where the playbook runs again
with the inputs the session's hosts were bootstrapped with: molecule's
idempotence step (tests/baremetal/test_molecule_baremetal.py, ansible-playbook) and
the AWX job (tests/install/test_awx_job_templates.py, ansible-runner).
"""

import subprocess

PREFIX = "/opt/jumpstarter-exporter"


def ssh_as_operator(lab, host, command):
    return subprocess.run(
        ["ssh", "-i", str(lab.operator_key), "-o", f"UserKnownHostsFile={lab.known_hosts}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
         f"jumpstarter@{lab.hosts[host]}", command],
        capture_output=True, text=True, timeout=60,
    )


def test_operator_key_reaches_the_exporter_and_qemu(lab_hosts):
    for host in lab_hosts.hosts:
        result = ssh_as_operator(
            lab_hosts, host,
            f"id -un && {PREFIX}/venv/bin/jmp --help >/dev/null && "
            f"{PREFIX}/venv/bin/python -c 'import qemu.qmp, jumpstarter_driver_qemu' && "
            f"qemu-img --version >/dev/null && qemu-system-x86_64 --version >/dev/null && "
            f"test -x {PREFIX}/bin/jumpstarter-supervise && "
            "touch /var/lib/jumpstarter-virtual/instances/probe && echo ok",
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["jumpstarter", "ok"]
    # Each host has its own work dir, as separate servers would.
    for host in lab_hosts.hosts:
        assert (lab_hosts.work_dir(host) / "instances" / "probe").exists()
        (lab_hosts.work_dir(host) / "instances" / "probe").unlink()


def test_unknown_key_and_wrong_host_key_are_refused(lab_hosts, tmp_path):
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    refused = subprocess.run(
        ["ssh", "-i", str(stranger), "-o", f"UserKnownHostsFile={lab_hosts.known_hosts}",
         "-o", "BatchMode=yes", f"jumpstarter@{lab_hosts.hosts['lab1']}", "true"],
        capture_output=True, text=True, timeout=60)
    assert refused.returncode == 255 and "Permission denied" in refused.stderr
    empty_known_hosts = tmp_path / "known_hosts"
    empty_known_hosts.write_text("")
    unverified = subprocess.run(
        ["ssh", "-i", str(lab_hosts.operator_key), "-o", f"UserKnownHostsFile={empty_known_hosts}",
         "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
         f"jumpstarter@{lab_hosts.hosts['lab1']}", "true"],
        capture_output=True, text=True, timeout=60)
    assert unverified.returncode == 255 and "Host key verification failed" in unverified.stderr


def test_the_service_user_may_run_the_identity_helper_as_root_and_nothing_else(lab_hosts):
    result = ssh_as_operator(
        lab_hosts, "lab1",
        f"sudo -n {PREFIX}/bin/jumpstarter-instance claim ../../etc.x; echo helper=$?; "
        "sudo -n /bin/true 2>/dev/null; echo other=$?; "
        f"sudo -n {PREFIX}/venv/bin/python -c 1 2>/dev/null; echo python=$?; id -Gn")
    lines = result.stdout.split("\n")
    # The helper runs as root and refuses a name outside instances/.
    assert "jumpstarter-instance: not an instance name: '../../etc.x'" in result.stderr
    assert lines[:3] == ["helper=1", "other=1", "python=1"], result
    assert {"jve-i0", "jve-i15"} <= set(lines[3].split())
