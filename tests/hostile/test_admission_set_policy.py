"""The admission policies of config/tenancy that refuse, when a set or class
is written, what the operator would otherwise only refuse after
(``set_policy.yaml``: a driver type the set's class does not allow;
``image_digest_policy.yaml``: a digest that is not sha256:<64 lowercase
hex>), on the bed's real API server, as written. Only their bindings are
narrowed to the test's namespace (the bed is shared with tests that write
such sets on purpose).

Their parity with the Python rules, without a bed:
tests/unit/plugins/module_utils/pool/test_admission_policies.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT
from pool_helpers import GROUP, QEMU_PARAMETERS, make_class, make_set

TENANCY = ROOT / "config/tenancy"
POLICIES = ("set_policy", "image_digest_policy")
UNIX_NETWORK = "jumpstarter_driver_network.driver.UnixNetwork"
QEMU = "jumpstarter_driver_qemu.driver.Qemu"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _load(name):
    return yaml.safe_load((TENANCY / f"{name}.yaml").read_text())


@pytest.fixture
def policies(api, namespace):
    """Both policies as written, bound to ``namespace`` alone."""
    admission = client.AdmissionregistrationV1Api(api)
    made = []
    for name in POLICIES:
        policy, binding = _load(name), _load(f"{name}_binding")
        suffix = "-" + namespace
        policy["metadata"]["name"] += suffix
        binding["metadata"]["name"] += suffix
        binding["spec"]["policyName"] = policy["metadata"]["name"]
        binding["spec"]["matchResources"] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}
        admission.create_validating_admission_policy(policy)
        admission.create_validating_admission_policy_binding(binding)
        made.append((policy["metadata"]["name"], binding["metadata"]["name"]))
    yield admission
    for policy, binding in made:
        admission.delete_validating_admission_policy_binding(binding)
        admission.delete_validating_admission_policy(policy)


def refusal(call):
    """The API server's message for ``call``, or None when it was accepted."""
    try:
        call()
    except ApiException as exc:
        assert exc.status == 422, exc.body
        return json.loads(exc.body)["message"]
    return None


def until_refused(call, undo):
    """Until a policy just bound refuses ``call`` (bindings reach the API
    server's admission a moment after they are made); ``undo`` removes what
    an accepted call made."""
    def step():
        message = refusal(call)
        if message is None:
            undo()
        return message
    return wait_for(step, timeout=30, message="the admission policy in force")


def test_a_driver_type_the_class_does_not_allow_is_refused_at_admission(api, namespace, policies):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    drivers = [{"name": "qemu", "type": QEMU}, {"name": "shell", "type": UNIX_NETWORK, "config": {"path": "/x"}}]
    template = {"metadata": {"labels": {"board": "qemu-x86"}}, "spec": {"drivers": drivers}}

    def delete(name):
        return lambda: custom.delete_namespaced_custom_object(*GROUP, namespace, "exportersets", name)

    message = until_refused(lambda: make_set(custom, namespace, name="shell", template=template), delete("shell"))
    assert f"spec.template.spec.drivers[].type: {UNIX_NETWORK} is not a driver type VirtualTargetClass " \
           "qemu-small allows" in message
    supported = message.split("supported types: ", 1)[1]
    for kind in (QEMU, "jumpstarter_driver_power.driver.QemuPower", "jumpstarter_driver_serial.driver.QemuSerial",
                 "jumpstarter_driver_network.driver.TcpNetwork"):
        assert kind in supported
    assert "(qemu.jumpstarter.dev's defaults; drivers in the class's annotation names others)" in supported

    # The JEP's seed template, types as written, is admitted.
    seed = [{"type": "jumpstarter_driver_power.driver.QemuPower"},
            {"type": "jumpstarter_driver_network.driver.TcpNetwork", "config": {"port": 22}},
            {"type": "jumpstarter_driver_serial.driver.QemuSerial"}]
    seed_set = make_set(custom, namespace, name="seed", template={**template, "spec": {"drivers": seed}})

    # A class that names its own types: those, and only those.
    annotated = {"virtualtarget.jumpstarter.dev/set-overridable": f"max.resources.cpu=4;\n drivers = {QEMU} | "
                                                                    f"{UNIX_NETWORK}"}
    custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", {
        "apiVersion": "/".join(GROUP), "kind": "VirtualTargetClass",
        "metadata": {"name": "own-types", "annotations": annotated},
        "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": QEMU_PARAMETERS}})
    make_set(custom, namespace, name="own", virtualTargetClassName="own-types", template=template)
    message = refusal(lambda: make_set(custom, namespace, name="own-seed", virtualTargetClassName="own-types",
                                       template={**template, "spec": {"drivers": seed}}))
    assert "drivers[].type: jumpstarter_driver_power.driver.QemuPower, jumpstarter_driver_network.driver.TcpNetwork, " \
           "jumpstarter_driver_serial.driver.QemuSerial are not driver types VirtualTargetClass own-types " \
           "allows" in message
    assert f"supported types: {QEMU}, {UNIX_NETWORK} (named by the class's annotation)" in message
    # No class yet: left to the operator (it says ClassNotFound).
    make_set(custom, namespace, name="later", virtualTargetClassName="not-yet", template=template)

    # A set admitted before its class changed still takes the operator's
    # finalizer writes; a change of its spec is checked again.
    klass = custom.get_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small")
    klass["metadata"]["annotations"] = {"virtualtarget.jumpstarter.dev/set-overridable": f"drivers={QEMU}"}
    custom.replace_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "qemu-small", klass)
    patch = {"metadata": {"finalizers": ["virtualtarget.jumpstarter.dev/test"]}}
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "seed", patch)
    changed = copy.deepcopy(seed_set["spec"])
    changed["minAvailableReplicas"] = 1
    message = refusal(lambda: custom.patch_namespaced_custom_object(
        *GROUP, namespace, "exportersets", "seed", {"spec": changed}))
    assert "are not driver types VirtualTargetClass qemu-small allows" in message
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "seed",
                                          {"metadata": {"finalizers": None}})


def test_a_placeholder_or_malformed_digest_is_refused_at_admission(api, namespace, policies):
    custom = client.CustomObjectsApi(api)
    kernel = {"url": "https://images.example/vmlinuz", "digest": DIGEST}

    def parameters(digest):
        return {**QEMU_PARAMETERS, "kernel": kernel,
                "firmware": {"url": "registry.example.com/firmware/rpi4:latest", "digest": digest}}

    def delete():
        custom.delete_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", "bad")

    # JEP-0014's placeholder first, then malformed ones.
    first = True
    for digest in ("sha256:abc...", "sha256:" + "0123456789ABCDEF" * 4, "sha256:abc", "md5:" + "0" * 32, 7):
        def write(digest=digest):
            return make_class(custom, namespace, name="bad", parameters=parameters(digest))
        message = until_refused(write, delete) if first else refusal(write)
        first = False
        assert "spec.parameters.firmware.digest: not sha256:<64 lowercase hex digits>" in message, digest
        assert "kernel" not in message
    # Real digests pass, and a set may not bring a placeholder either.
    make_class(custom, namespace, parameters=parameters(DIGEST))
    message = refusal(lambda: make_set(custom, namespace, parameters={
        "disk": {"url": "https://images.example/d", "digest": "sha256:abc..."}}))
    assert "spec.parameters.disk.digest: not sha256:" in message


def test_a_minimum_above_the_omitted_max_replicas_is_refused_naming_its_default(api, namespace):
    """``maxReplicas`` omitted is 4 (this CRD's default, as upstream's); a
    warm buffer of 5 is refused naming the field, that default and how to
    say no ceiling, not as a bare rule."""
    custom = client.CustomObjectsApi(api)
    message = refusal(lambda: custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", {
        "apiVersion": "/".join(GROUP), "kind": "ExporterSet", "metadata": {"name": "five"},
        "spec": {"virtualTargetClassName": "c", "minAvailableReplicas": 5, "selector": {"matchLabels": {"a": "b"}},
                 "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"drivers": []}}}}))
    assert ("spec.minAvailableReplicas: Invalid value: must not exceed spec.maxReplicas (an omitted "
            "maxReplicas is 4, the default of this CRD and of upstream's; set maxReplicas 0 for no ceiling)") \
        in message, message
    stored = make_set(custom, namespace, maxReplicas=0, minAvailableReplicas=5)
    assert stored["spec"]["maxReplicas"] == 0
