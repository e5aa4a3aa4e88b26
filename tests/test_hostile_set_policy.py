"""A hostile tenant's ExporterSets against the real operator on the test bed:
each asks for something only the class may decide (a driver that would reach
the host, a path, a binary, a work directory, more resources or slots than
the class gives), and each is refused by the class's policy
(pool/set_overrides.py): the set is Degraded/NotAllowedByClass naming the
field, a Warning Event names it too, and nothing is made for it (no Exporter
but the dormant one, no Pod, no host chosen).

One operator serves every set of the table at once, beside a set that asks
for nothing out of bounds and is served (so the bed makes what it is asked
for, and the refusals are the policy's). The operator runs the qemu and the
qemu-baremetal provisioners; the lab class's one host is a closed port on
this machine, so a probe of it is refused at once and nothing could run there.
"""

from __future__ import annotations

import base64
import subprocess

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from jumpstarter_standin import wait_for
from jumpstarter_standin.pytest_plugin import serve_namespace
from kubernetes import client
from operator_process import OperatorProcess
from pool_helpers import GROUP, condition, get_set, make_class, make_set, settle_pool
from testbed import namespace_name

REASON = "NotAllowedByClass"
QEMU = "jumpstarter_driver_qemu.driver.Qemu"
UNIX_NETWORK = "jumpstarter_driver_network.driver.UnixNetwork"
LAB_PROVISIONER = constants.PROVISIONER_QEMU_BAREMETAL
# The Pod class names ceilings (a qemu.jumpstarter.dev set has none
# otherwise); the lab class's own values are its ceilings.
POD_CLASS = {"arch": "x86_64", "machineType": "q35",
             "resources": {"cpu": 1, "memory": "256Mi", "storage": "64Mi"}}
POD_CEILINGS = "max.resources.memory=512Mi; max.resources.cpu=2; max.resources.storage=128Mi"
LAB_CLASS = {"arch": "x86_64", "resources": {"cpu": 1, "memory": "128Mi", "storage": "64Mi"},
             "hosts": [{"name": "lab1", "address": "127.0.0.1", "port": 1, "slots": 2}],
             "runtime": {"binary": "/usr/bin/qemu-system-x86_64"}}


def drivers(*entries):
    # The labels the set's selector (board: <its name>) selects, filled in per set.
    return {"template": {"metadata": {"labels": {}}, "spec": {"drivers": [{"name": "qemu", "type": QEMU}, *entries]}}}


# (id, class, spec of the set beyond the usual, the field the refusal names)
ATTACKS = [
    ("unix-network-to-qmp", "pod",
     drivers({"name": "qmp", "type": UNIX_NETWORK, "config": {"path": "/run/qemu/qmp.sock"}}),
     "spec.template.spec.drivers[1].type"),
    ("unix-network-on-a-lab-host", "lab",
     drivers({"name": "qmp", "type": UNIX_NETWORK,
              "config": {"path": "/var/lib/jumpstarter-virtual/instances/x/qmp.sock"}}),
     "spec.template.spec.drivers[1].type"),
    ("disk-path", "pod", {"parameters": {"disk": {"path": "/etc/shadow"}}},
     "spec.parameters.disk.path"),
    ("disk-format-raw", "lab", {"parameters": {"disk": {"format": "raw"}}},
     "spec.parameters.disk.format"),
    ("kernel-path", "pod", {"parameters": {"kernel": {"path": "/root/.ssh/id_ed25519"}}},
     "spec.parameters.kernel.path"),
    ("initrd-path", "lab", {"parameters": {"initrd": {"path": "/etc/ssh/ssh_host_ed25519_key"}}},
     "spec.parameters.initrd.path"),
    ("firmware-path", "pod", {"parameters": {"firmware": {"path": "/proc/self/environ"}}},
     "spec.parameters.firmware.path"),
    ("runtime-binary", "lab", {"parameters": {"runtime": {"binary": "/bin/sh"}}},
     "spec.parameters.runtime.binary"),
    ("runtime-binary-in-a-pod", "pod", {"parameters": {"runtime": {"binary": "/bin/sh"}}},
     "spec.parameters.runtime.binary"),
    ("work-dir", "lab", {"parameters": {"workDir": "/tmp/tenant"}}, "spec.parameters.workDir"),
    ("slots-raised", "lab",
     {"parameters": {"hosts": [{"name": "lab1", "address": "127.0.0.1", "port": 1, "slots": 64}]}},
     "spec.parameters.hosts[0].slots"),
    ("memory-raised", "lab", {"parameters": {"resources": {"memory": "64Gi"}}},
     "spec.parameters.resources.memory"),
    ("cpu-raised", "lab", {"parameters": {"resources": {"cpu": 32}}},
     "spec.parameters.resources.cpu"),
    ("storage-raised", "lab", {"parameters": {"resources": {"storage": "2Ti"}}},
     "spec.parameters.resources.storage"),
    ("memory-above-the-named-ceiling", "pod", {"parameters": {"resources": {"memory": "1Gi"}}},
     "spec.parameters.resources.memory"),
]
CLASS_NAMES = {"pod": "pods", "lab": "lab"}


def _ssh_key(directory):
    """A key pair for the lab class's Secret (the class is trusted; it never gets used)."""
    key = directory / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return {"ssh-privatekey": base64.b64encode(key.read_bytes()).decode(),
            "known_hosts": base64.b64encode(b"").decode()}


@pytest.fixture(scope="module")
def hostile(testbed, tmp_path_factory):
    """One namespace with both classes, every attack's set and a fine set,
    served by one operator and the controller stand-in."""
    namespace = namespace_name("hostile-set-policy")
    work = tmp_path_factory.mktemp("hostile")
    with testbed.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        try:
            with serve_namespace(testbed.kubeconfig, namespace) as standin:
                make_class(custom, namespace, name="pods", parameters=POD_CLASS)
                custom.patch_namespaced_custom_object(
                    *GROUP, namespace, "virtualtargetclasses", "pods",
                    {"metadata": {"annotations": {constants.ANNOTATION_SET_OVERRIDABLE: POD_CEILINGS}}})
                core.create_namespaced_secret(namespace, client.V1Secret(
                    metadata=client.V1ObjectMeta(name="lab-ssh"), data=_ssh_key(work)))
                make_class(custom, namespace, name="lab", parameters=LAB_CLASS,
                           provisioner=LAB_PROVISIONER, credentialsSecretRef={"name": "lab-ssh"})
                make_set(custom, namespace, name="fine", board="fine", virtualTargetClassName="pods",
                         minAvailableReplicas=1, maxReplicas=2,
                         parameters={"resources": {"memory": "512Mi", "cpu": 2}})
                for name, kind, spec, _ in ATTACKS:
                    if "template" in spec:
                        spec = {**spec, "template": {**spec["template"], "metadata": {"labels": {"board": name}}}}
                    make_set(custom, namespace, name=name, board=name,
                             virtualTargetClassName=CLASS_NAMES[kind], minAvailableReplicas=1,
                             maxReplicas=2, **spec)
                proc = OperatorProcess(str(testbed.kubeconfig), namespace, work,
                                       provisioners=(constants.PROVISIONER_QEMU, LAB_PROVISIONER))
                proc.start()
                try:
                    proc.wait_ready()
                    # Every set planned once (its status has conditions).
                    for name in ["fine", *(attack[0] for attack in ATTACKS)]:
                        wait_for(lambda name=name: (get_set(custom, namespace, name).get("status")
                                                    or {}).get("conditions"),
                                 timeout=120, message=f"{name} planned")
                    yield api, namespace, standin
                finally:
                    proc.stop()
                    print(f"--- operator log {proc.log_path} ---\n{proc.log_tail(200)}")
        finally:
            core.delete_namespace(namespace)


def _refusal(api, namespace, name, field):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def degraded():
        cond = condition(get_set(custom, namespace, name), "Degraded")
        return cond if cond and cond["reason"] == REASON else None

    # Every set has been planned by now (the fixture).
    cond = wait_for(degraded, timeout=20, message=f"{name}: Degraded/{REASON}")
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == REASON and e.involved_object.name == name],
                      message=f"{name}: Warning Event {REASON}")
    return cond, events


@pytest.mark.parametrize("name, kind, spec, field", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_the_class_refuses_it_and_nothing_is_made(hostile, name, kind, spec, field):
    api, namespace, standin = hostile
    cond, events = _refusal(api, namespace, name, field)
    assert cond["status"] == "True"
    assert cond["message"].startswith(f"{field}: "), cond["message"]
    assert events[0].type == "Warning" and events[0].message.startswith(f"{field}: ")

    # Nothing for the set: no Exporter but the dormant one (no backend,
    # never placed on a host), no Pod.
    exporters = standin.exporters(f"{constants.LABEL_EXPORTER_SET}={name}")
    assert all(constants.ANNOTATION_DORMANT in (e["metadata"].get("annotations") or {})
               for e in exporters), [e["metadata"]["name"] for e in exporters]
    assert not any(constants.LABEL_HOST in (e["metadata"].get("labels") or {}) for e in exporters)
    assert standin.pods(f"{constants.LABEL_EXPORTER_SET}={name}") == []


def test_the_fine_set_beside_them_is_served(hostile):
    """The bed makes what it is asked for: the refusals above are the policy's."""
    api, namespace, standin = hostile
    custom = client.CustomObjectsApi(api)
    settle_pool(standin, 1, custom, namespace, name="fine", timeout=180)
    assert condition(get_set(custom, namespace, "fine"), "Degraded")["status"] == "False"
    assert [p.metadata.name for p in standin.pods(f"{constants.LABEL_EXPORTER_SET}=fine")] == [
        "fine-0"]
