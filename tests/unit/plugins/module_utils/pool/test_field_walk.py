"""Nothing a user writes is dropped without a word: a walk over every field
of the ExporterSet, VirtualTargetClass and ExporterSetPolicy schemas
(config/crd/*.yaml), generated from the schemas, so a field added there is
walked too.

Each field, set to a value of its own on a set and class that make an
instance of qemu.jumpstarter.dev, must change what one pass produces (the
plan and its status, the instance's Pod and config Secret, the teardown
the class asks for) or be named on the set (``FieldsIgnored``, Degraded).
A field whose effect needs more than one pass from scratch (a cooldown
needs surplus, a class name is resolved before the plan) names the test
that shows it (``EFFECT_SHOWN_BY``); that test must exist.

A policy's field is walked on a policy in force for the set, over a pool
that has something for it to act on (idle members beyond the floor, made
from an older template, of different ages and labels), under both binding
modes of the class: it changes the pass (the set's plan and status, the
policy's own status) or is named on the set or on the policy.
"""

import copy
import json
import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import lifecycle
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import policy, rollout
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import scale_plan
from pool_builders import NOW, SET_NAME, exporter, exporter_set, target_class

ROOT = Path(__file__).resolve().parents[5]
QEMU = "jumpstarter_driver_qemu.driver.Qemu"

# A value of each field that differs from what the walk's set and class
# have; fields not listed get one from their schema (an enum's other value,
# an integer above the default, a key for a map).
SAMPLES = {
    "spec.minReplicas": 3,
    "spec.minAvailableReplicas": 2,
    "spec.scaleDownCooldown": "90s",
    "spec.parameters": {"resources": {"memory": "768Mi"}},
    "spec.images.exporter.image": "registry.test/exporter:walk",
    "spec.images.runtime.image": "registry.test/runtime:walk",
    "spec.selector.matchLabels": {"other": "x"},
    "spec.selector.matchExpressions.[].key": "virtual",
    "spec.selector.matchExpressions.[].operator": "NotIn",
    "spec.selector.matchExpressions.[].values": ["rpi4", "rpi5"],
    "spec.template.metadata.labels": {"extra": "x"},
    "spec.template.metadata.annotations": {"walk.example/note": "x"},
    "spec.template.spec.drivers.[].name": "renamed",
    "spec.template.spec.drivers.[].type": "jumpstarter_driver_network.driver.TcpNetwork",
    "spec.template.spec.drivers.[].ref": "qemu.power",
    "spec.template.spec.drivers.[].config": {"smp": 2},
    "spec.provisioner": "qemu-baremetal.jumpstarter.dev",
    "spec.credentialsSecretRef.name": "walk-credentials",
    "spec.caBundleConfigMapRef.name": "other-ca",
    "spec.caBundleConfigMapRef.key": "other.crt",
    "spec.scheduling.nodeSelector": {"kubernetes.io/arch": "arm64"},
    "spec.scheduling.tolerations.[].key": "walk",
    "spec.scheduling.tolerations.[].operator": "Exists",
    "spec.scheduling.tolerations.[].value": "x",
    "spec.scheduling.tolerations.[].effect": "NoSchedule",
    "spec.scheduling.tolerations.[].tolerationSeconds": 30,
    "spec.scheduling.nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}},
    "spec.scheduling.affinity.nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}},
    "spec.scheduling.affinity.podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]},
    "spec.scheduling.affinity.podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"topologyKey": "zone"}}]},
    "spec.scheduling.resources.limits": {"devices.kubevirt.io/kvm": "1"},
    "spec.scheduling.resources.requests": {"cpu": "1"},
    "spec.scheduling.resources.claims.[].name": "gpu",
    "spec.scheduling.resources.claims.[].request": "one",
}

# The first item of each list the walk sets a field of, on the walk's
# objects already (so changing one field of it is what is seen).
LIST_ITEMS = {
    "spec.selector.matchExpressions": {"key": "board", "operator": "In", "values": ["rpi4"]},
    "spec.scheduling.tolerations": {"key": "k", "operator": "Equal", "value": "v"},
    "spec.scheduling.resources.claims": {"name": "c"},
    "spec.template.spec.drivers": {"name": "qemu", "type": QEMU},
}

# Fields whose effect one pass from scratch does not show: the test that does.
EFFECT_SHOWN_BY = {
    # The CRD keeps minAvailableReplicas at or below it: only demand reaches it.
    "spec.maxReplicas": ("tests/unit/plugins/module_utils/pool/test_plan.py", "test_max_replicas_reached"),
    # The class is looked up by this name before a plan is made.
    "spec.virtualTargetClassName": ("tests/unit/plugins/module_utils/pool/test_plan.py", "test_class_not_found"),
    # Only surplus exporters wait for it.
    "spec.scaleDownCooldown": ("tests/unit/plugins/module_utils/pool/test_plan.py", "test_cooldown"),
    # The Secret's name is read where the credential is fetched (the playbook's).
    "spec.credentialsSecretRef.name": ("tests/corellium/test_corellium_provisioner.py", None),
}


def schema_fields(kind):
    crd = yaml.safe_load((ROOT / "config/crd" / f"{kind}.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return list(_fields(spec, ("spec",)))


def _fields(schema, path):
    for key, sub in (schema.get("properties") or {}).items():
        here = path + (key,)
        if sub.get("properties"):
            yield from _fields(sub, here)
        elif sub.get("type") == "array" and (sub.get("items") or {}).get("properties"):
            yield from _fields(sub["items"], here + ("[]",))
        else:
            yield here, sub


FIELDS = [("exportersets", *field) for field in schema_fields("exportersets")] + [
    ("virtualtargetclasses", *field) for field in schema_fields("virtualtargetclasses")]


def sample(path, schema):
    name = ".".join(path)
    if name in SAMPLES:
        return copy.deepcopy(SAMPLES[name])
    if schema.get("enum"):
        return next(value for value in schema["enum"] if value != schema.get("default"))
    if schema.get("type") == "integer":
        return (schema.get("default") or 0) + 1
    raise AssertionError(f"{name}: give the walk a sample value (SAMPLES)")


def put(obj, path, value):
    """Set ``path`` (``[]`` for the first item of a list, made when missing)."""
    node = obj
    for key, following in zip(path, path[1:], strict=False):
        if key == "[]":
            continue
        if following == "[]":
            node[key] = node.get(key) or [{}]
            node = node[key][0]
        else:
            node = node.setdefault(key, {})
    node[path[-1]] = value


EXPORTER = {"apiVersion": "jumpstarter.dev/v1alpha1", "kind": "Exporter",
            "metadata": {"name": "pool-0", "namespace": "lab", "uid": "exporter-uid"},
            "status": {"endpoint": "grpc.test:443", "credential": {"name": "pool-0-exporter"}}}


def walk_objects():
    the_set = exporter_set(min_available=1, max_replicas=4)
    vclass = target_class()
    vclass["spec"]["caBundleConfigMapRef"] = {"name": "walk-ca"}
    for where, item in LIST_ITEMS.items():
        put(the_set if where.startswith("spec.selector") or where.startswith("spec.template") else vclass,
            tuple(where.split(".")), [copy.deepcopy(item)])
    return the_set, vclass


def observe(the_set, vclass):
    """What one pass makes of them, as JSON, and the set's conditions."""
    plan = scale_plan(the_set, vclass, [], 0, NOW)
    provisioner = vclass["spec"]["provisioner"]
    seen = {"plan": plan, "reclaim": lifecycle.reclaim(vclass)}
    try:
        seen["pod"] = k8s_pod.instance_pod(the_set, vclass, EXPORTER, provisioner, plan["parameters"] or {},
                                           plan["images"] or {})
        seen["secret"] = k8s_pod.config_secret(the_set, EXPORTER, provisioner, plan["parameters"] or {}, "t", None)
    except ValueError as exc:  # a template the config cannot hold: its message is what is seen
        seen["refused"] = str(exc)
    # The template's hash marks any change of it (annotation, RollingOut's
    # message): it is not an effect.
    text = json.dumps(seen, sort_keys=True, default=str)
    return re.sub(rf"\b[0-9a-f]{{{rollout.HASH_LENGTH}}}\b", "<hash>", text), \
        plan["status"]["conditions"]


@pytest.mark.parametrize(("kind", "path", "schema"), FIELDS, ids=[f"{k}:{'.'.join(p)}" for k, p, _ in FIELDS])
def test_every_field_takes_effect_or_is_named(kind, path, schema):
    name = ".".join(path)
    if name in EFFECT_SHOWN_BY:
        test_file, test_name = EFFECT_SHOWN_BY[name]
        text = (ROOT / test_file).read_text()
        assert test_name is None or f"def {test_name}(" in text, f"{name}: {test_file}::{test_name} is gone"
        leaf = path[-1]
        assert leaf in text or test_name in text
        return
    the_set, vclass = walk_objects()
    before, _ = observe(the_set, vclass)
    put(the_set if kind == "exportersets" else vclass, path, sample(path, schema))
    after, conditions = observe(the_set, vclass)
    if after != before:
        return
    named = [c for c in conditions if c["status"] == "True" and c["type"] in ("FieldsIgnored", "Degraded")
             and path[-1] in c["message"]]
    assert named, f"{kind} {name}: setting it changes nothing and nothing on the set names it"


def test_the_walk_covers_every_field_it_has_a_sample_or_witness_for():
    """No sample or witness outlives its field (a renamed field is walked by its new name)."""
    walked = {".".join(path) for _, path, _ in FIELDS}
    assert set(SAMPLES) - walked == set()
    assert set(EFFECT_SHOWN_BY) - walked == set()
    policy_walked = {".".join(path) for path, _ in POLICY_FIELDS}
    assert set(POLICY_SAMPLES) - policy_walked == set()
    assert set(POLICY_EFFECT_SHOWN_BY) - policy_walked == set()
    assert {key for key in POLICY_BASE if not any(name.startswith(key) for name in policy_walked)} == set()


# -- ExporterSetPolicy ---------------------------------------------------------

POLICY_FIELDS = schema_fields("exportersetpolicies")
POLICY_SAMPLES = {
    "spec.exporterSetName": "another-set",
    "spec.paused": True,
    "spec.scaleIn.preferSelector.matchLabels": {"tier": "spare"},
    "spec.scaleIn.preferSelector.matchExpressions.[].key": "board",
    "spec.scaleIn.preferSelector.matchExpressions.[].operator": "NotIn",
    "spec.scaleIn.preferSelector.matchExpressions.[].values": ["gold"],
    "spec.healing.minFailingDuration": "10m",
    "spec.healing.unschedulableBackoff.base": "2m",
    "spec.healing.unschedulableBackoff.max": "2h",
    "spec.leaseWait.target": "30s",
}
# What the policy of the walk holds besides its set's name, for the fields
# under each key: an item of the list, the field that makes the object valid.
POLICY_BASE = {
    "spec.scaleIn.preferSelector.matchExpressions": ("scaleIn", {
        "preferSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["spare"]}]}}),
    "spec.leaseWait": ("leaseWait", {"target": "5m"}),
}
# Policy fields whose effect needs what one pass over the walk's pool does
# not have (failures in a row, an unschedulable instance, a lease history).
_HEALING = "tests/unit/plugins/module_utils/pool/test_plan_healing.py"
POLICY_EFFECT_SHOWN_BY = {
    "spec.rollout.maxUnavailable": ("tests/unit/plugins/module_utils/pool/test_rollout_plan.py",
                                    "test_proactive_respects_max_unavailable_and_the_warm_buffer"),
    "spec.healing.startupFailureThreshold": (_HEALING, "test_startup_failure_threshold_from_the_policy"),
    "spec.healing.minFailingDuration": (_HEALING, "test_min_failing_duration_holds_replica_failure_back"),
    "spec.healing.unschedulableBackoff.base": (_HEALING, "test_unschedulable_backoff_grows"),
    "spec.healing.unschedulableBackoff.max": (_HEALING, "test_unschedulable_backoff_grows"),
    "spec.leaseWait.percentile": ("tests/unit/plugins/module_utils/pool/test_sizing.py",
                                  "test_the_buffer_meets_the_percentile_in_a_base_stock_pool_and_is_at_most_one_over"),
    "spec.leaseWait.maxBuffer": ("tests/unit/plugins/module_utils/pool/test_sizing.py",
                                 "test_the_buffer_stays_within_floor_and_ceiling_whatever_the_history"),
}
BINDINGS = ("Immediate", c.BINDING_WAIT_FOR_FIRST_CONSUMER)


def policy_walk_objects(name, binding):
    """The walk's set (three kept, at least: minReplicas), its class, its pool
    (four idle members of an older template, oldest first, the third
    labelled tier=spare) and the policy for the field ``name``."""
    the_set = exporter_set(min_replicas=3, min_available=1, max_replicas=8, cooldown="0s")
    vclass = target_class(binding=binding)
    pool = [exporter(f"pool-{index}", created=-4000 + 1000 * index,
                     labels={"board": "rpi4", "virtual": "true", **({"tier": "spare"} if index == 2 else {})},
                     annotations={c.ANNOTATION_TEMPLATE_HASH: "0" * rollout.HASH_LENGTH})
            for index in range(4)]
    esp = {"metadata": {"name": "walk-policy", "namespace": "lab", "generation": 1},
           "spec": {"exporterSetName": SET_NAME}}
    for key, (section, value) in POLICY_BASE.items():
        if name.startswith(key):
            esp["spec"][section] = copy.deepcopy(value)
    return the_set, vclass, pool, esp


def observe_policy(the_set, vclass, pool, esp):
    """One pass with the policy as the operator reads it (``policy_for``):
    the set's plan, and the policy's own status; the conditions of both."""
    in_force, invalid = policy.policy_for(the_set, [esp])
    plan = policy.apply_to_plan(scale_plan(the_set, vclass, pool, [], NOW, options={"policy": in_force}),
                                the_set, invalid, NOW)
    esp_status = policy.desired_status(esp, [esp], [the_set], NOW)
    text = json.dumps({"plan": plan, "policy": esp_status}, sort_keys=True, default=str)
    return (re.sub(rf"\b[0-9a-f]{{{rollout.HASH_LENGTH}}}\b", "<hash>", text),
            plan["status"]["conditions"] + esp_status["conditions"])


def _names(message, path):
    """Whether ``message`` names the field at ``path`` or an object it is in
    (``spec.leaseWait`` names each of its fields)."""
    return any(".".join(path[:end]).replace(".[]", "[]") in message for end in range(2, len(path) + 1)) \
        or path[-1] in message


@pytest.mark.parametrize("binding", BINDINGS)
@pytest.mark.parametrize(("path", "schema"), POLICY_FIELDS, ids=[".".join(p) for p, _ in POLICY_FIELDS])
def test_every_policy_field_takes_effect_or_is_named(path, schema, binding):
    name = ".".join(path)
    if name in POLICY_EFFECT_SHOWN_BY:
        test_file, test_name = POLICY_EFFECT_SHOWN_BY[name]
        text = (ROOT / test_file).read_text()
        assert f"def {test_name}(" in text, f"{name}: {test_file}::{test_name} is gone"
        return
    the_set, vclass, pool, esp = policy_walk_objects(name, binding)
    before, _ = observe_policy(the_set, vclass, pool, esp)
    value = POLICY_SAMPLES[name] if name in POLICY_SAMPLES else sample(path, schema)
    put(esp, path, value)
    assert policy.validate(esp["spec"]) == [], f"{name}: the walk's sample {value!r} is not a valid policy"
    after, conditions = observe_policy(the_set, vclass, pool, esp)
    if after != before:
        return
    named = [x for x in conditions if _names(x["message"], path) and (
        (x["status"] == "True" and x["type"] in ("FieldsIgnored", "Degraded"))
        or (x["status"] == "False" and x["type"] in (c.CONDITION_POLICY_VALID, policy.CONDITION_VALID)))]
    assert named, f"ExporterSetPolicy {name} ({binding}): setting it changes nothing and nothing names it"
