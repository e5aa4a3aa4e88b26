"""JEP-0014's lab pool on lab hosts: the class ``qcom-sa8295-baremetal`` and
the set ``qcom-sa8295-hifi`` as a user writes them (docs/jep-examples.md), the
JEP's two hosts replaced by two of ours (their ``arch`` and ``slots`` as the
JEP gives them) and its Secret ``automotive-lab-ssh`` made from ours. With
the qemu-baremetal operator and the Jumpstarter stand-in, the set reaches
its warm buffer (1). The class gives no kernel and no firmware, so its
aarch64 guest boots the default UEFI (AAVMF's code read-only, a variable
store of the instance's own): the firmware's banner is on the instance's
serial console."""

from __future__ import annotations

import copy

import pytest
from jep_examples import jep_examples, require_jep
from jumpstarter_standin import wait_for
from kubernetes import client
from lab_beds import HOST_LABEL, PROVISIONER, serial_log
from pool_helpers import GROUP
from test_jep_examples_walk import PLURALS, as_a_user_writes_it

pytestmark = pytest.mark.slow

CLASS, SET = "qcom-sa8295-baremetal", "qcom-sa8295-hifi"
OUR_HOSTS = ("lab1", "lab3")
# What AAVMF writes on the first UART once it runs (its boot manager).
UEFI_BANNER = "UEFI firmware"
AAVMF_CODE = "/usr/share/AAVMF/AAVMF_CODE.fd"


def on_our_hosts(vclass, lab_hosts):
    """The class with the JEP's hosts replaced by ours, nothing else changed."""
    changed = copy.deepcopy(vclass)
    hosts = changed["spec"]["parameters"]["hosts"]
    assert len(hosts) == len(OUR_HOSTS), hosts
    for host, ours in zip(hosts, OUR_HOSTS, strict=True):
        host.update(name=ours, address=lab_hosts.hosts[ours])
    return changed


def test_the_jeps_sa8295_set_reaches_its_buffer_booting_the_default_uefi(api, namespace, standin, operator,
                                                                          lab_hosts):
    require_jep()
    custom = client.CustomObjectsApi(api)
    examples = {e["metadata"]["name"]: as_a_user_writes_it(e) for e in jep_examples()
                if e["metadata"]["name"] in (CLASS, SET)}
    examples[CLASS] = on_our_hosts(examples[CLASS], lab_hosts)
    assert "kernel" not in examples[CLASS]["spec"]["parameters"]
    secret = examples[CLASS]["spec"]["credentialsSecretRef"]["name"]
    client.CoreV1Api(api).create_namespaced_secret(namespace, client.V1Secret(
        metadata=client.V1ObjectMeta(name=secret), data=lab_hosts.secret_data()))
    for name in (CLASS, SET):
        body = examples[name]
        body["metadata"] = {**body["metadata"], "namespace": namespace}
        custom.create_namespaced_custom_object(*GROUP, namespace, PLURALS[body["kind"]], body)
    operator(provisioners=(PROVISIONER,))

    def the_set():
        return custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", SET).get("status") or {}

    wanted = examples[SET]["spec"]["minAvailableReplicas"]
    status = wait_for(lambda: (s := the_set()).get("availableReplicas") == wanted and s, timeout=180,
                      interval=0.5, message=f"{SET} at its warm buffer of {wanted}")
    assert status["readyReplicas"] == wanted
    (exporter,) = [e for e in standin.exporters(f"virtualtarget.jumpstarter.dev/exporterset={SET}")
                   if not e["metadata"].get("deletionTimestamp") and e["spec"].get("enabled", True)
                   and "dormant" not in e["metadata"]["name"]]
    name, host = exporter["metadata"]["name"], exporter["metadata"]["labels"][HOST_LABEL]
    assert host in OUR_HOSTS
    run = (lab_hosts.instance_dir(host, namespace, name) / "vm" / "run").read_text()
    assert "/usr/bin/qemu-system-aarch64" in run and f"readonly=on,file={AAVMF_CODE}" in run, run
    assert "-kernel" not in run and "-bios" not in run, run
    wait_for(lambda: UEFI_BANNER in serial_log(lab_hosts, namespace, name, host), timeout=60,
             message="AAVMF's banner on the guest's serial console")
