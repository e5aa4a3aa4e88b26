"""Every class and set of JEP-0014's seed revision, applied to the bed with
only its apiVersion changed (``jumpstarter.dev/v1alpha1`` to
``virtualtarget.jumpstarter.dev/v1alpha1``, tests/jep_examples.py), with the
qemu operator running:

- the API server accepts each as written (drivers without names included);
- the set over the JEP's qemu class is refused by the class's driver
  allowlist, not run broken: ``Degraded=True``, ``NotAllowedByClass``, the
  message naming ``QemuPower``, the supported types and what to write
  instead; no instance is made for it (only its dormant Exporter);
- the set whose class the JEP does not give says ``ClassNotFound``.

The parameters side of every example, without a bed, is in
tests/unit/plugins/module_utils/pool/test_jep_examples.py.
"""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from jep_examples import seed_examples, with_our_api_version
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from pool_helpers import condition

GROUP, VERSION = "virtualtarget.jumpstarter.dev", "v1alpha1"
PLURALS = {"VirtualTargetClass": "virtualtargetclasses", "ExporterSet": "exportersets"}


def apply(custom, namespace, example):
    """Create the example in ``namespace``, or replace the one of its name
    (the JEP gives the same class and set twice). The test's namespace stands
    in for the JEP's ``jumpstarter``."""
    body = with_our_api_version(example)
    body["metadata"] = {**body["metadata"], "namespace": namespace}
    plural = PLURALS[body["kind"]]
    try:
        return custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body)
    except ApiException as exc:
        if exc.status != 409:
            raise
    current = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, body["metadata"]["name"])
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    return custom.replace_namespaced_custom_object(GROUP, VERSION, namespace, plural, body["metadata"]["name"], body)


def test_every_seed_example_is_accepted_and_its_driver_types_refused_by_name(api, namespace, operator):
    custom = client.CustomObjectsApi(api)
    examples = seed_examples()
    for example in examples:
        stored = apply(custom, namespace, example)
        # Kept as written (the defaults of what it leaves out added).
        assert {k: v for k, v in stored["spec"].items() if k in example["spec"]} == example["spec"], \
            example["_example"]
    operator()

    def degraded(name):
        exporter_set = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "exportersets", name)
        return condition(exporter_set, "Degraded")

    refused = wait_for(lambda: degraded("rpi4-virtual"), timeout=60, message="rpi4-virtual planned")
    assert (refused["status"], refused["reason"]) == ("True", "NotAllowedByClass")
    message = refused["message"]
    assert message.startswith("spec.template.spec.drivers[0].type: 'jumpstarter_driver_power.driver.QemuPower'")
    supported = message.split("supported types: ", 1)[1]
    for kind in ("jumpstarter_driver_qemu.driver.Qemu", "jumpstarter_driver_network.driver.TcpNetwork",
                 "jumpstarter_driver_serial.driver.QemuSerial"):
        assert kind in supported
    assert "{ref: <that driver's name>.power}" in message
    # No instance: at most the dormant Exporter that has no backend (pool-semantics.md).
    exporters = custom.list_namespaced_custom_object("jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"]
    assert all(c.ANNOTATION_DORMANT in (e["metadata"].get("annotations") or {}) for e in exporters), exporters
    assert client.CoreV1Api(api).list_namespaced_pod(namespace).items == []

    missing = wait_for(lambda: degraded("pixel7-emulator"), timeout=60, message="pixel7-emulator planned")
    assert (missing["status"], missing["reason"]) == ("True", "ClassNotFound")
