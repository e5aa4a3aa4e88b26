"""A hostile tenant's ExporterSets against the real operator on the test bed:
each asks for something only the class may decide (a driver that would reach
the host, a path, a binary, a work directory, more resources or slots than
the class gives, a runtime image of its own), and each is refused by the class's policy
(pool/set_overrides.py): the set is Degraded/NotAllowedByClass naming the
field, a Warning Event names it too, and nothing is made for it (no Exporter
but the dormant one, no Pod, no host chosen). A reserved template annotation
is refused as a reserved label is (TemplateLabelConflict), a set whose
template satisfies a lease that a lab board satisfies too does not grow for
it while it waits for that board (pool/demand.py), and one whose template
carries every label of the board is refused (TemplateLabelConflict,
pool/selectors.py).

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
TCP_NETWORK = "jumpstarter_driver_network.driver.TcpNetwork"
DIGEST = "sha256:" + "0" * 64
EXPORTERS = ("jumpstarter.dev", "v1alpha1")
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
    ("runtime-image", "pod", {"images": {"runtime": {"image": "registry.tenant.test/qemu:mine"}}},
     "spec.images.runtime"),
    # A TcpNetwork that names a host turns the lab host (or the Pod) into a
    # relay into its network; one without a host reaches only the guest.
    ("tcp-relay-from-a-lab-host", "lab",
     drivers({"name": "relay", "type": TCP_NETWORK, "config": {"host": "10.0.0.1", "port": 22}}),
     "spec.template.spec.drivers[1].config.host"),
    ("tcp-relay-from-a-pod", "pod",
     drivers({"name": "relay", "type": TCP_NETWORK, "config": {"host": "kubernetes.default", "port": 443}}),
     "spec.template.spec.drivers[1].config.host"),
    ("image-from-an-internal-address", "pod",
     {"parameters": {"disk": {"url": "http://169.254.169.254/latest/disk.qcow2", "digest": DIGEST}}},
     "spec.parameters.disk.url"),
    ("image-behind-a-user-part", "pod",
     {"parameters": {"kernel": {"url": "https://10.0.0.1@192.168.1.1/vmlinuz", "digest": DIGEST}}},
     "spec.parameters.kernel.url"),
    # The real controller derives an Exporter's credential subject from it.
    ("reserved-annotation", "pod",
     {"template": {"metadata": {"annotations": {"jumpstarter.dev/migrated-uid": "0b8b0e55"}},
                   "spec": {"drivers": [{"name": "qemu", "type": QEMU}]}}},
     "spec.template.metadata.annotations.jumpstarter.dev/migrated-uid"),
]
CLASS_NAMES = {"pod": "pods", "lab": "lab"}
# Refused as a reserved label is, not by the class's policy.
REASONS = {"reserved-annotation": "TemplateLabelConflict", "covers": "TemplateLabelConflict"}
# Demand capture: a set whose template copies the labels of a lab's board
# (an Exporter no set controls), and another user's lease for that board
# waiting while the board is offline.
BOARD_LABELS = {"board": "capture", "lab": "bench"}


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
                        metadata = {**spec["template"].get("metadata", {}), "labels": {"board": name}}
                        spec = {**spec, "template": {**spec["template"], "metadata": metadata}}
                    make_set(custom, namespace, name=name, board=name,
                             virtualTargetClassName=CLASS_NAMES[kind], minAvailableReplicas=1,
                             maxReplicas=2, **spec)
                custom.create_namespaced_custom_object(*EXPORTERS, namespace, "exporters", {
                    "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
                    "metadata": {"name": "bench-capture", "labels": BOARD_LABELS}, "spec": {"enabled": True}})
                custom.create_namespaced_custom_object(*EXPORTERS, namespace, "leases", {
                    "apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Lease", "metadata": {"name": "theirs"},
                    "spec": {"clientRef": {"name": "test-client"}, "duration": "1h", "selector": {
                        "matchExpressions": [{"key": "board", "operator": "In",
                                              "values": ["capture", "capture-virtual"]}]}}})
                # It shares no label with the board (one it shared would refuse
                # it: tests/hostile/test_hostile_label_overlap.py), but the lease above
                # asks for either value, so its labels satisfy it too.
                make_set(custom, namespace, name="capture", board="capture", virtualTargetClassName="pods",
                         minAvailableReplicas=0, maxReplicas=2,
                         selector={"matchLabels": {"board": "capture-virtual", "virtual": "true"}},
                         template={"metadata": {"labels": {"board": "capture-virtual", "virtual": "true"}},
                                   "spec": {"drivers": [{"name": "qemu", "type": QEMU}]}})
                # Every label of the board: any lease asked for it matches this set's Exporters.
                make_set(custom, namespace, name="covers", board="capture", virtualTargetClassName="pods",
                         minAvailableReplicas=1, maxReplicas=2,
                         selector={"matchLabels": {"board": "capture", "tier": "covers"}},
                         template={"metadata": {"labels": {**BOARD_LABELS, "tier": "covers"}},
                                   "spec": {"drivers": [{"name": "qemu", "type": QEMU}]}})
                proc = OperatorProcess(str(testbed.kubeconfig), namespace, work,
                                       provisioners=(constants.PROVISIONER_QEMU, LAB_PROVISIONER))
                proc.start()
                try:
                    proc.wait_ready()
                    # Every set planned once (its status has conditions).
                    for name in ["fine", "capture", "covers", *(attack[0] for attack in ATTACKS)]:
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
    reason = REASONS.get(name, REASON)

    def degraded():
        cond = condition(get_set(custom, namespace, name), "Degraded")
        return cond if cond and cond["reason"] == reason else None

    # Every set has been planned by now (the fixture).
    cond = wait_for(degraded, timeout=20, message=f"{name}: Degraded/{reason}")
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == reason and e.involved_object.name == name],
                      message=f"{name}: Warning Event {reason}")
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


def test_a_lease_for_a_lab_board_is_not_the_demand_of_a_set_that_copied_its_labels(hostile):
    """Demand capture: the set stays at zero for the other user's lease (no
    Exporter, no Pod: the lease cannot land on the tenant's Exporters), and
    says which lease it left to which board."""
    api, namespace, standin = hostile
    custom = client.CustomObjectsApi(api)

    def told():
        found = condition(get_set(custom, namespace, "capture"), "SelectorOverlap") or {}
        return found if found.get("reason") == "LeasesForUnownedExporters" else None

    found = wait_for(told, timeout=20, message="capture: SelectorOverlap/LeasesForUnownedExporters")
    assert found["status"] == "True"
    assert ("Lease theirs (board in (capture,capture-virtual)): Exporter bench-capture, which no set controls"
            in found["message"])
    assert (get_set(custom, namespace, "capture").get("status") or {}).get("replicas", 0) == 0
    exporters = standin.exporters(f"{constants.LABEL_EXPORTER_SET}=capture")
    assert all(constants.ANNOTATION_DORMANT in (e["metadata"].get("annotations") or {})
               for e in exporters), [e["metadata"]["name"] for e in exporters]
    assert standin.pods(f"{constants.LABEL_EXPORTER_SET}=capture") == []
    assert standin.exporter_of("theirs") is None


def test_a_set_carrying_every_label_of_a_lab_board_is_refused_naming_it(hostile):
    """Demand capture by copying: every lease asked for the board by its
    labels would match the set's Exporters, so the set is refused naming the
    field and the board, with a Warning Event; nothing is made for it and
    the board is left as it is."""
    api, namespace, standin = hostile
    cond, events = _refusal(api, namespace, "covers", "spec.template.metadata.labels")
    told = ("spec.template.metadata.labels: the set's Exporters would carry every label of Exporter "
            "bench-capture (board=capture,lab=bench), which is not the set's")
    assert cond["status"] == "True" and cond["message"].startswith(told), cond["message"]
    assert events[0].type == "Warning" and events[0].message.startswith(told)
    exporters = standin.exporters(f"{constants.LABEL_EXPORTER_SET}=covers")
    assert all(constants.ANNOTATION_DORMANT in (e["metadata"].get("annotations") or {})
               for e in exporters), [e["metadata"]["name"] for e in exporters]
    assert standin.pods(f"{constants.LABEL_EXPORTER_SET}=covers") == []
    board = client.CustomObjectsApi(api).get_namespaced_custom_object(*EXPORTERS, namespace, "exporters",
                                                                      "bench-capture")
    assert board["metadata"].get("ownerReferences") is None and board["spec"]["enabled"] is True
