"""A set's author against the state the operator decides from, on the bed.

The scale-down cooldown's clock, the failure streak, a backend's refusal,
the lab hosts' report and the last config re-sync are kept in the set's
status (``status.operatorState``, pool/operator_state.py), which a tenant
cannot write; annotations of their former names are never read. Here the
real operator keeps a pool with a surplus waiting out a one-hour cooldown,
and its author forges every former annotation (a surplus since long ago, a
failure streak past every threshold, a refusal of the backend, a lost lab
host, a sync long ago), then deletes them, and writes the state through
the set's own endpoint: no Exporter is disabled, the state is unchanged,
the set is not degraded, and the pool still grows when asked to. The Corellium refusal whose annotation is deleted is in
test_corellium_provisioner.py (the token is not sent again)."""

from __future__ import annotations

import json

from jumpstarter_standin import wait_for
from kubernetes import client
from pool_helpers import GROUP, condition, get_set, make_class, make_set, no_event, settle_pool

PREFIX = "virtualtarget.jumpstarter.dev/"
LONG_AGO = "2000-01-01T00:00:00Z"
FOREVER = "2999-01-01T00:00:00Z"
FORGED = {
    PREFIX + "surplus-since": LONG_AGO,
    PREFIX + "consecutive-failures": "99",
    PREFIX + "last-failure": json.dumps({"time": LONG_AGO, "since": LONG_AGO, "reason": "Failed",
                                         "message": "forged", "exporters": ["pool-9"], "unrecoverable": True}),
    PREFIX + "backend-refusal": json.dumps({"reason": "QuotaExceeded", "message": "forged", "since": LONG_AGO,
                                            "count": 9, "retryAt": FOREVER}),
    PREFIX + "host-report": json.dumps({"probedAt": LONG_AGO, "hosts": {}}),
    PREFIX + "config-synced-at": LONG_AGO,
}


def state_of(exporter_set):
    return (exporter_set.get("status") or {}).get("operatorState") or {}


def disabled(event_type, obj):
    return event_type == "MODIFIED" and obj["spec"].get("enabled") is False


def test_forged_or_deleted_annotations_change_no_decision(api, namespace, standin, operator):
    custom = client.CustomObjectsApi(api)
    make_class(custom, namespace)
    make_set(custom, namespace, minAvailableReplicas=2, scaleDownCooldown="1h")
    operator()
    settle_pool(standin, 2, custom, namespace)

    def patch(body):
        custom.patch_namespaced_custom_object(*GROUP, namespace, "exportersets", "pool", body)

    # A surplus of one: the cooldown's clock starts, in the status.
    patch({"spec": {"minAvailableReplicas": 1}})
    wait_for(lambda: state_of(get_set(custom, namespace)).get("surplusSince"), message="the cooldown's clock")
    before = state_of(get_set(custom, namespace))
    with no_event(api, "Exporter", disabled, 4.0, namespace, what="scale-down before the cooldown ran out"):
        patch({"metadata": {"annotations": FORGED}})
        patch({"metadata": {"annotations": {key: None for key in FORGED}}})
        patch({"metadata": {"annotations": FORGED}})
        # The status through the set's own endpoint (all a tenant's role
        # grants) is not written.
        patch({"status": {"operatorState": {"surplusSince": LONG_AGO}}})
    the_set = get_set(custom, namespace)
    assert state_of(the_set) == before
    assert condition(the_set, "Degraded")["status"] == "False", condition(the_set, "Degraded")
    assert condition(the_set, "ScalingLimited")["status"] == "False", condition(the_set, "ScalingLimited")

    # Neither the forged refusal nor the forged failures hold a create back.
    patch({"spec": {"minAvailableReplicas": 3}})
    settle_pool(standin, 3, custom, namespace)
    assert "surplusSince" not in state_of(get_set(custom, namespace))
