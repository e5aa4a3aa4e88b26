"""Validation gates every backend step: while a set's merged parameters have
errors, one reconcile pass (k8s/observe.py, pool/plan.py,
k8s/reconcile_pass.py ``backend_work``) makes, resets and re-syncs no
backend of its existing Exporters, and hands the reconcile role none to
act on; the set says why, naming the field. Once the parameters are fixed
the same pool gets every step back."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import reconcile_pass
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, SET_NAME, at, exporter, exporter_set, lease, target_class

AVAILABLE_CA = {"available": True, "tls_ca": "Q0E=", "message": ""}
# What the issue found reaching QEMU's -machine and -cpu, and other errors.
INVALID = [
    ({"machineType": "q35,initrd=/var/lib/jumpstarter-virtual/instances/other.pool-0/exporter.yaml"},
     "parameters.machineType: "),
    ({"cpuModel": "max,+vmx"}, "parameters.cpuModel: "),
    ({"kernelArgs": "console=ttyS0\nroot=/dev/vda"}, "parameters.kernelArgs: "),
    ({"resources": {"memory": "8Gx"}}, "parameters.resources.memory: "),
]


def _pod(name, uid):
    return {"metadata": {"name": name, "namespace": "lab", "creationTimestamp": at(-3000),
                         "labels": {c.LABEL_EXPORTER_SET: SET_NAME, c.LABEL_EXPORTER: name},
                         "ownerReferences": [{"uid": uid, "controller": True}]},
            "status": {"phase": "Running"}}


def observed(parameters):
    """A Pod-backed set with a backend for each step: rpi4-0 runs (its config
    is re-synced on a run by hand), rpi4-1 served a lease that ended (reset in
    place), rpi4-2 has its credential and no Pod yet (made)."""
    the_set = exporter_set(min_available=2, recycle="InPlaceReuse", parameters=parameters)
    running = exporter("rpi4-0")
    used = exporter("rpi4-1", enabled=False, annotations={c.ANNOTATION_RETIRING: c.RECYCLE_IN_PLACE_REUSE})
    new = exporter("rpi4-2", ready=False, created=-30, first_ready=False)
    owned = [running, used, new]
    for item in owned:
        item["metadata"]["uid"] = item["metadata"]["name"] + "-uid"
        item["status"]["credential"] = {"name": item["metadata"]["name"] + "-exporter"}
    objects = {"VirtualTargetClass": [target_class()], "ExporterSet": [the_set], "Exporter": owned,
               "Lease": [lease("l1", assigned="rpi4-1", ended=True)],
               "Pod": [_pod("rpi4-0", "rpi4-0-uid"), _pod("rpi4-1", "rpi4-1-uid")]}
    seen = k8s_observe.observe(the_set, objects, NOW)
    seen["controller_ca"] = AVAILABLE_CA
    seen["sync_config"] = True
    return the_set, seen


def backend_steps(parameters):
    """What one pass hands the backends: (resets, made, re-synced, the
    backend pass needed, the plan)."""
    the_set, seen = observed(parameters)
    plan = k8s_observe.plan_for(the_set, seen)
    work = reconcile_pass.backend_work(plan, the_set, seen, c.PROVISIONER_QEMU)
    variables = k8s_observe.playbook_variables(the_set, seen, work.backend_plan or {})
    resets = [r["name"] for r in (work.backend_plan or {}).get("recycle", [])]
    assert variables["unprovisioned_exporters"] == work.unprovisioned
    return resets, work.unprovisioned, variables["running_exporters"], work.needed, plan


def degraded(plan):
    return next(x for x in plan["status"]["conditions"] if x["type"] == c.CONDITION_DEGRADED)


def test_a_valid_set_gets_every_backend_step():
    """The pool the gate is tried on: each step is due when the set is valid."""
    resets, made, resynced, needed, plan = backend_steps(None)
    assert resets == ["rpi4-1"] and made == ["rpi4-2"] and resynced == ["rpi4-0"] and needed
    assert degraded(plan)["status"] == "False"


def test_no_backend_is_made_reset_or_resynced_while_the_parameters_have_errors():
    for parameters, field in INVALID:
        resets, made, resynced, needed, plan = backend_steps(parameters)
        assert (resets, made, resynced, needed) == ([], [], [], False), parameters
        condition = degraded(plan)
        assert (condition["status"], condition["reason"]) == ("True", c.REASON_INVALID_PARAMETERS)
        assert condition["message"].startswith(field), condition["message"]
        assert [e["reason"] for e in plan["events"] if e["type"] == "Warning"] == [c.REASON_INVALID_PARAMETERS]
        # The used member waits, disabled, for its reset; nothing is lost:
        # no Exporter is deleted, created or enabled again meanwhile.
        assert plan["enable"] == [] and plan["delete"] == [] and plan["create"] == []
        assert "rpi4-1" not in plan["exporter_annotations"]
        assert k8s_observe.probe_playbook(observed(parameters)[1]) is None


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789,=+", min_size=1, max_size=24)
       .filter(lambda v: "," in v or "=" in v))
def test_a_cpu_model_with_an_option_in_it_stops_every_backend_step(cpu):
    resets, made, resynced, needed, plan = backend_steps({"cpuModel": cpu})
    assert (resets, made, resynced, needed) == ([], [], [], False)
    assert degraded(plan)["message"].startswith("parameters.cpuModel: ")
