"""Our CRDs (config/crd/) against the upstream Jumpstarter CRDs.

Every object is sent with server-side dry-run to two real API servers: the
run's bed (our ExporterSet/VirtualTargetClass) and a second bed holding the
upstream ones, since both define the same CRD names. They must agree on
every case, and on the defaults they fill in, except for the deliberately
stricter rules of our ExporterSet (see config/crd/exportersets.yaml):
  - virtualTargetClassName must be a DNS-1123 subdomain,
  - scaleDownCooldown must be a non-negative Go duration,
  - every list and string a set gives is bounded (BOUND_CASES,
    docs/reference/limits.md),
and the one place ours is more lenient: a template driver may leave out its
name, as JEP-0014's examples do (the provisioner derives one).
"""

from __future__ import annotations

import copy
import time

import pytest
import yaml
from jep_examples import jep_examples, require_jep
from jumpstarter_standin import wait_for
from kubernetes import client
from kubernetes.client.rest import ApiException
from operator_process import ROOT, OperatorProcess
from pool_helpers import condition, get_set, make_class, make_set
from testbed import namespace_name, upstream_crd_files

pytestmark = pytest.mark.testbed

GROUP = "virtualtarget.jumpstarter.dev"
VERSION = "v1alpha1"
PLURALS = {"ExporterSet": "exportersets", "VirtualTargetClass": "virtualtargetclasses"}
SAMPLES_DIR = ROOT / "tests/data/upstream-samples"

SET_SPEC = {
    "virtualTargetClassName": "qemu-rpi4",
    "selector": {"matchLabels": {"board": "rpi4"}},
    "template": {
        "metadata": {"labels": {"board": "rpi4"}},
        "spec": {"drivers": [{"name": "power", "type": "jumpstarter_driver_power.driver.QemuPower"}]},
    },
}
CLASS_SPEC = {"provisioner": "qemu.jumpstarter.dev"}


def changed(spec: dict, changes: dict) -> dict:
    """A copy of spec with top-level keys replaced; a value of None drops the key."""
    result = copy.deepcopy(spec)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def exporter_set(**changes):
    return "ExporterSet", changed(SET_SPEC, changes)


def virtual_target_class(**changes):
    return "VirtualTargetClass", changed(CLASS_SPEC, changes)


def drivers(*entries):
    return exporter_set(template={"metadata": SET_SPEC["template"]["metadata"], "spec": {"drivers": list(entries)}})


QEMU_POWER = "jumpstarter_driver_power.driver.QemuPower"

# (case id, (kind, spec), accepted by both CRDs)
AGREEMENT_CASES = [
    ("set-minimal", exporter_set(), True),
    (
        "set-no-ceiling-allows-any-minimum",
        exporter_set(maxReplicas=0, minReplicas=50, minAvailableReplicas=9),
        True,
    ),
    ("set-min-equals-max", exporter_set(minReplicas=3, maxReplicas=3), True),
    ("set-warm-buffer-equals-max", exporter_set(minAvailableReplicas=4, maxReplicas=4), True),
    ("set-in-place-reuse", exporter_set(recycleStrategy="InPlaceReuse"), True),
    (
        "set-parameters-free-form",
        exporter_set(parameters={"resources": {"memory": "8Gi"}, "x": [1, {"y": None}]}),
        True,
    ),
    (
        "set-images",
        exporter_set(
            images={
                "exporter": {"image": "quay.io/a/b:1", "imagePullPolicy": "Always"},
                "runtime": {"image": "quay.io/a/q:2", "imagePullPolicy": "Never"},
            }
        ),
        True,
    ),
    (
        "set-match-expressions",
        exporter_set(selector={"matchExpressions": [{"key": "board", "operator": "In", "values": ["rpi4", "rpi5"]}]}),
        True,
    ),
    # An empty template with an empty selector (ours refuses a selector that
    # does not select the template's labels: STRICTER_CASES).
    ("set-empty-template", exporter_set(template={}, selector={}), True),
    ("set-no-drivers", drivers(), True),
    ("set-driver-ref", drivers({"name": "power", "ref": "qemu.power"}), True),
    (
        "set-driver-type-with-config",
        drivers({"name": "tcp", "type": "x.TcpNetwork", "config": {"port": 22}}),
        True,
    ),
    ("set-class-name-with-dots", exporter_set(virtualTargetClassName="qemu.rpi4"), True),
    ("set-cooldown-compound", exporter_set(scaleDownCooldown="1h30m15s"), True),
    ("set-cooldown-zero", exporter_set(scaleDownCooldown="0"), True),
    ("set-cooldown-fraction", exporter_set(scaleDownCooldown="1.5h"), True),
    ("set-cooldown-micro", exporter_set(scaleDownCooldown="250µs"), True),
    ("set-missing-class-name", exporter_set(virtualTargetClassName=None), False),
    ("set-missing-selector", exporter_set(selector=None), False),
    ("set-missing-template", exporter_set(template=None), False),
    ("set-empty-class-name", exporter_set(virtualTargetClassName=""), False),
    ("set-negative-min", exporter_set(minReplicas=-1), False),
    ("set-negative-max", exporter_set(maxReplicas=-1), False),
    ("set-negative-warm-buffer", exporter_set(minAvailableReplicas=-1), False),
    ("set-min-above-max", exporter_set(minReplicas=5, maxReplicas=3), False),
    ("set-min-above-default-max", exporter_set(minReplicas=5), False),
    ("set-warm-buffer-above-max", exporter_set(minAvailableReplicas=5, maxReplicas=3), False),
    ("set-max-not-integer", exporter_set(maxReplicas="four"), False),
    ("set-unknown-recycle-strategy", exporter_set(recycleStrategy="Reboot"), False),
    (
        "set-unknown-pull-policy",
        exporter_set(images={"exporter": {"imagePullPolicy": "Sometimes"}}),
        False,
    ),
    (
        "set-driver-type-and-ref",
        drivers({"name": "p", "type": QEMU_POWER, "ref": "qemu.power"}),
        False,
    ),
    ("set-driver-neither-type-nor-ref", drivers({"name": "p"}), False),
    (
        "set-driver-ref-with-config",
        drivers({"name": "p", "ref": "qemu.power", "config": {"a": 1}}),
        False,
    ),
    ("set-driver-empty-name", drivers({"name": "", "type": QEMU_POWER}), False),
    ("set-driver-empty-type", drivers({"name": "p", "type": ""}), False),
    ("set-driver-ref-double-dot", drivers({"name": "p", "ref": "qemu..power"}), False),
    ("set-driver-ref-leading-dot", drivers({"name": "p", "ref": ".power"}), False),
    (
        "set-selector-expression-without-operator",
        exporter_set(selector={"matchExpressions": [{"key": "a"}]}),
        False,
    ),
    ("class-minimal", virtual_target_class(), True),
    (
        "class-wait-for-first-consumer-retain",
        virtual_target_class(bindingMode="WaitForFirstConsumer", reclaimPolicy="Retain"),
        True,
    ),
    (
        "class-credentials-and-ca",
        virtual_target_class(credentialsSecretRef={"name": "corellium"}, caBundleConfigMapRef={"name": "corp-ca"}),
        True,
    ),
    ("class-empty-credentials-ref", virtual_target_class(credentialsSecretRef={}), True),
    (
        "class-scheduling",
        virtual_target_class(
            scheduling={
                "nodeSelector": {"kubernetes.io/arch": "arm64"},
                "tolerations": [
                    {
                        "key": "jumpstarter.dev/kvm",
                        "operator": "Exists",
                        "effect": "NoSchedule",
                        "tolerationSeconds": 30,
                    }
                ],
                "resources": {
                    "limits": {"devices.kubevirt.io/kvm": "1", "cpu": 2},
                    "requests": {"memory": "512Mi", "cpu": "500m"},
                },
            }
        ),
        True,
    ),
    (
        "class-parameters-free-form",
        virtual_target_class(parameters={"firmware": {"url": "x"}, "cpu": 4}),
        True,
    ),
    ("class-missing-provisioner", virtual_target_class(provisioner=None), False),
    ("class-empty-provisioner", virtual_target_class(provisioner=""), False),
    ("class-unknown-binding-mode", virtual_target_class(bindingMode="Lazy"), False),
    ("class-unknown-reclaim-policy", virtual_target_class(reclaimPolicy="Recycle"), False),
    (
        "class-ca-bundle-without-name",
        virtual_target_class(caBundleConfigMapRef={"key": "ca.crt"}),
        False,
    ),
    ("class-ca-bundle-empty-name", virtual_target_class(caBundleConfigMapRef={"name": ""}), False),
    (
        "class-bad-quantity",
        virtual_target_class(scheduling={"resources": {"limits": {"cpu": "lots"}}}),
        False,
    ),
    (
        "class-tolerations-not-a-list",
        virtual_target_class(scheduling={"tolerations": {"key": "a"}}),
        False,
    ),
    (
        "class-node-selector-not-string",
        virtual_target_class(scheduling={"nodeSelector": {"a": 1}}),
        False,
    ),
    (
        "class-unknown-pull-policy",
        virtual_target_class(images={"runtime": {"imagePullPolicy": "Maybe"}}),
        False,
    ),
]

# Accepted upstream, rejected by our ExporterSet on purpose (module docstring).
STRICTER_CASES = [
    ("class-name-cross-namespace", exporter_set(virtualTargetClassName="other-ns/qemu-rpi4")),
    ("class-name-upper-case", exporter_set(virtualTargetClassName="Qemu-RPi4")),
    ("class-name-underscore", exporter_set(virtualTargetClassName="qemu_rpi4")),
    ("class-name-leading-dash", exporter_set(virtualTargetClassName="-qemu")),
    ("class-name-too-long", exporter_set(virtualTargetClassName="a" * 254)),
    ("cooldown-words", exporter_set(scaleDownCooldown="5 minutes")),
    ("cooldown-without-unit", exporter_set(scaleDownCooldown="300")),
    ("cooldown-negative", exporter_set(scaleDownCooldown="-5m")),
    ("cooldown-days", exporter_set(scaleDownCooldown="1d")),
    ("cooldown-empty", exporter_set(scaleDownCooldown="")),
    ("selector-not-in-empty-template", exporter_set(template={})),
    ("selector-other-value", exporter_set(selector={"matchLabels": {"board": "rpi5"}})),
    ("selector-key-not-in-template", exporter_set(selector={"matchLabels": {"board": "rpi4", "lab": "a"}})),
    ("selector-in-other-values", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "In", "values": ["rpi5"]}]})),
    ("selector-not-in-own-value", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "NotIn", "values": ["rpi4"]}]})),
    ("selector-exists-missing-key", exporter_set(
        selector={"matchExpressions": [{"key": "lab", "operator": "Exists"}]})),
    ("selector-does-not-exist-present-key", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "DoesNotExist"}]})),
    ("selector-unknown-operator", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "Equals", "values": ["rpi4"]}]})),
    ("selector-in-without-values", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "In"}]})),
    ("selector-exists-with-values", exporter_set(
        selector={"matchExpressions": [{"key": "board", "operator": "Exists", "values": ["rpi4"]}]})),
]

# Accepted by both: selectors that do select the template's labels.
SELECTING_CASES = [
    ("selector-empty", exporter_set(selector={})),
    ("selector-subset", exporter_set(template={"metadata": {"labels": {"board": "rpi4", "lab": "a"}}})),
    ("selector-expressions-all-operators", exporter_set(selector={"matchExpressions": [
        {"key": "board", "operator": "In", "values": ["rpi4", "rpi5"]},
        {"key": "board", "operator": "NotIn", "values": ["rpi3"]},
        {"key": "lab", "operator": "NotIn", "values": ["a"]},
        {"key": "board", "operator": "Exists"},
        {"key": "lab", "operator": "DoesNotExist"}]})),
    ("selector-labels-and-expressions", exporter_set(selector={
        "matchLabels": {"board": "rpi4"},
        "matchExpressions": [{"key": "board", "operator": "In", "values": ["rpi4"]}]})),
]

# Our VirtualTargetClass keeps scheduling.affinity; upstream prunes it. Both
# accept the object, only the stored spec differs in that field.
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
            ]
        }
    }
}


@pytest.fixture(scope="module")
def upstream_bed(testbed_factory):
    """etcd + kube-apiserver with upstream's own ExporterSet/VirtualTargetClass CRDs."""
    missing = [str(path) for path in upstream_crd_files() if not path.is_file()]
    if missing:
        # A plain clone has no upstream release beside it to compare with.
        pytest.skip(f"upstream CRDs not beside the checkout: {', '.join(missing)}")
    return testbed_factory("upstream-crds", crd_files=upstream_crd_files(), controllers=False)


@pytest.fixture(scope="module")
def ours(testbed):
    with testbed.api_client() as api:
        yield client.CustomObjectsApi(api)


@pytest.fixture(scope="module")
def upstream(upstream_bed):
    with upstream_bed.api_client() as api:
        yield client.CustomObjectsApi(api)


def dry_run_create(api: client.CustomObjectsApi, kind: str, spec: dict, name: str = "case"):
    """(accepted, defaulted spec or the API's rejection message)."""
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }
    try:
        created = api.create_namespaced_custom_object(GROUP, VERSION, "default", PLURALS[kind], body, dry_run="All")
    except ApiException as error:
        if error.status != 422:
            raise
        return False, error.body
    return True, created["spec"]


@pytest.mark.parametrize(("case", "obj", "valid"), AGREEMENT_CASES, ids=[c[0] for c in AGREEMENT_CASES])
def test_ours_and_upstream_agree(ours, upstream, case, obj, valid):
    kind, spec = obj
    ours_accepted, ours_result = dry_run_create(ours, kind, spec)
    upstream_accepted, upstream_result = dry_run_create(upstream, kind, spec)
    assert upstream_accepted == valid, f"upstream: {upstream_result}"
    assert ours_accepted == valid, f"ours: {ours_result}"
    if valid:
        assert ours_result == upstream_result, "the two CRDs default or prune differently"


def test_agreement_table_is_large_enough():
    assert len(AGREEMENT_CASES) >= 30
    assert {valid for *_, valid in AGREEMENT_CASES} == {True, False}


@pytest.mark.parametrize(("case", "obj"), STRICTER_CASES, ids=[c[0] for c in STRICTER_CASES])
def test_ours_is_deliberately_stricter(ours, upstream, case, obj):
    kind, spec = obj
    upstream_accepted, upstream_result = dry_run_create(upstream, kind, spec)
    ours_accepted, ours_result = dry_run_create(ours, kind, spec)
    assert upstream_accepted, f"upstream: {upstream_result}"
    assert not ours_accepted
    if case.startswith("selector-"):
        field = "spec.selector"
    else:
        field = "virtualTargetClassName" if "class-name" in case else "scaleDownCooldown"
    assert field in ours_result


@pytest.mark.parametrize(("case", "obj"), SELECTING_CASES, ids=[c[0] for c in SELECTING_CASES])
def test_selectors_that_select_the_template_are_accepted(ours, upstream, case, obj):
    kind, spec = obj
    ours_accepted, ours_result = dry_run_create(ours, kind, spec)
    upstream_accepted, upstream_result = dry_run_create(upstream, kind, spec)
    assert upstream_accepted, upstream_result
    assert ours_accepted, ours_result


def test_drivers_without_name_are_accepted_by_ours_only(ours, upstream):
    """JEP-0014's examples list drivers by type alone: ours keeps them as
    written (exporter_config.named_drivers names them), upstream refuses them."""
    entries = [{"type": QEMU_POWER}, {"type": "jumpstarter_driver_network.driver.TcpNetwork",
                                      "config": {"port": 22}}, {"ref": "qemu.power"}]
    kind, spec = drivers(*entries)
    ours_accepted, ours_spec = dry_run_create(ours, kind, spec)
    upstream_accepted, upstream_result = dry_run_create(upstream, kind, spec)
    assert ours_accepted, ours_spec
    assert ours_spec["template"]["spec"]["drivers"] == entries
    assert not upstream_accepted
    assert "name" in upstream_result


def test_affinity_is_kept_by_ours_and_pruned_upstream(ours, upstream):
    kind, spec = virtual_target_class(scheduling={"affinity": AFFINITY})
    ours_accepted, ours_spec = dry_run_create(ours, kind, spec)
    upstream_accepted, upstream_spec = dry_run_create(upstream, kind, spec)
    assert ours_accepted and upstream_accepted
    assert ours_spec["scheduling"]["affinity"] == AFFINITY
    assert "affinity" not in upstream_spec.get("scheduling", {})


def test_node_affinity_as_the_jep_writes_it_is_kept_by_ours(ours, upstream):
    """JEP-0014's common fields give scheduling.nodeAffinity beside
    nodeSelector; ours keeps it (the Pod gets it as affinity.nodeAffinity,
    tests/unit/plugins/module_utils/k8s/test_k8s_pod.py), upstream prunes it."""
    scheduling = {"nodeSelector": {"kubernetes.io/arch": "arm64"},
                  "nodeAffinity": AFFINITY["nodeAffinity"], "affinity": AFFINITY}
    kind, spec = virtual_target_class(scheduling=scheduling)
    ours_accepted, ours_spec = dry_run_create(ours, kind, spec)
    upstream_accepted, upstream_spec = dry_run_create(upstream, kind, spec)
    assert ours_accepted and upstream_accepted
    assert ours_spec["scheduling"] == scheduling
    assert "nodeAffinity" not in upstream_spec.get("scheduling", {})


def _named(count, **entry):
    return [{"name": f"d{index}", "type": QEMU_POWER, **entry} for index in range(count)]


def _template(drivers_=(), annotations=None):
    metadata = {**SET_SPEC["template"]["metadata"], **({"annotations": annotations} if annotations else {})}
    return {"metadata": metadata, "spec": {"drivers": list(drivers_)}}


# (case, the largest object the bound takes, one just over it, the field the
# refusal names): docs/reference/limits.md. Upstream accepts both.
BOUND_CASES = [
    ("drivers", exporter_set(template=_template(_named(64))), exporter_set(template=_template(_named(65))),
     "spec.template.spec.drivers"),
    ("driver-type", exporter_set(template=_template(_named(1, type="a." + "b" * 510))),
     exporter_set(template=_template(_named(1, type="a." + "b" * 511))), "spec.template.spec.drivers[0].type"),
    ("driver-name", exporter_set(template=_template([{"name": "n" * 253, "type": QEMU_POWER}])),
     exporter_set(template=_template([{"name": "n" * 254, "type": QEMU_POWER}])),
     "spec.template.spec.drivers[0].name"),
    ("driver-config", exporter_set(template=_template(_named(1, config={f"k{i}": i for i in range(64)}))),
     exporter_set(template=_template(_named(1, config={f"k{i}": i for i in range(65)}))),
     "spec.template.spec.drivers[0].config"),
    ("annotations", exporter_set(template=_template(annotations={f"a{i}": "v" for i in range(64)})),
     exporter_set(template=_template(annotations={f"a{i}": "v" for i in range(65)})),
     "spec.template.metadata.annotations"),
    ("annotation-value", exporter_set(template=_template(annotations={"a": "v" * 65536})),
     exporter_set(template=_template(annotations={"a": "v" * 65537})), "spec.template.metadata.annotations.a"),
    ("image", exporter_set(images={"runtime": {"image": "r/" + "i" * 1022}}),
     exporter_set(images={"runtime": {"image": "r/" + "i" * 1023}}), "spec.images.runtime.image"),
    ("cooldown", exporter_set(scaleDownCooldown="1s" * 32), exporter_set(scaleDownCooldown="1s" * 33),
     "spec.scaleDownCooldown"),
]


@pytest.mark.parametrize(("case", "largest", "over", "field"), BOUND_CASES, ids=[c[0] for c in BOUND_CASES])
def test_every_list_and_string_a_set_gives_is_bounded(ours, upstream, case, largest, over, field):
    """Ours takes a set at each bound as upstream does, and refuses one just
    over it, naming the field; upstream has no bounds and takes both."""
    for obj in (largest, over):
        accepted, result = dry_run_create(upstream, *obj)
        assert accepted, f"upstream: {result}"
    accepted, result = dry_run_create(ours, *largest)
    assert accepted, result
    accepted, result = dry_run_create(ours, *over)
    assert not accepted
    assert field in result


def test_a_policys_lists_and_strings_are_bounded(ours):
    """ExporterSetPolicy is ours alone: its prefer selector and durations are
    bounded as a set's selector is."""
    def create(spec):
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ExporterSetPolicy", "metadata": {"name": "case"},
                "spec": {"exporterSetName": "pool", **spec}}
        try:
            ours.create_namespaced_custom_object(GROUP, VERSION, "default", "exportersetpolicies", body,
                                                 dry_run="All")
        except ApiException as error:
            assert error.status == 422, error.body
            return error.body
        return None

    def prefer(count):
        return {"scaleIn": {"preferSelector": {"matchExpressions": [
            {"key": f"k{index}", "operator": "Exists"} for index in range(count)]}}}

    assert create(prefer(32)) is None
    assert "spec.scaleIn.preferSelector.matchExpressions" in create(prefer(33))
    assert create({"healing": {"minFailingDuration": "1s" * 32}}) is None
    assert "spec.healing.minFailingDuration" in create({"healing": {"minFailingDuration": "1s" * 33}})


def upstream_samples():
    for path in sorted(SAMPLES_DIR.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") in PLURALS:
                yield pytest.param(document, id=f"{path.stem}:{document['metadata']['name']}")


@pytest.mark.parametrize("sample", list(upstream_samples()))
def test_upstream_samples_are_accepted(ours, upstream, sample):
    ours_accepted, ours_spec = dry_run_create(ours, sample["kind"], sample["spec"], sample["metadata"]["name"])
    upstream_accepted, upstream_spec = dry_run_create(
        upstream, sample["kind"], sample["spec"], sample["metadata"]["name"]
    )
    assert ours_accepted, ours_spec
    assert upstream_accepted, upstream_spec
    assert ours_spec == upstream_spec


def test_every_sample_kind_is_covered():
    kinds = {param.values[0]["kind"] for param in upstream_samples()}
    assert kinds == set(PLURALS)


JEP_EXAMPLES = jep_examples()


@pytest.mark.parametrize("example", JEP_EXAMPLES, ids=[e["_example"] for e in JEP_EXAMPLES])
def test_jep_examples_are_accepted_as_written(ours, upstream, example):
    """Every VirtualTargetClass and ExporterSet of JEP-0014, by server-side
    dry-run, by our CRDs and upstream's alike (their parameters are checked by
    tests/unit/plugins/module_utils/pool/test_jep_examples.py)."""
    name = example["metadata"]["name"]
    ours_accepted, ours_spec = dry_run_create(ours, example["kind"], example["spec"], name)
    upstream_accepted, upstream_spec = dry_run_create(upstream, example["kind"], example["spec"], name)
    assert ours_accepted, ours_spec
    assert upstream_accepted, upstream_spec
    assert ours_spec == upstream_spec


def test_jep_gives_examples_of_both_kinds():
    require_jep()
    assert {e["kind"] for e in JEP_EXAMPLES} == set(PLURALS)


# The operator on upstream's CRDs alone (the bed above: upstream's ExporterSet
# and VirtualTargetClass, no ExporterSetPolicy CRD). What works: the operator
# starts and serves; a set over a qemu class gets its Exporters, counters and
# conditions. What degrades, never with a crash or a write loop: the fields
# upstream's schema prunes (status.updatedReplicas, the class's status) are
# gone after each write and not written again and again; without the policy
# CRD every set runs with the default controls. docs/beside-upstream.md says
# the same for users.
EXPORTERS = ("jumpstarter.dev", "v1alpha1")


def owned(custom, namespace):
    return sorted(e["metadata"]["name"] for e in custom.list_namespaced_custom_object(
        *EXPORTERS, namespace, "exporters")["items"]
        if any(r.get("kind") == "ExporterSet" and r.get("name") == "pool"
               for r in e["metadata"].get("ownerReferences") or ()))


def test_beside_upstream_the_operator_serves_and_degrades_without_a_fight(upstream_bed, tmp_path):
    namespace = namespace_name("beside-upstream")
    with upstream_bed.api_client() as api:
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
        make_class(custom, namespace)
        make_set(custom, namespace, minAvailableReplicas=2, maxReplicas=3)
        # Upstream's CRD takes a selector that does not select the template (ours refuses it).
        make_set(custom, namespace, name="loose", board="loose", minAvailableReplicas=0,
                 selector={"matchLabels": {"board": "elsewhere"}})
        proc = OperatorProcess(str(upstream_bed.kubeconfig), namespace, tmp_path).start()
        try:
            proc.wait_ready()
            wait_for(lambda: len(owned(custom, namespace)) == 2, timeout=60, message="two Exporters")
            status = wait_for(lambda: (get_set(custom, namespace).get("status") or {}).get("replicas") == 2
                              and get_set(custom, namespace)["status"], timeout=60, message="status written")
            available = condition(get_set(custom, namespace), "Available")
            assert available is not None and available["status"] == "False"  # none ready: no controller here
            assert condition(get_set(custom, namespace), "SetHealthy")["status"] == "True"
            # Pruned by upstream's schema: written, and gone.
            assert "updatedReplicas" not in status
            vclass = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualtargetclasses",
                                                         "qemu-small")
            assert "status" not in vclass or not vclass["status"]

            loose = wait_for(lambda: condition(get_set(custom, namespace, "loose"), "SelectorOverlap"),
                             timeout=30, message="the loose set says its selector misses its template")
            assert (loose["status"], loose["reason"]) == ("True", "SelectorMismatch")

            # No fight over what is pruned: the set and the class settle.
            def versions():
                return (get_set(custom, namespace)["metadata"]["resourceVersion"],
                        custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "virtualtargetclasses",
                                                            "qemu-small")["metadata"]["resourceVersion"])

            settled = wait_for(lambda: _steady(versions, 3.0), timeout=60, message="set and class settle")
            assert settled
            events = core.list_namespaced_event(namespace).items
            assert len(events) < 20, [(e.reason, e.count, e.message) for e in events]
            assert proc.proc.poll() is None
            log = proc.log_tail(400)
            assert "Traceback" not in log, log
        finally:
            proc.stop()
            print(f"--- operator log {proc.log_path} ---\n{proc.log_tail(200)}")
            core.delete_namespace(namespace)


def _steady(read, seconds):
    """True when ``read()`` gives the same value for ``seconds``, else None."""
    first = read()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if read() != first:
            return None
    return True
