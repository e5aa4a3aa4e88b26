"""The rendered instance Pod and config Secret, field by field."""

import json

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import merge_images

TOKEN = "s3cr3t-token-value"

EXPORTER_SET = {
    "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
    "kind": "ExporterSet",
    "metadata": {"name": "rpi4", "namespace": "lab", "uid": "set-uid"},
    "spec": {
        "template": {
            "metadata": {"labels": {"board": "rpi4"}},
            "spec": {
                "drivers": [
                    {"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"},
                    {"name": "console", "ref": "qemu.console"},
                ]
            },
        },
        "images": {"runtime": {"image": "registry.test/qemu-runtime:set"}},
    },
}
EXPORTER = {
    "apiVersion": "jumpstarter.dev/v1alpha1",
    "kind": "Exporter",
    "metadata": {"name": "rpi4-0", "namespace": "lab", "uid": "exporter-uid"},
    "status": {"endpoint": "grpc.test:443", "credential": {"name": "rpi4-0-exporter"}},
}
CLASS = {
    "metadata": {"name": "qemu", "namespace": "lab"},
    "spec": {
        "provisioner": "qemu.jumpstarter.dev",
        "images": {
            "exporter": {"image": "registry.test/jumpstarter:class", "imagePullPolicy": "Always"},
            "runtime": {"image": "registry.test/qemu-runtime:class", "imagePullPolicy": "Never"},
        },
        "scheduling": {
            "nodeSelector": {"kubernetes.io/arch": "amd64"},
            "tolerations": [{"key": "jumpstarter.dev/kvm", "operator": "Exists", "effect": "NoSchedule"}],
            "resources": {"limits": {"devices.kubevirt.io/kvm": "1"}},
        },
        "caBundleConfigMapRef": {"name": "corp-ca"},
    },
}
PARAMETERS = {
    "arch": "x86_64",
    "machineType": "q35",
    "kvm": True,
    "resources": {"cpu": 2, "memory": "1Gi", "storage": "4Gi"},
}


def render():
    images = merge_images(CLASS["spec"]["images"], EXPORTER_SET["spec"]["images"])
    return k8s_pod.instance_pod(
        EXPORTER_SET, CLASS, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, images, accel="kvm"
    )


def test_pod_is_owned_by_its_exporter_and_labelled_with_its_set():
    pod = render()
    meta = pod["metadata"]
    assert meta["name"] == "rpi4-0" and meta["namespace"] == "lab"
    assert meta["labels"]["virtualtarget.jumpstarter.dev/exporterset"] == "rpi4"
    assert meta["labels"]["virtualtarget.jumpstarter.dev/exporter"] == "rpi4-0"
    assert meta["ownerReferences"] == [
        {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter", "name": "rpi4-0",
         "uid": "exporter-uid", "controller": True, "blockOwnerDeletion": True}
    ]


def test_exporter_is_a_native_sidecar_after_the_disk_init():
    spec = render()["spec"]
    disk, exporter = spec["initContainers"]
    assert disk["name"] == "disk" and disk["command"][:2] == ["qemu-img", "create"]
    assert "restartPolicy" not in disk
    assert exporter["name"] == "exporter" and exporter["restartPolicy"] == "Always"
    assert exporter["command"][:2] == ["/bin/sh", "-c"]
    assert exporter["command"][-4:] == ["jmp", "run", "--exporter-config", "/etc/jumpstarter/exporters/rpi4-0.yaml"]
    mounts = {m["name"]: m for m in exporter["volumeMounts"]}
    assert mounts["run"]["mountPath"] == "/run/jumpstarter"
    assert mounts["config"] == {"name": "config", "mountPath": "/etc/jumpstarter/exporters", "readOnly": True}


def test_runtime_runs_qemu_on_the_shared_sockets():
    (runtime,) = render()["spec"]["containers"]
    # QEMU under its supervisor: `sh -c SCRIPT qemu` and QEMU's argv as "$@".
    assert runtime["command"][:2] == ["/bin/sh", "-c"] and runtime["command"][3] == "qemu"
    command = runtime["command"][4:]
    assert runtime["name"] == "qemu"
    assert command[0] == "qemu-system-x86_64"
    assert "q35,accel=kvm" in command
    assert command[command.index("-smp") + 1] == "2" and command[command.index("-m") + 1] == "1024"
    assert "unix:/run/jumpstarter/qmp.sock,server=on,wait=off" in command
    assert any("path=/run/jumpstarter/serial.sock" in arg for arg in command)
    assert runtime["volumeMounts"] == [{"name": "run", "mountPath": "/run/jumpstarter"}]


def test_images_come_from_the_class_with_set_overrides_per_image_spec():
    spec = render()["spec"]
    exporter = spec["initContainers"][1]
    (runtime,) = spec["containers"]
    assert (exporter["image"], exporter["imagePullPolicy"]) == ("registry.test/jumpstarter:class", "Always")
    # The set's runtime ImageSpec replaces the class's whole: its pull policy
    # ("Never") is not inherited.
    assert (runtime["image"], runtime["imagePullPolicy"]) == ("registry.test/qemu-runtime:set", "IfNotPresent")


def test_defaults_when_neither_class_nor_set_names_images():
    pod = k8s_pod.instance_pod(EXPORTER_SET, {"spec": {}}, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, {})
    assert pod["spec"]["containers"][0]["image"] == k8s_pod.DEFAULT_IMAGES["runtime"]["image"]
    assert pod["spec"]["initContainers"][-1]["image"] == k8s_pod.DEFAULT_IMAGES["exporter"]["image"]


def test_scheduling_and_device_resources_come_from_the_class():
    spec = render()["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert spec["tolerations"][0]["key"] == "jumpstarter.dev/kvm"
    assert spec["containers"][0]["resources"] == {"limits": {"devices.kubevirt.io/kvm": "1"}}


def test_no_privilege_and_no_secret_values_in_the_pod():
    pod = render()
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"]:
        context = container["securityContext"]
        assert context.get("privileged") is not True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert TOKEN not in json.dumps(pod)


def test_ca_bundle_is_mounted_for_the_exporter():
    spec = render()["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "ca-bundle")
    assert volume["configMap"] == {"name": "corp-ca", "items": [{"key": "ca-bundle.crt", "path": "ca-bundle.crt"}]}
    env = {e["name"]: e.get("value") for e in spec["initContainers"][1]["env"]}
    assert env["SSL_CERT_FILE"] == "/etc/jumpstarter/ca/ca-bundle.crt"


@pytest.mark.parametrize(("recycle", "exits"), [
    (None, True), ("ExitAndReplace", True), ("InPlaceReuse", False),
])
def test_config_secret_holds_the_exporter_config_and_token(recycle, exits):
    exporter_set = {**EXPORTER_SET, "spec": {**EXPORTER_SET["spec"], "recycleStrategy": recycle}}
    secret = k8s_pod.config_secret(exporter_set, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, TOKEN,
                                   "Q0EgYnVuZGxl")
    assert secret["metadata"]["name"] == "rpi4-0-config"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "exporter-uid"
    config = json.loads(secret["stringData"]["rpi4-0.yaml"])
    assert (config["apiVersion"], config["kind"]) == ("jumpstarter.dev/v1alpha1", "ExporterConfig")
    assert config["endpoint"] == "grpc.test:443" and config["token"] == TOKEN
    assert config["export"]["console"] == {"ref": "qemu.console"}
    # The template's Qemu driver becomes the driver of the runtime container's
    # QEMU, through the run directory both containers mount.
    qemu = config["export"]["qemu"]
    assert qemu["type"] == "jumpstarter_driver_virtual_qemu.driver.VirtualQemu"
    assert qemu["config"]["run_dir"] == k8s_pod.RUN_DIR
    pod = k8s_pod.instance_pod(exporter_set, CLASS, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, {})
    containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
    runtime = next(c for c in containers if c["name"] == "qemu")
    exporter = next(c for c in containers if c["name"] != "qemu" and "jmp" in " ".join(c.get("command", [])
                                                                                      + c.get("args", [])))
    for container in (runtime, exporter):
        assert {"name": "run", "mountPath": qemu["config"]["run_dir"]} in container["volumeMounts"]
    argv = runtime["command"]
    assert argv[argv.index("-qmp") + 1].startswith(f"unix:{k8s_pod.RUN_DIR}/{qemu['config']['qmp_socket']},")
    assert f"path={k8s_pod.RUN_DIR}/{qemu['config']['serial_socket']}," in argv[argv.index("-chardev") + 1]
    assert config["tls"] == {"ca": "Q0EgYnVuZGxl"}
    assert config["exitOnLeaseEnd"] is exits


@pytest.mark.parametrize("missing", ["images", "scheduling", "caBundleConfigMapRef"])
def test_optional_class_fields_may_be_absent(missing):
    vclass = {"spec": {k: v for k, v in CLASS["spec"].items() if k != missing}}
    pod = k8s_pod.instance_pod(EXPORTER_SET, vclass, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, {})
    assert pod["spec"]["containers"][0]["name"] == "qemu"


def test_corellium_pod_is_the_exporter_alone_with_the_token_by_reference():
    vclass = {"spec": {"provisioner": "corellium.jumpstarter.dev",
                       "credentialsSecretRef": {"name": "corellium-api"}}}
    parameters = {"api": {"host": "corellium.test", "projectId": "p-1"},
                  "device": {"flavor": "kronos", "os": "1.1.1"}}
    pod = k8s_pod.instance_pod(EXPORTER_SET, vclass, EXPORTER, "corellium.jumpstarter.dev", parameters, {})
    assert pod["spec"]["initContainers"] == []
    (exporter,) = pod["spec"]["containers"]
    env = {e["name"]: e for e in exporter["env"]}
    assert env["CORELLIUM_API_TOKEN"] == {
        "name": "CORELLIUM_API_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "corellium-api", "key": "token"}},
    }
    assert env["CORELLIUM_API_HOST"]["value"] == "corellium.test"


@pytest.mark.parametrize(("provisioner", "driver_type", "derived", "key"), [
    ("qemu.jumpstarter.dev", "jumpstarter_driver_qemu.driver.Qemu", "qemu", "run_dir"),
    ("corellium.jumpstarter.dev", "jumpstarter_driver_corellium.driver.Corellium", "corellium", "project_id"),
])
def test_config_secret_names_unnamed_drivers_and_lays_the_provisioner_over_them(
        provisioner, driver_type, derived, key):
    """JEP-0014 lists drivers by type alone: the provisioner's own settings
    reach such an entry under its derived name."""
    template = {"spec": {"drivers": [{"type": driver_type},
                                     {"type": "jumpstarter_driver_power.driver.QemuPower"}]}}
    exporter_set = {**EXPORTER_SET, "spec": {**EXPORTER_SET["spec"], "template": template}}
    parameters = {**PARAMETERS, "api": {"projectId": "p-1"}}
    secret = k8s_pod.config_secret(exporter_set, EXPORTER, provisioner, parameters, TOKEN, None)
    export = json.loads(secret["stringData"]["rpi4-0.yaml"])["export"]
    assert sorted(export) == sorted([derived, "qemupower"])
    assert key in export[derived]["config"]


ARM = {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
KVM = {"key": "jumpstarter.dev/kvm", "operator": "Exists"}
ZONE = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]}


def required(*terms):
    return {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(term)} for term in terms]}}


def pod_with_scheduling(scheduling):
    vclass = {"spec": {**CLASS["spec"], "scheduling": scheduling}}
    before = json.dumps(vclass, sort_keys=True)
    pod = k8s_pod.instance_pod(EXPORTER_SET, vclass, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, {})
    assert json.dumps(vclass, sort_keys=True) == before, "the class was changed"
    return pod["spec"]


def test_node_affinity_as_the_jep_writes_it_is_the_pods_node_affinity():
    """scheduling.nodeAffinity (JEP-0014's common fields) has the effect of
    scheduling.affinity.nodeAffinity: the Pods are rendered alike."""
    jep = pod_with_scheduling({"nodeAffinity": required([ARM])})
    nested = pod_with_scheduling({"affinity": {"nodeAffinity": required([ARM])}})
    assert jep["affinity"] == nested["affinity"] == {"nodeAffinity": required([ARM])}
    assert jep == nested


def test_both_node_affinities_must_hold_and_other_affinities_stay():
    anti = {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"board": "rpi4"}}, "topologyKey": "kubernetes.io/hostname"}]}
    preferred_a = {"weight": 10, "preference": {"matchExpressions": [KVM]}}
    preferred_b = {"weight": 5, "preference": {"matchExpressions": [ZONE]}}
    spec = pod_with_scheduling({
        "affinity": {"podAntiAffinity": anti, "nodeAffinity": {
            **required([ARM], [KVM]), "preferredDuringSchedulingIgnoredDuringExecution": [preferred_a]}},
        "nodeAffinity": {**required([ZONE]), "preferredDuringSchedulingIgnoredDuringExecution": [preferred_b]},
    })
    assert spec["affinity"]["podAntiAffinity"] == anti
    node = spec["affinity"]["nodeAffinity"]
    # (arm64 or kvm) and zone: each term of one crossed with each of the other.
    assert node["requiredDuringSchedulingIgnoredDuringExecution"] == required([ARM, ZONE], [KVM, ZONE])[
        "requiredDuringSchedulingIgnoredDuringExecution"]
    assert node["preferredDuringSchedulingIgnoredDuringExecution"] == [preferred_a, preferred_b]


def test_node_affinity_alone_on_either_side_is_taken_whole():
    assert k8s_pod.both_node_affinities(None, required([ARM])) == required([ARM])
    assert k8s_pod.both_node_affinities(required([ARM]), {}) == required([ARM])
    preferred = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [ZONE]}}]}
    assert k8s_pod.both_node_affinities(required([ARM]), preferred) == {**required([ARM]), **preferred}


def test_exporter_that_saw_its_lease_end_never_serves_again(tmp_path):
    """The exporter container's guard and the config's afterLease hook, run by
    a real /bin/sh with the run directory mapped to ``tmp_path``: before the
    hook has run the guard execs ``jmp run``; the hook notes the lease's end
    and fails (so ``jmp run`` exits and reports no Available); a container
    started again after that does not start ``jmp run``."""
    import socket
    import subprocess
    import time

    run_dir = str(tmp_path)

    def mapped(argv):
        return [arg.replace(k8s_pod.RUN_DIR, run_dir) for arg in argv]

    secret = k8s_pod.config_secret(EXPORTER_SET, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, TOKEN, "")
    hooks = json.loads(secret["stringData"]["rpi4-0.yaml"])["hooks"]
    assert set(hooks) == {"afterLease"} and hooks["afterLease"]["onFailure"] == "exit"
    exporter = next(c for c in render()["spec"]["initContainers"] if c["name"] == "exporter")
    # `jmp` stands in as `echo`: what the guard would exec.
    command = mapped(exporter["command"][:-4]) + ["echo", "served", *exporter["command"][-3:]]
    # Until QEMU listens on its QMP socket the guard waits, registering nothing.
    waiting = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        assert waiting.poll() is None
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(tmp_path / "qmp.sock"))
        first_out, _ = waiting.communicate(timeout=10)
        listener.close()
    finally:
        waiting.kill()
    assert waiting.returncode == 0 and first_out.startswith("served run"), first_out
    first = subprocess.run(command, capture_output=True, text=True, timeout=10)
    assert first.returncode == 0 and first.stdout.startswith("served run"), first

    hook = subprocess.run(["/bin/sh", "-c", mapped([hooks["afterLease"]["script"]])[0]], timeout=10)
    assert hook.returncode != 0
    assert (tmp_path / "lease-ended").exists()

    log = tmp_path / "again.log"
    with open(log, "w") as out:
        again = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while "not serving again" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "not serving again" in log.read_text() and again.poll() is None
        again.terminate()
        assert again.wait(timeout=10) == 0
        assert "served" not in log.read_text()
    finally:
        again.kill()


def test_in_place_reuse_ends_the_exporter_only_where_a_fresh_pod_resets_it():
    """InPlaceReuse: a QEMU instance is reset by a fresh Pod, so its exporter
    ends with its lease too; a Corellium one keeps its Pod and exporter
    (its device is made anew behind the same name), so it serves again."""
    exporter_set = {**EXPORTER_SET, "spec": {**EXPORTER_SET["spec"], "recycleStrategy": "InPlaceReuse"}}
    qemu = k8s_pod.config_secret(exporter_set, EXPORTER, "qemu.jumpstarter.dev", PARAMETERS, TOKEN, "")
    assert json.loads(qemu["stringData"]["rpi4-0.yaml"])["hooks"]["afterLease"]["onFailure"] == "exit"
    corellium = k8s_pod.config_secret(exporter_set, EXPORTER, "corellium.jumpstarter.dev", {}, TOKEN, "")
    assert "hooks" not in json.loads(corellium["stringData"]["rpi4-0.yaml"])


def test_a_qemu_that_ends_ends_its_pod():
    """QEMU is not restarted on the used disk: the Pod ends and the operator
    replaces it; the exporter sidecar alone restarts, and Corellium's
    exporter (its only container) too."""
    spec = render()["spec"]
    assert spec["restartPolicy"] == "Never"
    assert next(c for c in spec["initContainers"] if c["name"] == "exporter")["restartPolicy"] == "Always"
    corellium = k8s_pod.instance_pod(EXPORTER_SET, CLASS, EXPORTER, "corellium.jumpstarter.dev", {}, {})
    assert corellium["spec"]["restartPolicy"] == "Always"


def _mapped(argv, run_dir):
    return [arg.replace(k8s_pod.RUN_DIR, run_dir) for arg in argv]


# What stands in for QEMU under the supervisor: it notes its start and the
# disk it found, listens on its QMP socket and runs until SIGTERM, or ends
# with code 7 once the file "crash" appears.
FAKE_QEMU = """
import os, signal, socket, sys, time
run = sys.argv[1]
with open(os.path.join(run, "starts"), "a") as starts:
    starts.write(open(os.path.join(run, "disk.qcow2")).read().strip() + "\\n")
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(run, "qmp.sock"))
listener.listen()
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while not os.path.exists(os.path.join(run, "crash")):
    time.sleep(0.05)
sys.exit(7)
"""


def _supervised(tmp_path):
    """QEMU's container command as rendered, run by a real /bin/sh with the
    run directory mapped to ``tmp_path``: the fake QEMU for QEMU and a
    fresh-disk writer for ``qemu-img``; and the reset command, aimed at that
    supervisor instead of a container's PID 1."""
    import subprocess
    import sys

    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners

    run_dir = str(tmp_path)
    (runtime,) = render()["spec"]["containers"]
    script = _mapped([runtime["command"][2]], run_dir)[0]
    disk = next(c for c in render()["spec"]["initContainers"] if c["name"] == "disk")["command"]
    import shlex

    assert shlex.join(_mapped(disk, run_dir)) in script
    # The rendered fresh-disk step (qemu-img create ...) writes "fresh" instead.
    script = script.replace(shlex.join(_mapped(disk, run_dir)), f"sh -c 'echo fresh > {run_dir}/disk.qcow2'")
    (tmp_path / "disk.qcow2").write_text("first\n")
    supervisor = subprocess.Popen(["/bin/sh", "-c", script, "qemu", sys.executable, "-c", FAKE_QEMU, run_dir])
    container, command = provisioners.get("qemu.jumpstarter.dev").reset_in_pod
    assert container == "qemu" and command[:2] == ["/bin/sh", "-c"]
    reset = _mapped(command, run_dir)
    assert "kill -USR1 1 " in reset[2]
    reset[2] = reset[2].replace("kill -USR1 1 ", f"kill -USR1 {supervisor.pid} ")
    return supervisor, reset


def _wait_for(condition, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_reset_in_the_pod_gives_a_fresh_disk_and_qemu_and_lets_the_exporter_serve(tmp_path):
    """InPlaceReuse in the running Pod, with a real /bin/sh: once the
    exporter has ended with its lease (the marker), the reset command asks
    QEMU's supervisor, which stops QEMU, writes a fresh disk and starts QEMU
    again; the command returns once the new QMP socket listens and then
    removes the marker. The supervisor and its container stay up."""
    import subprocess
    import time

    supervisor, reset = _supervised(tmp_path)
    try:
        _wait_for(lambda: (tmp_path / "qmp.sock").exists())
        (tmp_path / "disk.qcow2").write_text("used by the first lessee\n")
        (tmp_path / "lease-ended").touch()
        # The exporter is still ending its lease: the reset waits for its guard.
        waiting = subprocess.Popen(reset, stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        assert waiting.poll() is None and not (tmp_path / "reset-requested").exists()
        assert (tmp_path / "starts").read_text().split() == ["first"]
        (tmp_path / "exporter-stopped").touch()
        out, _ = waiting.communicate(timeout=30)
        done = subprocess.CompletedProcess(reset, waiting.returncode, out, "")
        assert done.returncode == 0 and done.stdout.strip().endswith("reset"), done
        assert not (tmp_path / "lease-ended").exists() and not (tmp_path / "reset-requested").exists()
        assert (tmp_path / "starts").read_text().split() == ["first", "fresh"]
        assert (tmp_path / "qmp.sock").exists() and supervisor.poll() is None
    finally:
        supervisor.terminate()
    assert supervisor.wait(timeout=10) == 0


def test_reset_in_the_pod_refuses_an_instance_whose_exporter_still_serves(tmp_path):
    """No marker, no reset: an exporter that has not ended with a lease may
    be driving the VM; the command says so (code 3) and QEMU is untouched."""
    import subprocess

    supervisor, reset = _supervised(tmp_path)
    try:
        _wait_for(lambda: (tmp_path / "qmp.sock").exists())
        done = subprocess.run(reset, capture_output=True, text=True, timeout=30)
        assert done.returncode == 3 and "no ended lease" in done.stdout, done
        assert (tmp_path / "starts").read_text().split() == ["first"]
        assert not (tmp_path / "reset-requested").exists()
    finally:
        supervisor.terminate()
        supervisor.wait(timeout=10)


def test_a_qemu_that_ends_unasked_ends_its_container_with_its_code(tmp_path):
    """QEMU ending without a reset asked (a crash) ends the supervisor, and so
    the container and (restartPolicy Never) the Pod, with QEMU's code: it is
    never started again on the used disk."""
    supervisor, _reset = _supervised(tmp_path)
    try:
        _wait_for(lambda: (tmp_path / "qmp.sock").exists())
        (tmp_path / "crash").touch()
        assert supervisor.wait(timeout=10) == 7
        assert (tmp_path / "starts").read_text().split() == ["first"]
    finally:
        supervisor.kill()


def test_the_exporter_serves_again_once_the_reset_removes_the_marker(tmp_path):
    """The exporter's guard, with a real /bin/sh: ``jmp run`` (here `echo`)
    ends with the lease and the marker is there, so the guard waits; once
    the reset removes the marker, it starts ``jmp run`` again."""
    import socket
    import subprocess

    run_dir = str(tmp_path)
    exporter = next(c for c in render()["spec"]["initContainers"] if c["name"] == "exporter")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(tmp_path / "qmp.sock"))
    # `jmp run` stands in as a shell that notes each start and, the first
    # time, ends as a lease's end does: the hook's marker, exit code 1.
    starts = tmp_path / "starts"
    jmp = ["/bin/sh", "-c", f'echo run >> {starts}; [ -e {starts}.1 ] && exit 0; '
                            f'touch {starts}.1 {run_dir}/lease-ended; exit 1', "jmp"]
    log = tmp_path / "guard.log"
    with open(log, "w") as out:
        guard = subprocess.Popen(_mapped(exporter["command"][:-4], run_dir) + jmp, stdout=out,
                                 stderr=subprocess.STDOUT)
    try:
        _wait_for(lambda: "not serving again" in log.read_text())
        # No `jmp run` left: the guard says so, for the reset to go ahead.
        _wait_for(lambda: (tmp_path / "exporter-stopped").exists())
        assert starts.read_text().split() == ["run"] and guard.poll() is None
        (tmp_path / "lease-ended").unlink()
        assert guard.wait(timeout=10) == 0
        assert starts.read_text().split() == ["run", "run"]
        assert not (tmp_path / "exporter-stopped").exists()
    finally:
        guard.kill()
        listener.close()
