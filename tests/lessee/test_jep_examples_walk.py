"""Every VirtualTargetClass and ExporterSet of both revisions of JEP-0014,
applied to the bed as a user of this project writes them
(docs/jep-examples.md): the seed's ``apiVersion`` changed, the placeholder
digests made real, the images the JEP names replaced by ours; nothing else.
With the qemu operator and the Jumpstarter stand-in running (kwok's Pods):

- the set ``rpi4-virtual`` reaches its warm buffer (2), each instance's
  exporter config holding the drivers the JEP lists, resolved: the Qemu
  driver (or, in the seed, one added for them) as the virtual QEMU driver,
  QemuPower and QemuSerial as refs to its power and console, TcpNetwork
  pointed at QEMU's forward to the guest's SSH; jumpstarter's own model
  loads it;
- ``pixel7-emulator``, whose class the JEP does not give, says ClassNotFound.

The lab set (``qcom-sa8295-hifi``) is accepted here; its pool runs on lab
hosts in tests/lessee/test_jep_examples_lab.py, and its drivers and parameters are
checked without a bed (tests/unit/plugins/module_utils/pool/test_jep_examples.py).
"""

from __future__ import annotations

import base64

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s.pod import config_secret_name
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import DEFAULT_IMAGES
from jep_examples import jep_examples, require_jep, seed_examples, with_our_api_version, with_real_digests
from jumpstarter.config.exporter import ExporterConfigV1Alpha1
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import GROUP, condition, settle_pool

PLURALS = {"VirtualTargetClass": "virtualtargetclasses", "ExporterSet": "exportersets"}
VIRTUAL_QEMU = "jumpstarter_driver_virtual_qemu.driver.VirtualQemu"
KVM = "devices.kubevirt.io/kvm"


def as_a_user_writes_it(example):
    """The example with only what docs/jep-examples.md says to change."""
    body = with_our_api_version(example) if example["apiVersion"] != "/".join(GROUP) else \
        {k: v for k, v in example.items() if k != "_example"}
    body = with_real_digests(body)
    body.pop("status", None)  # the JEP shows a status; the API server ignores it on create
    if body["kind"] == "VirtualTargetClass" and "images" in body["spec"]:
        body["spec"]["images"] = {role: {**spec, "image": DEFAULT_IMAGES[role]["image"]}
                                  for role, spec in body["spec"]["images"].items()}
    return body


@pytest.fixture
def kvm_node(api, namespace):
    """A kwok node such as the JEP's rpi4 class asks for: arm64, with the
    KVM device resource and the taint its Pods tolerate (so no other test's
    Pod lands there)."""
    core = client.CoreV1Api(api)
    name = f"jep-{namespace[-6:]}"
    core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        "labels": {"type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                   "kubernetes.io/arch": "arm64"}},
        "spec": {"taints": [{"key": "jumpstarter.dev/kvm", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110", KVM: "8"},
                   "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110", KVM: "8"}}})
    yield name
    core.delete_node(name)


REVISIONS = {"seed": seed_examples, "later": jep_examples}


@pytest.mark.slow
@pytest.mark.parametrize("revision", list(REVISIONS))
def test_each_jep_example_runs_as_written(api, namespace, standin, operator, kvm_node, revision):
    if revision == "later":
        require_jep()
    custom = client.CustomObjectsApi(api)
    examples = REVISIONS[revision]()
    written = {}
    for example in examples:
        body = as_a_user_writes_it(example)
        body["metadata"] = {**body["metadata"], "namespace": namespace}
        plural, name = PLURALS[body["kind"]], body["metadata"]["name"]
        try:
            custom.create_namespaced_custom_object(*GROUP, namespace, plural, body)
        except ApiException as exc:
            assert exc.status == 409, (example["_example"], exc.body)
            # The JEP gives its rpi4 class and set twice: the later one stands.
            body["metadata"]["resourceVersion"] = custom.get_namespaced_custom_object(
                *GROUP, namespace, plural, name)["metadata"]["resourceVersion"]
            custom.replace_namespaced_custom_object(*GROUP, namespace, plural, name, body)
        written[(body["kind"], name)] = body
    assert {name for kind, name in written if kind == "ExporterSet"} == {
        "rpi4-virtual", "pixel7-emulator", "qcom-sa8295-hifi"}
    operator()

    status = settle_pool(standin, 2, custom, namespace, name="rpi4-virtual", timeout=120, replicas=2)
    assert status["readyReplicas"] == 2
    the_set = written[("ExporterSet", "rpi4-virtual")]
    drivers = the_set["spec"]["template"]["spec"]["drivers"]
    core = client.CoreV1Api(api)
    for exporter in standin.exporters("virtualtarget.jumpstarter.dev/exporterset=rpi4-virtual"):
        name = exporter["metadata"]["name"]
        secret = core.read_namespaced_secret(config_secret_name(name), namespace)
        export = yaml.safe_load(base64.b64decode(secret.data[f"{name}.yaml"]))
        loaded = ExporterConfigV1Alpha1.model_validate(export)
        entries = export["export"]
        (qemu,) = [key for key, entry in entries.items() if entry.get("type") == VIRTUAL_QEMU]
        for index, driver in enumerate(drivers):
            key = driver.get("name") or driver["type"].rsplit(".", 1)[-1].lower()
            kind = driver["type"].rsplit(".", 1)[-1]
            if kind == "QemuPower":
                assert entries[key] == {"ref": f"{qemu}.power"}
            elif kind == "QemuSerial":
                assert entries[key] == {"ref": f"{qemu}.console"}
            elif kind == "TcpNetwork":
                assert entries[key]["config"] == {"host": "127.0.0.1", "port": 22000}, index
            else:
                assert key == qemu
        assert set(loaded.export) == set(entries)
        pod = core.read_namespaced_pod(name, namespace)
        assert pod.spec.node_name == kvm_node

    pixel = wait_for(lambda: condition(custom.get_namespaced_custom_object(
        *GROUP, namespace, "exportersets", "pixel7-emulator"), "Degraded"), timeout=60, message="pixel7 planned")
    assert (pixel["status"], pixel["reason"]) == ("True", "ClassNotFound")
