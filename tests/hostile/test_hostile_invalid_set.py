"""A set whose Exporters have backends turns invalid, on the bed with the
operator and the Jumpstarter controller stand-in: while its merged
parameters have errors, no backend of its is made, reset or rewritten.

The tenant gives a CPU model with an option in it (``max,+vmx``: QEMU reads
``-cpu`` as an option list) while its one Exporter is leased, then ends the
lease. The set says why (Degraded/InvalidParameters naming
``parameters.cpuModel``, a Warning Event); the Exporter is taken out of the
pool as any whose lease ended, and waits there, disabled, with its Pod as it
was: the reset in place (on kwok a fresh Pod, since nothing can be run in
the old one) does not happen. Once the parameters are fixed it does, and
the Exporter is back in the pool.
"""

from __future__ import annotations

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, SET_LABEL, condition, get_set, make_class, make_set, no_event, settle_pool

# Long enough for a reset to touch the Pod after the Exporter is disabled:
# a run of the reconcile playbook, 5.5 s after the disable with the hold
# removed, on this 2-core machine.
RESET_WITHIN = 10


def _pods(standin):
    return {p.metadata.name: p.metadata.uid for p in standin.pods(f"{SET_LABEL}=pool")}


def test_an_invalid_set_resets_and_makes_no_backend_until_it_is_fixed(api, namespace, standin, operator):
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=1, maxReplicas=1, recycleStrategy="InPlaceReuse")
    operator()
    settle_pool(standin, 1, custom, namespace, replicas=1)
    before = _pods(standin)
    assert list(before) == ["pool-0"]
    standin.create_lease("l1", {"board": "qemu-x86"})
    assert standin.wait_assigned("l1") == "pool-0"

    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"parameters": {"cpuModel": "max,+vmx"}}})

    def invalid():
        cond = condition(get_set(custom, namespace), "Degraded")
        return cond if cond and cond["reason"] == constants.REASON_INVALID_PARAMETERS else None

    cond = wait_for(invalid, timeout=30, message="Degraded/InvalidParameters")
    assert cond["status"] == "True" and cond["message"].startswith("parameters.cpuModel: 'max,+vmx'")
    events = wait_for(lambda: [e for e in core.list_namespaced_event(namespace).items
                               if e.reason == constants.REASON_INVALID_PARAMETERS],
                      message="InvalidParameters event")
    assert events[0].type == "Warning" and events[0].message.startswith("parameters.cpuModel: ")

    def touched(event_type, pod):
        return event_type in ("ADDED", "DELETED") or bool(pod["metadata"].get("deletionTimestamp"))

    with no_event(api, "Pod", touched, RESET_WITHIN, namespace, label_selector=f"{SET_LABEL}=pool",
                  what="Pod made or removed while the set is invalid"):
        standin.release("l1")
        # The pool pass after the lease's end: out of the pool, waiting for its reset.
        wait_for(lambda: not standin.exporter("pool-0")["spec"].get("enabled", True),
                 timeout=30, message="pool-0 disabled")
    used = standin.exporter("pool-0")
    assert used["metadata"]["annotations"][constants.ANNOTATION_RETIRING] == constants.RECYCLE_IN_PLACE_REUSE
    assert _pods(standin) == before
    assert condition(get_set(custom, namespace), "Degraded")["reason"] == constants.REASON_INVALID_PARAMETERS

    # Fixed: the reset happens, a fresh Pod for the same Exporter, back in the pool.
    custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool",
                                          {"spec": {"parameters": {"cpuModel": None}}})

    def reset():
        pods, exporter = _pods(standin), standin.exporter("pool-0")
        fresh = list(pods) == ["pool-0"] and pods["pool-0"] != before["pool-0"]
        return fresh and exporter["spec"].get("enabled", True) and exporter

    assert wait_for(reset, timeout=60, message="pool-0 reset")["metadata"]["uid"] == used["metadata"]["uid"]
    assert condition(get_set(custom, namespace), "Degraded")["status"] == "False"
