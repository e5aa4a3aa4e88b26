"""Where each kind lives in the API, and the one ownership rule."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import credentials
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.lease_safety import (
    served_by,
)
from pool_builders import NOW, exporter, exporter_set, lease


def test_each_kind_is_spelled_once_with_its_api_version():
    assert c.EXPORTER.api_version == "jumpstarter.dev/v1alpha1"
    assert c.EXPORTER_SET.api_version == "virtualtarget.jumpstarter.dev/v1alpha1"
    assert c.POD.api_version == "v1"
    assert c.LEASE.at("lab") == ("jumpstarter.dev", "v1alpha1", "lab", "leases")
    assert c.VIRTUAL_TARGET_CLASS.at("lab")[3] == "virtualtargetclasses"


def _ref(kind, name, uid, controller=True):
    return {"apiVersion": "x/v1", "kind": kind, "name": name, "uid": uid, "controller": controller}


def _obj(*refs):
    return {"metadata": {"name": "o", "ownerReferences": list(refs)}}


@pytest.mark.parametrize(("obj", "uid", "owned"), [
    (_obj(_ref("ExporterSet", "pool", "u1")), "u1", True),
    (_obj(_ref("ExporterSet", "pool", "u0")), "u1", False),           # a namesake's
    (_obj(_ref("ExporterSet", "pool", "u1", controller=False)), "u1", False),
    (_obj(_ref("Other", "x", "u9", controller=False), _ref("ExporterSet", "pool", "u1")), "u1", True),
    (_obj(), "u1", False),
    (_obj(_ref("ExporterSet", "pool", None)), None, False),           # no UID is nobody's
])
def test_ownership_is_the_controller_reference_uid(obj, uid, owned):
    assert k8s_objects.controlled_by(obj, uid) is owned


def test_owner_name_of_a_kind():
    obj = _obj(_ref("Exporter", "rpi4-0", "u1"))
    assert k8s_objects.controller_of(obj, "Exporter") == "rpi4-0"
    assert k8s_objects.controller_of(obj, "ExporterSet") is None
    assert k8s_objects.controller_of(_obj(_ref("Exporter", "rpi4-0", "u1", controller=False)), "Exporter") is None


def test_controller_reference_is_what_the_rule_reads():
    owner = exporter_set("pool")
    made = {"metadata": {"ownerReferences": [k8s_objects.controller_reference(owner)]}}
    assert k8s_objects.controlled_by(made, owner["metadata"]["uid"])
    assert k8s_objects.controller_of(made, c.EXPORTER_SET.kind) == "pool"


def test_a_secret_with_a_non_controller_exporter_reference_is_not_issued_to_it():
    the_exporter = {"metadata": {"name": "rpi4-0", "uid": "u1"}}
    secret = _obj(_ref("Exporter", "rpi4-0", "u1", controller=False))
    assert not credentials.issued_to(secret, the_exporter)
    secret["metadata"]["ownerReferences"][0]["controller"] = True
    assert credentials.issued_to(secret, the_exporter)


def test_a_lease_is_served_by_the_exporter_that_controls_it():
    the_exporter = exporter("rpi4-0")
    the_exporter["metadata"]["uid"] = "u1"
    the_lease = lease("l1", assigned="rpi4-0", ended=True, created=-7200)
    the_lease["metadata"]["ownerReferences"] = [_ref("Exporter", "rpi4-0", "u0")]
    assert not served_by(the_lease, the_exporter)
    the_lease["metadata"]["ownerReferences"] = [_ref("Exporter", "rpi4-0", "u1")]
    assert served_by(the_lease, the_exporter)
    # A reference that is not the controller's decides nothing: the lease
    # began before this Exporter was made, so a namesake served it.
    the_lease["metadata"]["ownerReferences"] = [_ref("Exporter", "rpi4-0", "u1", controller=False)]
    assert not served_by(the_lease, the_exporter)


def test_an_exporter_carrying_the_set_label_but_detached_is_not_the_sets():
    """A set's headroom counts the Exporters it owns, not those with its label
    (an Exporter detached by teardown keeps the label)."""
    sets = [exporter_set("a-set", max_replicas=1), exporter_set("b-set", max_replicas=1)]
    owned = exporter("a-set-0", owner="a-set", lease="someone")
    # a-set is full: the lease goes to b-set.
    assert attribute_lease_demand(sets, [lease("l1")], [owned], NOW) == {"a-set": [], "b-set": ["l1"]}
    # Detached, with labels the lease does not select: one it selects is an
    # Exporter no set controls, and the lease would be nobody's demand
    # (pool/demand.py).
    detached = exporter("a-set-0", owner="a-set", lease="someone", labels={"board": "other"})
    del detached["metadata"]["ownerReferences"]
    # Equal headroom: the name decides.
    assert attribute_lease_demand(sets, [lease("l1")], [detached], NOW) == {"a-set": ["l1"], "b-set": []}
