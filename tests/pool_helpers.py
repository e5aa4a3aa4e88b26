"""Objects and fixtures shared by the operator tests."""

from __future__ import annotations

import pytest
from jumpstarter_standin import wait_for
from operator_process import OperatorProcess

GROUP = ("virtualtarget.jumpstarter.dev", "v1alpha1")
SET_LABEL = "virtualtarget.jumpstarter.dev/exporterset"

QEMU_PARAMETERS = {"arch": "x86_64", "machineType": "q35", "resources": {"cpu": 1, "memory": "256Mi"}}


def make_class(custom, namespace, name="qemu-small", parameters=None, **spec):
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "VirtualTargetClass",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"provisioner": "qemu.jumpstarter.dev", "parameters": parameters or QEMU_PARAMETERS, **spec},
    }
    return custom.create_namespaced_custom_object(*GROUP, namespace, "virtualtargetclasses", body)


def make_set(custom, namespace, name="pool", board="qemu-x86", **spec):
    body = {
        "apiVersion": "virtualtarget.jumpstarter.dev/v1alpha1",
        "kind": "ExporterSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "virtualTargetClassName": "qemu-small",
            "minReplicas": 0,
            "maxReplicas": 6,
            "minAvailableReplicas": 2,
            "scaleDownCooldown": "2s",
            "selector": {"matchLabels": {"board": board}},
            "template": {
                "metadata": {"labels": {"board": board, "virtual": "true"}},
                "spec": {"drivers": [{"name": "qemu", "type": "jumpstarter_driver_qemu.driver.Qemu"}]},
            },
            **spec,
        },
    }
    return custom.create_namespaced_custom_object(*GROUP, namespace, "exportersets", body)


def get_set(custom, namespace, name="pool"):
    return custom.get_namespaced_custom_object(*GROUP, namespace, "exportersets", name)


def condition(obj, kind):
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


@pytest.fixture
def api(testbed):
    with testbed.api_client() as api_client:
        yield api_client


@pytest.fixture
def operator(testbed, namespace, tmp_path):
    processes = []

    def start(*extra, **kwargs):
        proc = OperatorProcess(str(testbed.kubeconfig), namespace, tmp_path, *extra, **kwargs).start()
        processes.append(proc)
        proc.wait_ready()
        return proc

    yield start
    for proc in processes:
        proc.stop()
    for proc in processes:
        print(f"--- operator log {proc.log_path} ---\n{proc.log_tail(200)}")


def settle_pool(standin, available, custom, namespace, name="pool", timeout=90, **expected):
    """Until the set reports ``available`` warm exporters and every other
    status field in ``expected`` (e.g. ``leasedReplicas=1``). The controller
    stand-in and the Pods' exporter processes run on their own (the
    ``standin`` fixture)."""
    assert standin.controller is not None, "settle_pool needs the running `standin` fixture"
    expected["availableReplicas"] = available

    def step():
        status = get_set(custom, namespace, name).get("status") or {}
        return status if all(status.get(k) == v for k, v in expected.items()) else None

    return wait_for(step, timeout=timeout, message=f"{expected} in {name}")
