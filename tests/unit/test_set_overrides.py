"""No credential redirect: a set cannot change where the class's credentials go.

The rule (``set_overrides.resolve``), the plan that reports it, and what a
reconcile hands the provisioner entry points (``k8s_observe``).
"""

import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
    merge_images,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.set_overrides import (
    resolve,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pool_builders import NOW, exporter, exporter_set, target_class

API_HOST = "app.corellium.example"
PROJECT = "778f00af-5e9b-40e6-8e7f-c4f14b632e9c"
OTHER_PROJECT = "e2fdb33c-37ae-4b22-878d-49e4758a51f0"
CORELLIUM = {"api": {"host": API_HOST, "projectId": PROJECT},
             "device": {"flavor": "kronos", "os": "1.1.1"}}
CLASS_IMAGE = {"image": "quay.io/example/jumpstarter:0.9.0", "imagePullPolicy": "IfNotPresent"}
HOSTS = [{"name": "lab1", "address": "10.0.0.1", "user": "svc", "slots": 2},
         {"name": "lab2", "slots": 2}]
BAREMETAL = {"resources": {"memory": "512Mi"}, "hosts": HOSTS}
AVAILABLE_CA = {"available": True, "tls_ca": "Q0E=", "message": ""}


def corellium_class(allow=None, images=None):
    klass = target_class(parameters=copy.deepcopy(CORELLIUM), provisioner=c.PROVISIONER_CORELLIUM)
    if allow is not None:
        klass["metadata"]["annotations"] = {c.ANNOTATION_SET_OVERRIDABLE: allow}
    if images is not None:
        klass["spec"]["images"] = images
    return klass


def baremetal_class():
    return target_class(parameters=copy.deepcopy(BAREMETAL),
                        provisioner=c.PROVISIONER_QEMU_BAREMETAL)


def a_set(parameters=None, images=None, **kwargs):
    the_set = exporter_set(parameters=parameters, **kwargs)
    if images is not None:
        the_set["spec"]["images"] = images
    return the_set


# --- Corellium -----------------------------------------------------------------------


def test_a_set_without_overrides_of_credential_fields_is_merged_as_usual():
    the_set = a_set({"device": {"os": "1.2.0"}}, images={"runtime": {"image": "r:1"}})
    resolved = resolve(corellium_class(images={"exporter": CLASS_IMAGE}), the_set)
    assert resolved["violations"] == [] and resolved["warnings"] == []
    assert resolved["parameters"] == deep_merge(CORELLIUM, {"device": {"os": "1.2.0"}})
    assert resolved["images"] == {"exporter": CLASS_IMAGE, "runtime": {"image": "r:1"}}


def test_the_corellium_api_host_is_the_classs():
    resolved = resolve(corellium_class(), a_set({"api": {"host": "evil.example:443"}}))
    assert resolved["violations"] == [
        "spec.parameters.api.host: set by the class only (the class's API token is sent there)"]
    assert resolved["parameters"]["api"] == {"host": API_HOST, "projectId": PROJECT}


@pytest.mark.parametrize("override", [{"api": {"host": None}}, {"api": None},
                                      {"api": {"host": ["evil.example"]}}])
def test_removing_or_mangling_the_api_host_is_a_violation_too(override):
    resolved = resolve(corellium_class(), a_set(override))
    assert any(v.startswith("spec.parameters.api.host:") for v in resolved["violations"])
    assert resolved["parameters"]["api"]["host"] == API_HOST


def test_a_set_cannot_supply_the_api_host_the_class_left_out():
    klass = corellium_class()
    del klass["spec"]["parameters"]["api"]["host"]
    resolved = resolve(klass, a_set({"api": {"host": "evil.example"}}))
    assert resolved["violations"][0].startswith("spec.parameters.api.host: set by the class only")
    assert "host" not in resolved["parameters"]["api"]


def test_the_project_is_the_classs():
    resolved = resolve(corellium_class(), a_set({"api": {"projectId": OTHER_PROJECT}}))
    assert [v.split(":")[0] for v in resolved["violations"]] == ["spec.parameters.api.projectId"]
    assert resolved["parameters"]["api"]["projectId"] == PROJECT


def test_the_class_may_allow_other_values():
    allow = (f"parameters.api.host=eu.corellium.example | us.corellium.example:8443\n"
             f"parameters.api.projectId={OTHER_PROJECT}; images.exporter=quay.io/example/j:1")
    klass = corellium_class(allow=allow)
    the_set = a_set({"api": {"host": "us.corellium.example:8443", "projectId": OTHER_PROJECT}},
                    images={"exporter": {"image": "quay.io/example/j:1"}})
    resolved = resolve(klass, the_set)
    assert resolved["violations"] == [] and resolved["warnings"] == []
    assert resolved["parameters"]["api"] == {"host": "us.corellium.example:8443",
                                             "projectId": OTHER_PROJECT}
    assert resolved["images"]["exporter"] == {"image": "quay.io/example/j:1"}

    resolved = resolve(klass, a_set({"api": {"host": "evil.example"}}))
    assert resolved["violations"] == [
        "spec.parameters.api.host: set by the class only (the class's API token is sent there);"
        " the class allows 'eu.corellium.example', 'us.corellium.example:8443'"]
    assert resolved["parameters"]["api"]["host"] == API_HOST


def test_allowlist_entries_that_allow_nothing_are_warned_about():
    klass = corellium_class(allow="parameters.device.os=1.2; hosts=evil; api.host=evil.example")
    resolved = resolve(klass, a_set({"api": {"host": "evil.example"}}))
    assert len(resolved["warnings"]) == 3
    assert all(c.ANNOTATION_SET_OVERRIDABLE in w for w in resolved["warnings"])
    assert "parameters.api.host" in resolved["warnings"][0]
    assert resolved["violations"][0].startswith("spec.parameters.api.host:")


def test_the_corellium_exporter_image_is_the_classs():
    klass = corellium_class(images={"exporter": CLASS_IMAGE})
    evil = {"image": "evil.example/exporter:1"}
    resolved = resolve(klass, a_set(images={"exporter": evil}))
    assert resolved["violations"] == [
        "spec.images.exporter: set by the class only (the exporter container receives the "
        "class's API token)"]
    assert resolved["images"] == {"exporter": CLASS_IMAGE}
    # The same image with another pull policy directs nothing.
    same = {"image": CLASS_IMAGE["image"], "imagePullPolicy": "Always"}
    resolved = resolve(klass, a_set(images={"exporter": same}))
    assert resolved["violations"] == [] and resolved["images"]["exporter"] == same


def test_without_a_class_image_the_built_in_one_stands():
    resolved = resolve(corellium_class(), a_set(images={"exporter": {"image": "evil:1"}}))
    assert [v.split(":")[0] for v in resolved["violations"]] == ["spec.images.exporter"]
    assert "exporter" not in resolved["images"]
    built_in = {"image": "quay.io/jumpstarter-dev/jumpstarter:0.9.0"}
    assert resolve(corellium_class(), a_set(images={"exporter": built_in}))["violations"] == []


# --- qemu: no class credential ------------------------------------------------------------


def test_a_qemu_set_may_choose_its_images():
    images = {"exporter": {"image": "mine/jumpstarter:1"}, "runtime": {"image": "mine/qemu:1"}}
    the_set = a_set({"resources": {"memory": "1Gi"}}, images=images)
    resolved = resolve(target_class(), the_set)
    assert resolved["violations"] == []
    assert resolved["images"] == merge_images(None, images)


# --- qemu-baremetal: the class's hosts ------------------------------------------------------


def test_a_set_may_pick_some_of_the_classs_hosts():
    pick = [{"name": "lab2", "slots": 1}, {"name": "lab1", "address": "10.0.0.1", "port": 22,
                                           "user": "svc", "slots": 1, "arch": "x86_64"}]
    resolved = resolve(baremetal_class(), a_set({"hosts": pick}))
    assert resolved["violations"] == []
    assert resolved["parameters"]["hosts"] == pick


@pytest.mark.parametrize("host, field", [
    ({"name": "lab1", "address": "evil.example", "user": "svc", "slots": 2}, "hosts[0].address"),
    ({"name": "lab1", "address": "10.0.0.1", "user": "root", "slots": 2}, "hosts[0].user"),
    ({"name": "lab1", "address": "10.0.0.1", "user": "svc", "port": 2222, "slots": 2},
     "hosts[0].port"),
    ({"name": "lab2", "address": "evil.example", "slots": 2}, "hosts[0].address"),
    ({"name": "evil.example", "slots": 2}, "hosts[0].name"),
])
def test_a_set_cannot_redirect_or_add_a_host(host, field):
    resolved = resolve(baremetal_class(), a_set({"hosts": [host]}))
    assert [v.split(":")[0] for v in resolved["violations"]] == [f"spec.parameters.{field}"]
    assert "the class's SSH key" in resolved["violations"][0]
    assert resolved["parameters"]["hosts"] == HOSTS


def test_every_offending_host_is_named():
    hosts = [*HOSTS, {"name": "evil.example", "slots": 8}, "not-a-host"]
    resolved = resolve(baremetal_class(), a_set({"hosts": hosts}))
    assert [v.split(":")[0] for v in resolved["violations"]] == [
        "spec.parameters.hosts[2].name", "spec.parameters.hosts[3].name"]
    resolved = resolve(baremetal_class(), a_set({"hosts": {"name": "evil.example"}}))
    assert [v.split(":")[0] for v in resolved["violations"]] == ["spec.parameters.hosts"]
    assert resolved["parameters"]["hosts"] == HOSTS


# --- property: only credential fields are ever changed, and never silently ----------------

HOST_VALUES = st.sampled_from([API_HOST, "evil.example", "eu.corellium.example", None])
PROJECT_VALUES = st.sampled_from([PROJECT, OTHER_PROJECT, None])
IMAGE_VALUES = st.sampled_from([None, CLASS_IMAGE["image"], "evil/j:1", "quay.io/example/j:1"])


@settings(max_examples=300, deadline=None)
@given(host=st.one_of(st.just("absent"), HOST_VALUES),
       project=st.one_of(st.just("absent"), PROJECT_VALUES),
       image=st.one_of(st.just("absent"), IMAGE_VALUES),
       os_version=st.sampled_from(["1.1.1", "2.0"]),
       allow=st.sampled_from(["", "parameters.api.host=eu.corellium.example",
                              "images.exporter=quay.io/example/j:1"]))
def test_resolve_keeps_credentials_where_the_class_sends_them(host, project, image, os_version,
                                                               allow):
    api = {k: v for k, v in (("host", host), ("projectId", project)) if v != "absent"}
    parameters = {"device": {"os": os_version}, **({"api": api} if api else {})}
    images = {} if image == "absent" else {"exporter": {"image": image}}
    klass = corellium_class(allow=allow, images={"exporter": CLASS_IMAGE})
    the_set = a_set(parameters, images=images)
    resolved = resolve(klass, the_set)
    allowed_host = {API_HOST, *(["eu.corellium.example"] if "api.host" in allow else [])}
    allowed_image = {CLASS_IMAGE["image"], *(["quay.io/example/j:1"] if "images" in allow else [])}
    # The token only ever goes to the class's host or an allowed one, in an allowed image.
    assert resolved["parameters"]["api"]["host"] in allowed_host
    assert resolved["parameters"]["api"]["projectId"] == PROJECT
    assert resolved["images"]["exporter"]["image"] in allowed_image
    # Everything else is merged as usual.
    assert resolved["parameters"]["device"]["os"] == os_version
    # Nothing is changed silently: the set's own merge stands exactly when there is no violation.
    merged = deep_merge(klass["spec"]["parameters"], parameters)
    untouched = (resolved["parameters"] == merged
                 and resolved["images"] == merge_images(klass["spec"]["images"], images))
    assert untouched == (resolved["violations"] == [])


# --- the plan and the reconcile's inputs ---------------------------------------------------


def condition(result, kind):
    return next(x for x in result["status"]["conditions"] if x["type"] == kind)


def test_the_plan_reports_a_redirect_and_makes_nothing():
    leased = exporter("rpi4-0", lease="lease-a")
    the_set = a_set({"api": {"host": "evil.example"}}, min_available=2)
    result = scale_plan(the_set, corellium_class(), [leased], [], NOW)
    assert result["create"] == [] and result["delete"] == [] and result["disable"] == []
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_CREDENTIAL_REDIRECT)
    assert degraded["message"].startswith("spec.parameters.api.host: set by the class only")
    (event,) = [e for e in result["events"] if e["reason"] == c.REASON_CREDENTIAL_REDIRECT]
    assert event["type"] == "Warning" and "spec.parameters.api.host" in event["message"]
    assert result["parameters"]["api"]["host"] == API_HOST

    fixed = scale_plan(a_set(min_available=2), corellium_class(), [leased], [], NOW)
    assert len(fixed["create"]) == 2
    assert condition(fixed, c.CONDITION_DEGRADED)["status"] == "False"


def test_a_redirect_and_invalid_parameters_are_reported_together():
    the_set = a_set({"api": {"host": "evil.example"}, "device": {"flavor": None}}, min_available=1)
    degraded = condition(scale_plan(the_set, corellium_class(), [], [], NOW), c.CONDITION_DEGRADED)
    assert degraded["reason"] == c.REASON_CREDENTIAL_REDIRECT
    assert "spec.parameters.api.host" in degraded["message"]
    assert "parameters.device.flavor" in degraded["message"]


def observed(the_set, klass, exporters):
    for item in exporters:
        item["metadata"]["uid"] = item["metadata"]["name"] + "-uid"
        item["metadata"]["ownerReferences"] = [{"uid": the_set["metadata"]["uid"],
                                                "controller": True}]
        item["status"]["credential"] = {"name": item["metadata"]["name"] + "-exporter"}
    objects = {"VirtualTargetClass": [klass], "ExporterSet": [the_set], "Exporter": exporters,
               "Lease": [], "Pod": []}
    seen = k8s_observe.observe(the_set, objects, NOW)
    seen["controller_ca"] = AVAILABLE_CA
    return seen


@pytest.mark.parametrize("parameters, images", [
    ({"api": {"host": "evil.example"}}, None),
    (None, {"exporter": {"image": "evil/j:1"}}),
])
def test_a_corellium_set_that_redirects_gets_no_backend(parameters, images):
    klass = corellium_class()
    the_set = a_set(parameters, images=images, min_available=1)
    seen = observed(the_set, klass, [exporter("rpi4-0", ready=False, created=-1)])
    assert k8s_observe.unprovisioned(seen) == []
    # Entry points that still run (remove, reset, teardown) get the class's fields.
    variables = k8s_observe.playbook_variables(the_set, seen, {})
    assert variables["merged_parameters"]["api"]["host"] == API_HOST
    assert "exporter" not in variables["merged_images"]

    fine = a_set(min_available=1)
    seen = observed(fine, klass, [exporter("rpi4-0", ready=False, created=-1)])
    assert k8s_observe.unprovisioned(seen) == ["rpi4-0"]


def test_a_baremetal_set_that_redirects_a_host_reaches_only_the_classs_hosts():
    klass = baremetal_class()
    evil = [{"name": "lab1", "address": "evil.example", "user": "svc", "slots": 2}]
    the_set = a_set({"hosts": evil}, min_available=1)
    seen = observed(the_set, klass, [exporter("rpi4-0", ready=False, created=-1)])
    assert k8s_observe.unprovisioned(seen) == []
    assert seen["lab"].hosts == HOSTS
    variables = k8s_observe.playbook_variables(the_set, seen, {})
    assert variables["merged_parameters"]["hosts"] == HOSTS
    result = k8s_observe.plan_for(the_set, seen)
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", c.REASON_CREDENTIAL_REDIRECT)
    assert degraded["message"].startswith("spec.parameters.hosts[0].address: set by the class")
    assert result["create"] == []
