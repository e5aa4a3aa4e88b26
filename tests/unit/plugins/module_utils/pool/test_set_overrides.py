"""What a set may change of its class: no credential redirect, and the class's policy
(paths, driver types, resource and slot ceilings).

The rule (``set_overrides.resolve``), the plan that reports it, and what a
reconcile hands the provisioner entry points (``k8s_observe``).
"""

import copy

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import set_overrides
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
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import DEFAULT_IMAGES
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import images
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.quantity import (
    quantity_to_bytes,
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
    built_in = {"image": DEFAULT_IMAGES["exporter"]["image"]}
    assert resolve(corellium_class(), a_set(images={"exporter": built_in}))["violations"] == []


# --- qemu: no class credential ------------------------------------------------------------


def test_a_qemu_set_may_choose_its_exporter_image_and_a_runtime_image_the_class_allows():
    images = {"exporter": {"image": "mine/jumpstarter:1"}, "runtime": {"image": "mine/qemu:1"}}
    the_set = a_set({"resources": {"memory": "1Gi"}}, images=images)
    klass = target_class()
    klass["metadata"]["annotations"] = {c.ANNOTATION_SET_OVERRIDABLE: "images.runtime=mine/qemu:1|mine/qemu:2"}
    resolved = resolve(klass, the_set)
    assert resolved["violations"] == [] and resolved["warnings"] == []
    assert resolved["images"] == merge_images(None, images)


@pytest.mark.parametrize("class_image", [None, {"image": "quay.io/example/qemu:1", "imagePullPolicy": "Never"}])
def test_a_qemu_runtime_image_the_class_does_not_allow_is_refused_and_the_classs_runs(class_image):
    klass = target_class()
    if class_image:
        klass["spec"]["images"] = {"runtime": class_image}
    the_set = a_set(images={"exporter": {"image": "mine/jumpstarter:1"}, "runtime": {"image": "mine/qemu:1"}})
    resolved = resolve(klass, the_set)
    assert resolved["violations"] == [
        "spec.images.runtime: set by the class only (its containers run QEMU on the instance's images "
        "from the node's cache)"]
    assert resolved["reason"] == "NotAllowedByClass"
    assert resolved["images"].get("runtime") == class_image
    assert resolved["images"]["exporter"] == {"image": "mine/jumpstarter:1"}
    # The class's own image, or the built-in one, with another pull policy is fine.
    own = {"image": (class_image or DEFAULT_IMAGES["runtime"])["image"], "imagePullPolicy": "Always"}
    assert resolve(klass, a_set(images={"runtime": own}))["violations"] == []


@given(image=st.text(min_size=1, max_size=30))
def test_whatever_runtime_image_a_set_names_its_pods_run_one_the_class_allows(image):
    klass = target_class()
    klass["metadata"]["annotations"] = {c.ANNOTATION_SET_OVERRIDABLE: "images.runtime=quay.io/ok/qemu:1"}
    resolved = resolve(klass, a_set(images={"runtime": {"image": image}}))
    runs = (resolved["images"].get("runtime") or DEFAULT_IMAGES["runtime"])["image"]
    assert runs in {"quay.io/ok/qemu:1", DEFAULT_IMAGES["runtime"]["image"]}
    assert (resolved["violations"] == []) == (runs == image)


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


# --- the class's policy: paths, drivers, ceilings ------------------------------------------

UNIX_NETWORK = "jumpstarter_driver_network.driver.UnixNetwork"
QEMU_DRIVER = "jumpstarter_driver_qemu.driver.Qemu"
QEMU_POWER = "jumpstarter_driver_power.driver.QemuPower"
QEMU_SERIAL = "jumpstarter_driver_serial.driver.QemuSerial"
QEMU_CLASS = {"arch": "x86_64", "resources": {"cpu": 2, "memory": "512Mi", "storage": "1Gi"},
              "disk": {"path": "/srv/images/base.qcow2"}}


def qemu_class(allow=None, provisioner=c.PROVISIONER_QEMU, parameters=None):
    klass = target_class(parameters=copy.deepcopy(parameters or QEMU_CLASS),
                         provisioner=provisioner)
    if allow is not None:
        klass["metadata"]["annotations"] = {c.ANNOTATION_SET_OVERRIDABLE: allow}
    return klass


def lab_class(allow=None):
    parameters = {**copy.deepcopy(QEMU_CLASS), **copy.deepcopy(BAREMETAL),
                  "resources": {"cpu": 2, "memory": "512Mi", "storage": "1Gi"},
                  "runtime": {"binary": "/usr/bin/qemu-system-x86_64"}}
    return qemu_class(allow, c.PROVISIONER_QEMU_BAREMETAL, parameters)


def with_drivers(*types, **kwargs):
    the_set = a_set(**kwargs)
    the_set["spec"]["template"]["spec"]["drivers"] = [
        {"name": f"d{index}", "type": kind} for index, kind in enumerate(types)]
    for driver in the_set["spec"]["template"]["spec"]["drivers"]:
        if driver["type"] == "jumpstarter_driver_network.driver.TcpNetwork":
            driver["config"] = {"port": 22}  # as JEP-0014 writes it: the guest's port
    return the_set


def fields_of(resolved):
    return [v.split(":")[0] for v in resolved["violations"]]


PATH_ATTACKS = [
    ({"disk": {"path": "/etc/shadow"}}, "disk.path"),
    ({"disk": {"format": "raw"}}, "disk.format"),
    ({"kernel": {"path": "/root/.ssh/id_ed25519"}}, "kernel.path"),
    ({"initrd": {"path": "/var/lib/jumpstarter-virtual/instances/other.pool-0/token"}},
     "initrd.path"),
    ({"firmware": {"path": "/etc/jumpstarter/exporters/other.yaml"}}, "firmware.path"),
    ({"runtime": {"binary": "/bin/sh"}}, "runtime.binary"),
    ({"workDir": "/tmp/mine"}, "workDir"),
]


@pytest.mark.parametrize("provisioner", [c.PROVISIONER_QEMU, c.PROVISIONER_QEMU_BAREMETAL])
@pytest.mark.parametrize("override, field", PATH_ATTACKS, ids=[f for _, f in PATH_ATTACKS])
def test_paths_binaries_and_work_dirs_are_the_classs(provisioner, override, field):
    klass = lab_class() if provisioner == c.PROVISIONER_QEMU_BAREMETAL else qemu_class()
    resolved = resolve(klass, a_set(override))
    assert fields_of(resolved) == [f"spec.parameters.{field}"]
    assert resolved["violations"][0].startswith(f"spec.parameters.{field}: set by the class only (")
    assert resolved["reason"] == "NotAllowedByClass"
    # What the entry points read is the class's.
    path = tuple(field.split("."))
    class_value = klass["spec"]["parameters"]
    for key in path:
        class_value = (class_value or {}).get(key)
    value = resolved["parameters"]
    for key in path:
        value = (value or {}).get(key)
    assert value == class_value


def test_dropping_the_classs_path_is_refused_too():
    resolved = resolve(qemu_class("image-hosts=x"), a_set({"disk": {"path": None, "url": "https://x/d.qcow2"}}))
    assert fields_of(resolved) == ["spec.parameters.disk.path"]
    assert resolved["parameters"]["disk"]["path"] == "/srv/images/base.qcow2"


def test_the_classs_own_path_or_one_it_allows_is_fine():
    assert resolve(qemu_class(), a_set({"disk": {"path": "/srv/images/base.qcow2"}}))[
        "violations"] == []
    klass = qemu_class(allow="parameters.disk.path=/srv/images/other.qcow2|/srv/images/b.qcow2")
    resolved = resolve(klass, a_set({"disk": {"path": "/srv/images/b.qcow2"}}))
    assert resolved["violations"] == [] and resolved["warnings"] == []
    assert resolved["parameters"]["disk"]["path"] == "/srv/images/b.qcow2"
    refused = resolve(klass, a_set({"disk": {"path": "/etc/shadow"}}))
    assert refused["violations"] == [
        "spec.parameters.disk.path: set by the class only (a file on the machine that runs QEMU, "
        "read as its user, reaches the guest); the class allows '/srv/images/b.qcow2', "
        "'/srv/images/other.qcow2'"]


def test_a_set_may_still_change_what_is_its_own():
    own = {"arch": "x86_64", "machineType": "pc", "kernelArgs": "quiet", "kvm": True,
           "resources": {"cpu": 1, "memory": "256Mi"}, "disk": {"url": "https://x/d.qcow2",
                                                              "digest": "sha256:" + "0" * 64}}
    # The url's host is one the class lets it fetch from (image-hosts).
    resolved = resolve(qemu_class("image-hosts=x"), with_drivers(QEMU_DRIVER, parameters=own))
    assert resolved["violations"] == [] and resolved["reason"] is None
    assert resolved["parameters"] == deep_merge(QEMU_CLASS, own)


@pytest.mark.parametrize("provisioner", [c.PROVISIONER_QEMU, c.PROVISIONER_QEMU_BAREMETAL])
def test_a_driver_type_the_class_does_not_allow_is_refused(provisioner):
    klass = lab_class() if provisioner == c.PROVISIONER_QEMU_BAREMETAL else qemu_class()
    the_set = with_drivers(QEMU_DRIVER, UNIX_NETWORK, "os.system")
    resolved = resolve(klass, the_set)
    assert fields_of(resolved) == ["spec.template.spec.drivers[1].type",
                                   "spec.template.spec.drivers[2].type"]
    assert f"'{UNIX_NETWORK}' is not a driver type the class allows" in resolved["violations"][0]
    assert resolved["reason"] == "NotAllowedByClass"


def test_the_default_driver_types_are_the_provisioners_and_the_jeps():
    jep = ["jumpstarter_driver_qemu.driver.Qemu", "jumpstarter_driver_network.driver.TcpNetwork",
           "jumpstarter_driver_serial.driver.QemuSerial", "jumpstarter_driver_power.driver.QemuPower",
           "jumpstarter_driver_virtual_qemu.driver.VirtualQemu"]
    assert resolve(qemu_class(), with_drivers(*jep))["violations"] == []
    assert resolve(lab_class(), with_drivers(*jep))["violations"] == []
    # The seed's template lists power and serial without a QEMU driver: the
    # provisioner adds one for them (qemu.qemu_driver_overrides).
    seed = with_drivers(QEMU_POWER, "jumpstarter_driver_network.driver.TcpNetwork", QEMU_SERIAL)
    for cls in (qemu_class(), lab_class()):
        assert resolve(cls, seed)["violations"] == []
    corellium = "jumpstarter_driver_corellium.driver.Corellium"
    assert resolve(corellium_class(), with_drivers(corellium))["violations"] == []
    assert fields_of(resolve(corellium_class(), with_drivers(QEMU_DRIVER))) == [
        "spec.template.spec.drivers[0].type"]
    # A ref entry names a child of an allowed driver; it has no type of its own.
    ref_set = with_drivers(QEMU_DRIVER)
    ref_set["spec"]["template"]["spec"]["drivers"].append({"name": "power", "ref": "d0.power"})
    assert resolve(qemu_class(), ref_set)["violations"] == []


def test_the_class_names_its_own_driver_types():
    klass = qemu_class(allow=f"drivers={QEMU_DRIVER}|{UNIX_NETWORK}")
    assert resolve(klass, with_drivers(QEMU_DRIVER, UNIX_NETWORK))["violations"] == []
    # The class's list replaces the default: TcpNetwork is no longer allowed.
    tcp = "jumpstarter_driver_network.driver.TcpNetwork"
    assert fields_of(resolve(klass, with_drivers(tcp))) == ["spec.template.spec.drivers[0].type"]


@pytest.mark.parametrize("resources, field", [
    ({"memory": "64Gi"}, "resources.memory"),
    ({"cpu": 64}, "resources.cpu"),
    ({"cpu": "3"}, "resources.cpu"),
    ({"storage": "2Ti"}, "resources.storage"),
])
def test_a_lab_set_cannot_raise_its_resources_above_the_classs(resources, field):
    resolved = resolve(lab_class(), a_set({"resources": resources}))
    assert fields_of(resolved) == [f"spec.parameters.{field}"]
    assert "is above what the class allows" in resolved["violations"][0]
    assert resolved["parameters"]["resources"] == lab_class()["spec"]["parameters"]["resources"]


def test_a_lab_set_may_ask_for_less_and_the_class_may_name_a_higher_ceiling():
    less = {"resources": {"cpu": 1, "memory": "256Mi", "storage": "512Mi"}}
    assert resolve(lab_class(), a_set(less))["violations"] == []
    klass = lab_class(allow="max.resources.memory=4Gi; max.resources.cpu=4")
    assert resolve(klass, a_set({"resources": {"memory": "4Gi", "cpu": 4}}))["violations"] == []
    resolved = resolve(klass, a_set({"resources": {"memory": "4097Mi"}}))
    assert resolved["violations"] == [
        "spec.parameters.resources.memory: '4097Mi' is above what the class allows (the ceiling "
        "is '4Gi'; max.resources.memory in the class's annotation raises it)"]
    # A named ceiling below the class's value does not lower the class's value.
    low = lab_class(allow="max.resources.memory=128Mi")
    assert resolve(low, a_set({"resources": {"memory": "512Mi"}}))["violations"] == []


def test_dropping_the_classs_memory_does_not_raise_it_to_the_default():
    # Without resources the guest would get the defaults: 1 CPU (fewer), 1Gi (more).
    resolved = resolve(lab_class(), a_set({"resources": None}))
    assert fields_of(resolved) == ["spec.parameters.resources.memory"]
    assert resolved["parameters"]["resources"]["memory"] == "512Mi"
    klass = lab_class()
    del klass["spec"]["parameters"]["resources"]["storage"]
    resolved = resolve(klass, a_set({"resources": {"storage": "1Gi"}}))
    assert resolved["violations"] == [
        "spec.parameters.resources.storage: '1Gi' is above what the class allows (the class "
        "gives none; max.resources.storage in the class's annotation raises it)"]
    assert "storage" not in resolved["parameters"]["resources"]


def test_a_pod_set_has_no_resource_ceiling_unless_the_class_names_one():
    # JEP-0014's own rpi4 example asks for more memory than its class.
    assert resolve(qemu_class(), a_set({"resources": {"memory": "8Gi"}}))["violations"] == []
    klass = qemu_class(allow="max.resources.memory=2Gi")
    assert resolve(klass, a_set({"resources": {"memory": "2Gi"}}))["violations"] == []
    assert fields_of(resolve(klass, a_set({"resources": {"memory": "8Gi"}}))) == [
        "spec.parameters.resources.memory"]


def test_a_set_cannot_give_a_host_more_slots_than_the_class():
    more = [{"name": "lab1", "address": "10.0.0.1", "user": "svc", "slots": 3}, {"name": "lab2",
                                                                              "slots": 1}]
    resolved = resolve(lab_class(), a_set({"hosts": more}))
    assert resolved["violations"] == [
        "spec.parameters.hosts[0].slots: 3 is above what the class allows on host 'lab1' (the "
        "ceiling is 2; max.slots in the class's annotation raises it)"]
    assert [h["slots"] for h in resolved["parameters"]["hosts"]] == [2, 1]
    assert resolve(lab_class(allow="max.slots=3"), a_set({"hosts": more}))["violations"] == []


@pytest.mark.parametrize("allow", ["max.resources.memory=lots", "max.slots=1|2",
                                   "max.slots=3"])
def test_a_ceiling_the_class_cannot_mean_is_warned_about(allow):
    resolved = resolve(qemu_class(allow=allow), a_set())
    assert len(resolved["warnings"]) == 1 and allow in resolved["warnings"][0]


def test_the_plan_refuses_a_set_outside_the_classs_policy_and_makes_nothing():
    the_set = with_drivers(QEMU_DRIVER, UNIX_NETWORK, min_available=2)
    result = scale_plan(the_set, qemu_class(), [], [], NOW)
    assert result["create"] == []
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "NotAllowedByClass")
    assert degraded["message"].startswith("spec.template.spec.drivers[1].type:")
    (event,) = [e for e in result["events"] if e["reason"] == "NotAllowedByClass"]
    assert event["type"] == "Warning" and "drivers[1].type" in event["message"]


def test_a_redirect_and_a_refusal_together_are_a_credential_redirect():
    the_set = a_set({"api": {"host": "evil.example"}})
    the_set["spec"]["template"]["spec"]["drivers"] = [{"name": "x", "type": UNIX_NETWORK}]
    result = scale_plan(the_set, corellium_class(), [], [], NOW)
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert degraded["reason"] == c.REASON_CREDENTIAL_REDIRECT
    assert "spec.parameters.api.host" in degraded["message"]
    assert "drivers[0].type" in degraded["message"]


@pytest.mark.parametrize("make", [
    lambda: with_drivers(UNIX_NETWORK, min_available=1),
    lambda: a_set({"runtime": {"binary": "/bin/sh"}}, min_available=1),
])
def test_a_refused_set_gets_no_backend(make):
    the_set = make()
    seen = observed(the_set, qemu_class(), [exporter("rpi4-0", ready=False, created=-1)])
    assert k8s_observe.unprovisioned(seen) == []
    variables = k8s_observe.playbook_variables(the_set, seen, {})
    assert (variables["merged_parameters"].get("runtime") or {}).get("binary") is None
    fine = with_drivers(QEMU_DRIVER, min_available=1)
    seen = observed(fine, qemu_class(), [exporter("rpi4-0", ready=False, created=-1)])
    assert k8s_observe.unprovisioned(seen) == ["rpi4-0"]


# --- property: what reaches the lab host is within the class's policy ----------------------

PATHS = st.sampled_from(["absent", None, "/srv/images/base.qcow2", "/etc/shadow"])
MEMORY = st.sampled_from(["absent", None, "256Mi", "512Mi", "513Mi", "2Gi", 1 << 40])
SLOTS = st.sampled_from(["absent", 1, 2, 3, 50])


@settings(max_examples=300, deadline=None)
@given(disk_path=PATHS, binary=st.sampled_from(["absent", "/bin/sh", "/usr/bin/qemu-system-x86_64"]),
       work_dir=st.sampled_from(["absent", "/tmp/x"]), memory=MEMORY, slots=SLOTS,
       allow=st.sampled_from(["", "max.resources.memory=2Gi", "max.slots=3",
                              "parameters.disk.path=/etc/shadow"]))
def test_resolve_keeps_a_lab_set_within_the_classs_policy(disk_path, binary, work_dir, memory,
                                                          slots, allow):
    parameters = {}
    if disk_path != "absent":
        parameters["disk"] = {"path": disk_path}
    if binary != "absent":
        parameters["runtime"] = {"binary": binary}
    if work_dir != "absent":
        parameters["workDir"] = work_dir
    if memory != "absent":
        parameters["resources"] = {"memory": memory}
    if slots != "absent":
        parameters["hosts"] = [{"name": "lab2", "slots": slots}]
    klass = lab_class(allow=allow)
    resolved = resolve(klass, a_set(parameters))
    merged = resolved["parameters"]
    allowed_paths = {"/srv/images/base.qcow2", *(["/etc/shadow"] if "disk.path" in allow else [])}
    assert merged["disk"].get("path") in allowed_paths
    assert merged["runtime"]["binary"] == "/usr/bin/qemu-system-x86_64"
    assert "workDir" not in merged
    ceiling = (2 << 30) if "memory" in allow else (512 << 20)
    assert quantity_to_bytes(merged["resources"].get("memory", "1Gi")) <= ceiling
    assert all(h["slots"] <= (3 if "slots" in allow else 2) for h in merged["hosts"])
    untouched = merged == deep_merge(klass["spec"]["parameters"], parameters)
    assert untouched == (resolved["violations"] == [])


@pytest.mark.parametrize("port", ["22", 0, 70000, None, True])
def test_a_hostless_tcp_network_needs_a_guest_port_in_a_pod_class(port):
    """In a Pod class a TcpNetwork without a host is forwarded to that port of
    the guest: a port that is none is refused naming the field, before any
    backend run renders it."""
    the_set = with_drivers(QEMU_DRIVER, "jumpstarter_driver_network.driver.TcpNetwork")
    the_set["spec"]["template"]["spec"]["drivers"][1]["config"] = {"port": port}
    resolved = resolve(qemu_class(), the_set)
    assert fields_of(resolved) == ["spec.template.spec.drivers[1].config.port"]
    assert "an integer from 1 to 65535" in resolved["violations"][0]
    assert resolved["reason"] == "NotAllowedByClass"
    # With a host it is the template's own connection (the reach rule's,
    # below), and a lab host's exporter forwards nothing: no port check.
    the_set["spec"]["template"]["spec"]["drivers"][1]["config"] = {"host": "10.0.0.1", "port": 22}
    assert resolve(qemu_class("reach=10.0.0.1:22"), the_set)["violations"] == []
    the_set["spec"]["template"]["spec"]["drivers"][1]["config"] = {"port": port}
    assert resolve(lab_class(), the_set)["violations"] == []
    the_set["spec"]["template"]["spec"]["drivers"][1]["config"] = {"port": 22}
    assert resolve(qemu_class(), the_set)["violations"] == []


# --- reach: a driver that names a host; image urls' hosts ----------------------------------

TCP = "jumpstarter_driver_network.driver.TcpNetwork"


def reaching(config, driver_type=TCP):
    the_set = with_drivers(QEMU_DRIVER, driver_type)
    the_set["spec"]["template"]["spec"]["drivers"][1]["config"] = config
    return the_set


@pytest.mark.parametrize("klass", [qemu_class, lab_class])
@pytest.mark.parametrize("config, shown", [
    ({"host": "10.0.0.7", "port": 22}, "10.0.0.7:22"),
    ({"host": "jenkins.lab.example", "port": "8080"}, "jenkins.lab.example:8080"),
    ({"host": "fd00::7", "port": 443}, "[fd00::7]:443"),
    ({"host": "169.254.169.254"}, "169.254.169.254"),
])
def test_a_driver_that_names_a_host_is_refused_unless_the_class_lists_it(klass, config, shown):
    """Every lab host (or Pod) would be a TCP relay into the network it sits in."""
    resolved = resolve(klass(), reaching(config))
    assert fields_of(resolved) == ["spec.template.spec.drivers[1].config.host"]
    assert resolved["violations"][0].startswith(
        f"spec.template.spec.drivers[1].config.host: '{shown}' is not a host:port the class lets a set reach")
    assert resolved["reason"] == "NotAllowedByClass"
    # Listed by the class: allowed; another port of the same host is not.
    assert resolve(klass(f"reach=other:1|{shown}"), reaching(config))["violations"] == []
    assert fields_of(resolve(klass("reach=10.0.0.7:23"), reaching(config))) == [
        "spec.template.spec.drivers[1].config.host"]


@pytest.mark.parametrize("klass", [qemu_class, lab_class])
def test_a_tcp_network_without_a_host_reaches_only_the_guest_and_is_allowed(klass):
    assert resolve(klass(), reaching({"port": 22}))["violations"] == []
    assert resolve(klass(), reaching({"port": 22, "host": None}))["violations"] == []


def test_any_allowed_driver_naming_a_host_needs_the_entry():
    other = "jumpstarter_driver_network.driver.UdpNetwork"
    resolved = resolve(qemu_class(f"drivers={QEMU_DRIVER}|{other}"), reaching({"host": "10.1.1.1", "port": 53},
                                                                               other))
    assert fields_of(resolved) == ["spec.template.spec.drivers[1].config.host"]


def test_the_plan_refuses_a_reaching_set_and_makes_nothing():
    the_set = reaching({"host": "10.0.0.7", "port": 22})
    the_set["spec"]["minAvailableReplicas"] = 1
    result = k8s_observe.plan_for(the_set, observed(the_set, lab_class(), []))
    degraded = condition(result, c.CONDITION_DEGRADED)
    assert (degraded["status"], degraded["reason"]) == ("True", "NotAllowedByClass")
    assert degraded["message"].startswith("spec.template.spec.drivers[1].config.host: ")
    assert result["create"] == []


IMAGE_DIGEST = "sha256:" + "0" * 64
IMAGE_CLASS = {**QEMU_CLASS, "disk": {"url": "https://images.lab.example/base.qcow2", "digest": IMAGE_DIGEST},
               "firmware": {"url": "registry.lab.example:5000/firmware/ovmf:1", "digest": IMAGE_DIGEST}}


def image_class(allow=None, provisioner=c.PROVISIONER_QEMU):
    base = QEMU_CLASS if provisioner == c.PROVISIONER_QEMU else lab_class()["spec"]["parameters"]
    return qemu_class(allow, provisioner, {**base, **IMAGE_CLASS})


@pytest.mark.parametrize("url", [
    "http://10.0.0.1/disk.qcow2",
    "https://metadata.google.internal/computeMetadata/v1/",
    "http://[::1]:8080/disk",
    "oci://registry.internal/tenant/disk:1",
    "registry.internal:5000/tenant/disk:1",
    "https://images.lab.example@10.0.0.1/base.qcow2",
    "https://images.lab.example\\@10.0.0.1/base.qcow2",
    "https://images.lab.example%2f@10.0.0.1/",
])
@pytest.mark.parametrize("provisioner", [c.PROVISIONER_QEMU, c.PROVISIONER_QEMU_BAREMETAL])
def test_an_image_url_may_name_only_the_classs_hosts(url, provisioner):
    """Smaller: an http(s) url could name any internal address the fetch reaches."""
    resolved = resolve(image_class(provisioner=provisioner), a_set({"kernel": {"url": url, "digest": IMAGE_DIGEST}}))
    assert fields_of(resolved) == ["spec.parameters.kernel.url"]
    assert resolved["violations"][0].startswith(f"spec.parameters.kernel.url: '{url}' names ")
    assert "the class allows: images.lab.example, registry.lab.example" in resolved["violations"][0]
    assert resolved["reason"] == "NotAllowedByClass"
    # The file is the class's again: it gives no kernel.
    assert "kernel" not in resolved["parameters"]


@pytest.mark.parametrize("url", [
    "https://images.lab.example/other.qcow2",
    "http://IMAGES.lab.example:8080/other.qcow2",
    "oci://registry.lab.example:5000/firmware/other:2",
    "registry.lab.example/firmware/other:2",
])
def test_the_hosts_of_the_classs_own_urls_are_allowed(url):
    assert resolve(image_class(), a_set({"disk": {"url": url, "digest": IMAGE_DIGEST}}))["violations"] == []


def test_the_class_lists_more_image_hosts_and_without_urls_allows_none():
    the_set = a_set({"disk": {"url": "https://mirror.example/d.qcow2", "digest": IMAGE_DIGEST}})
    assert resolve(image_class("image-hosts=mirror.example|other:5000"), the_set)["violations"] == []
    (message,) = resolve(qemu_class(), the_set)["violations"]
    assert message.startswith("spec.parameters.disk.url: 'https://mirror.example/d.qcow2' names host "
                              "'mirror.example', not one the class fetches images from")
    assert "the class allows: none" in message
    # The class's disk stands: its path.
    assert resolve(qemu_class(), the_set)["parameters"]["disk"] == QEMU_CLASS["disk"]


def test_a_url_no_fetch_takes_is_left_to_validation():
    """file:, ftp: and the like are InvalidParameters (provisioners/qemu/images.py url_problem)."""
    for url in ("file:///etc/shadow", "ftp://10.0.0.1/x", "file:/etc/shadow", "data:,x"):
        assert resolve(qemu_class(), a_set({"disk": {"url": url}}))["violations"] == [], url


def test_the_fetched_schemes_are_the_image_fetchs():
    assert set(set_overrides.FETCHED_SCHEMES) == set(images.URL_SCHEMES)


_HOST = st.one_of(st.sampled_from(["images.lab.example", "IMAGES.LAB.EXAMPLE", "10.0.0.1", "[::1]",
                                   "images.lab.example@10.0.0.1", "images.lab.example.evil",
                                   "evil.images.lab.example", "mirror.example", ""]),
                  st.from_regex(r"[a-z0-9.@:%\\\[\]-]{1,20}", fullmatch=True))


@settings(max_examples=300, deadline=None)
@given(scheme=st.sampled_from(["http://", "https://", "oci://", ""]), host=_HOST,
       port=st.sampled_from(["", ":5000", ":x"]), path=st.sampled_from(["/a/b:1", "", "/x?y", "#z"]),
       extra=st.sampled_from(["", "image-hosts=mirror.example"]))
def test_a_url_reaches_the_fetch_only_with_a_host_the_class_allows(scheme, host, port, path, extra):
    url = f"{scheme}{host}{port}{path}"
    klass = image_class(extra)
    resolved = resolve(klass, a_set({"disk": {"url": url, "digest": IMAGE_DIGEST}}))
    allowed = {"images.lab.example", "registry.lab.example", *(["mirror.example"] if extra else [])}
    authority = url.split("://", 1)[-1].split("/", 1)[0].lower()
    named = authority in allowed or (":" in authority and authority.rsplit(":", 1)[0] in allowed
                                     and authority.rsplit(":", 1)[1].isdigit())
    other_scheme = images.url_problem(url) is not None
    if resolved["violations"]:
        assert resolved["parameters"]["disk"] == IMAGE_CLASS["disk"]
    else:
        # Kept: a url whose authority is an allowed host (and a port), and
        # a slash after it, or one that validation refuses (no fetch takes it).
        assert (named and (scheme or "/" in url)) or other_scheme, url
        assert resolved["parameters"] == deep_merge(klass["spec"]["parameters"],
                                                    {"disk": {"url": url, "digest": IMAGE_DIGEST}})


# --- The template's Qemu driver config: the machine ------------------------------


def with_qemu_config(config, **kwargs):
    the_set = with_drivers(QEMU_DRIVER, **kwargs)
    the_set["spec"]["template"]["spec"]["drivers"][0]["config"] = config
    return the_set


def test_the_qemu_drivers_config_sizes_the_machine_merged_over_the_class():
    """JEP-0014's DriverConfig example: ``{arch, smp: 2, mem: 2G}`` is the
    machine, laid over the class key by key (the class's storage and disk
    stay), not replaced whole and not dropped."""
    resolved = resolve(qemu_class(), with_qemu_config({"arch": "x86_64", "smp": 2, "mem": "2G",
                                                       "disk_size": "10G", "cpu": "max"}))
    assert resolved["violations"] == [] and resolved["errors"] == [] and resolved["warnings"] == []
    assert resolved["parameters"] == {**QEMU_CLASS, "cpuModel": "max",
                                      "resources": {"cpu": 2, "memory": "2Gi", "storage": "10Gi"}}
    # The set's own parameters win over its template's.
    resolved = resolve(qemu_class(), with_qemu_config({"smp": 2, "mem": 512},
                                                      parameters={"resources": {"cpu": 3}}))
    assert resolved["parameters"]["resources"] == {"cpu": 3, "memory": "512Mi", "storage": "1Gi"}


def test_the_qemu_drivers_config_is_the_sets_to_the_classs_policy():
    """A lab class's resources are a ceiling: asking through the driver's
    config is refused as asking through parameters is."""
    resolved = resolve(lab_class(), with_qemu_config({"smp": 8, "mem": "64G"}))
    assert fields_of(resolved) == ["spec.parameters.resources.cpu", "spec.parameters.resources.memory"]
    assert resolved["parameters"]["resources"] == {"cpu": 2, "memory": "512Mi", "storage": "1Gi"}


def test_what_the_qemu_drivers_config_cannot_say_is_named():
    resolved = resolve(qemu_class(), with_qemu_config({"mem": "lots", "username": "me", "hostfwd": {}}))
    assert resolved["errors"] == [
        "spec.template.spec.drivers[0].config.mem: 'lots' is not a QEMU size (a positive number with "
        "K, M, G or T)"]
    assert resolved["warnings"] == [
        "spec.template.spec.drivers[0].config.username: ignored (the instance's QEMU is the provisioner's; "
        "of this driver's config it reads arch, cpu, disk_size, hostfwd, mem, smp)"]
    # The lab hosts forward no ports of the guest: hostfwd is named there too.
    warned = resolve(lab_class(), with_qemu_config({"hostfwd": {}}))["warnings"]
    assert [w.split(":")[0] for w in warned] == ["spec.template.spec.drivers[0].config.hostfwd"]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["", "K", "M", "G", "T", "k", "g"]),
       st.sampled_from(["", "B"]))
def test_qemu_sizes_read_as_qemu_reads_them(number, unit, byte):
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.qemu import (
        qemu_size,
    )
    powers = {"": None, "K": 1, "M": 2, "G": 3, "T": 4}
    quantity = qemu_size(f"{number}{unit}{byte}", "Mi")
    expected = number * 1024 ** (powers[unit.upper()] if unit else 2)
    assert quantity_to_bytes(quantity) == expected
    assert quantity_to_bytes(qemu_size(number, "")) == number
