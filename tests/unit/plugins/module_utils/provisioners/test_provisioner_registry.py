"""The registry of provisioners (plugins/module_utils/provisioners/): what
each one says of itself agrees with the roles and playbooks it names (the
reconcile runs the role the registry names), an
unknown name gets a provisioner that makes nothing, and a provisioner added
to the registry alone is used by the core (validation, the set's policy,
the Pod) without a line of the core changing."""

from pathlib import Path

import pytest
import yaml
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import observe as k8s_observe
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import pod as k8s_pod
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import (
    class_status,
    set_overrides,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
    Provisioner,
)

REPO = Path(__file__).resolve().parents[5]
ENTRY_POINTS = ("provision", "remove", "reset", "retain")
NOW = "2026-01-01T00:00:00Z"


def test_each_provisioner_is_registered_under_its_own_name():
    assert provisioners.names() == [
        "corellium.jumpstarter.dev", "qemu-baremetal.jumpstarter.dev", "qemu.jumpstarter.dev"]
    for name in provisioners.names():
        own = provisioners.get(name)
        assert own.name == name and provisioners.known(name)
        assert isinstance(own.schema, Field) and own.schema.type == "object"


@pytest.mark.parametrize("name", ["", "kubevirt.jumpstarter.dev", None, 7, {"a": 1}])
def test_an_unknown_name_gets_a_provisioner_that_makes_nothing(name):
    own = provisioners.get(name)
    assert own is provisioners.UNKNOWN and not provisioners.known(name)
    assert own.schema is None and not own.has_pods and not own.runs_on_lab_hosts
    assert own.default_driver_types == () and own.probe_playbook is None
    assert validate_parameters(name, {})["errors"] == [
        f'spec.provisioner: unknown provisioner "{name}"; known: ' + ", ".join(provisioners.names())]


@pytest.mark.parametrize("name", [*provisioners.names(), "kubevirt.jumpstarter.dev"])
def test_the_reconcile_runs_the_role_the_provisioner_names(name):
    """The reconcile playbook's variables (the operator's and exporterset_info's)
    carry the provisioner's role, which has the entry points the reconcile
    role calls; a provisioner the collection does not know has none."""
    vclass = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {"provisioner": name}}
    exporter_set = {"metadata": {"name": "s", "namespace": "ns", "uid": "set-uid"},
                    "spec": {"virtualTargetClassName": "c"}}
    objects = {"VirtualTargetClass": [vclass], "ExporterSet": [exporter_set], "Exporter": [], "Lease": [],
               "Pod": []}
    observed = k8s_observe.observe(exporter_set, objects, NOW)
    role = k8s_observe.playbook_variables(exporter_set, observed, {})["provisioner_role"]
    assert role == provisioners.get(name).role
    if provisioners.known(name):
        tasks = REPO / "roles" / role.rsplit(".", 1)[1] / "tasks"
        assert {p.stem for p in tasks.glob("*.yml")} >= set(ENTRY_POINTS), role
    else:
        assert role == ""


def test_the_facts_of_each_provisioner_hold_together():
    for name in provisioners.names():
        own = provisioners.get(name)
        if (own.removed_with_exporter or own.resets_with_fresh_pod or own.serves_one_lease
                or own.pod_restart_policy != "Always"):
            assert own.has_pods, name
        if own.runs_on_lab_hosts:
            assert (REPO / own.probe_playbook).is_file(), name
        assert own.has_pods != own.runs_on_lab_hosts, name
        assert own.default_driver_types, name


class _Board(Provisioner):
    """A fourth provisioner, as a new package would declare it."""

    name = "board.example.com"
    role = "example.boards.board"
    schema = Field("object", "board parameters.", properties={
        "serial": Field("string", "The board's serial number.", required=True)})
    has_pods = True
    default_driver_types = ("example_driver_board.driver.Board",)
    credential_parameters = {("serial",): "the class's token opens that board"}

    def exporter_env(self, class_spec, parameters):
        return [{"name": "BOARD_SERIAL", "value": parameters.get("serial", "")}]

    def driver_overrides(self, drivers, parameters, instance_name):
        return {d["name"]: {"config": {"serial": parameters.get("serial")}}
                for d in drivers if d.get("type") == self.default_driver_types[0]}


def test_a_fourth_provisioner_is_one_registration(monkeypatch):
    monkeypatch.setitem(provisioners.REGISTRY, _Board.name, _Board())
    vclass = {"metadata": {"name": "boards", "namespace": "ns"},
              "spec": {"provisioner": _Board.name, "parameters": {"serial": "A1"}}}
    exporter_set = {
        "metadata": {"name": "pool", "namespace": "ns", "uid": "set-uid"},
        "spec": {"parameters": {"serial": "B2"}, "template": {"spec": {"drivers": [
            {"name": "board", "type": "example_driver_board.driver.Board"},
            {"name": "power", "type": "jumpstarter_driver_power.driver.MockPower"}]}}}}
    exporter = {"metadata": {"name": "pool-0", "namespace": "ns", "uid": "exp-uid"},
                "status": {"endpoint": "grpc.example:443"}}

    assert class_status.known_provisioner(_Board.name)
    assert validate_parameters(_Board.name, {})["errors"] == ["parameters.serial: required"]
    assert set_overrides.allowable_fields(_Board.name) == ["parameters.serial", "drivers"]
    resolved = set_overrides.resolve(vclass, exporter_set)
    assert resolved["parameters"] == {"serial": "A1"}
    assert resolved["violations"] == [
        "spec.parameters.serial: set by the class only (the class's token opens that board)",
        "spec.template.spec.drivers[1].type: 'jumpstarter_driver_power.driver.MockPower' is not a "
        "driver type the class allows (the exporter imports and runs it where the instance runs); "
        "supported types: example_driver_board.driver.Board (board.example.com's defaults; drivers "
        "in the class's annotation names others)"]

    pod = k8s_pod.instance_pod(exporter_set, vclass, exporter, _Board.name, {"serial": "A1"}, {})
    assert pod["spec"]["restartPolicy"] == "Always"
    assert [c["name"] for c in pod["spec"]["containers"]] == ["exporter"]
    assert {"name": "BOARD_SERIAL", "value": "A1"} in pod["spec"]["containers"][0]["env"]
    secret = k8s_pod.config_secret(exporter_set, exporter, _Board.name, {"serial": "A1"}, "token", "")
    config = yaml.safe_load(secret["stringData"]["pool-0.yaml"])
    assert config["export"]["board"]["config"] == {"serial": "A1"}


class _Camera(_Board):
    """A fourth provisioner whose Pod has a container of its own beside the
    exporter, reading a file fetched into the node's image cache, and whose
    template may not name a camera twice."""

    name = "camera.example.com"
    pod_restart_policy = "Never"
    serves_one_lease = True

    def pod_containers(self, pod):
        cache = pod.fetch_images([{"url": "https://files.example/cam.bin", "digest": "sha256:" + "0" * 64,
                                   "dest": pod.run_mount["mountPath"] + "/cam.bin"}])
        pod.exporter["restartPolicy"] = "Always"
        camera = pod.container("camera", {"image": "example.com/camera:1"},
                               {"command": ["camera", pod.name], "volumeMounts": [pod.run_mount, *cache]})
        return [pod.exporter], [camera]

    def template_violations(self, drivers):
        boards = [i for i, d in enumerate(drivers) if d.get("type") == self.default_driver_types[0]]
        return [f"spec.template.spec.drivers[{i}].type: one board only" for i in boards[1:]]


def test_a_fourth_provisioner_renders_its_own_pod_and_refuses_its_own_templates(monkeypatch):
    """What k8s/pod.py renders around the exporter, the restart policy, the
    lease-end hooks and the template's refusals are the provisioner's answers."""
    monkeypatch.setitem(provisioners.REGISTRY, _Camera.name, _Camera())
    vclass = {"metadata": {"name": "cams", "namespace": "ns"},
              "spec": {"provisioner": _Camera.name, "parameters": {"serial": "A1"},
                       "scheduling": {"resources": {"limits": {"cpu": "1"}}}}}
    board = {"type": "example_driver_board.driver.Board"}
    exporter_set = {"metadata": {"name": "pool", "namespace": "ns", "uid": "set-uid"},
                    "spec": {"recycleStrategy": "InPlaceReuse",
                             "template": {"spec": {"drivers": [board, dict(board, name="second")]}}}}
    exporter = {"metadata": {"name": "pool-0", "namespace": "ns", "uid": "exp-uid"}, "status": {}}

    assert set_overrides.resolve(vclass, exporter_set)["violations"] == [
        "spec.template.spec.drivers[1].type: one board only"]
    spec = k8s_pod.instance_pod(exporter_set, vclass, exporter, _Camera.name, {"serial": "A1"}, {})["spec"]
    assert spec["restartPolicy"] == "Never"
    assert [c["name"] for c in spec["initContainers"]] == ["images", "exporter"]
    assert spec["initContainers"][0]["image"] == k8s_pod.IMAGE_FETCH_IMAGE["image"]
    assert spec["initContainers"][1]["restartPolicy"] == "Always"
    (camera,) = spec["containers"]
    assert camera["command"] == ["camera", "pool-0"] and "resources" not in camera
    assert camera["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert camera["volumeMounts"][1:] == [{"name": "image-cache", "subPath": "sha256/" + "0" * 64, "readOnly": True,
                                           "mountPath": f"{k8s_pod.IMAGE_CACHE_DIR}/sha256/{'0' * 64}"}]
    assert [v["name"] for v in spec["volumes"]] == ["run", "config", "image-cache"]
    secret = k8s_pod.config_secret(exporter_set, exporter, _Camera.name, {"serial": "A1"}, "token", "")
    # In place reuse keeps the exporter for the next lease, unless the
    # provisioner serves one lease only.
    assert "afterLease" in yaml.safe_load(secret["stringData"]["pool-0.yaml"])["hooks"]


class _Bench(_Board):
    """A fourth provisioner with a policy of its own: a ceiling on a
    parameter, a hint for a driver type no package provides, and a driver
    that its template may list only beside a board."""

    name = "bench.example.com"
    schema = Field("object", "bench parameters.", properties={
        "serial": Field("string", "The board's serial number.", required=True),
        "power": Field("object", "The bench supply.", properties={
            "watts": Field("quantity", "Most the supply gives.")})})
    default_driver_types = _Board.default_driver_types + ("example_driver_board.driver.BoardConsole",)
    resource_ceilings = {("power", "watts"): (None, "max.power.watts")}
    ceiling_by_default = True
    driver_type_hints = {"example_driver_board.driver.OldBoard": "write example_driver_board.driver.Board"}

    def allowed_driver_violations(self, drivers):
        if any(d.get("type") == self.default_driver_types[0] for d in drivers):
            return {}
        return {index: f"spec.template.spec.drivers[{index}].type: a console needs a board"
                for index, d in enumerate(drivers) if d.get("type") == self.default_driver_types[1]}


def test_a_fourth_provisioner_gives_its_own_ceilings_hints_and_driver_rules(monkeypatch):
    """What a set may raise, what a refusal advises and which allowed entries
    need another are the provisioner's answers: the set's policy
    (pool/set_overrides) reads them and names no provisioner."""
    monkeypatch.setitem(provisioners.REGISTRY, _Bench.name, _Bench())
    vclass = {"metadata": {"name": "benches", "namespace": "ns", "annotations": {
                  "virtualtarget.jumpstarter.dev/set-overridable": "max.power.watts=60"}},
              "spec": {"provisioner": _Bench.name, "parameters": {"serial": "A1", "power": {"watts": "40"}}}}
    console = {"type": "example_driver_board.driver.BoardConsole"}
    exporter_set = {"metadata": {"name": "pool", "namespace": "ns"},
                    "spec": {"parameters": {"power": {"watts": "100"}}, "template": {"spec": {"drivers": [
                        console, {"type": "example_driver_board.driver.OldBoard"}, dict(console)]}}}}

    assert set_overrides.allowable_fields(_Bench.name) == ["parameters.serial", "drivers", "max.power.watts"]
    resolved = set_overrides.resolve(vclass, exporter_set)
    assert resolved["parameters"] == {"serial": "A1", "power": {"watts": "40"}}
    assert resolved["violations"] == [
        "spec.parameters.power.watts: '100' is above what the class allows (the ceiling is '60'; "
        "max.power.watts in the class's annotation raises it)",
        "spec.template.spec.drivers[0].type: a console needs a board",
        "spec.template.spec.drivers[1].type: 'example_driver_board.driver.OldBoard' is not a driver type "
        "the class allows (the exporter imports and runs it where the instance runs); supported types: "
        "example_driver_board.driver.Board, example_driver_board.driver.BoardConsole (bench.example.com's "
        "defaults; drivers in the class's annotation names others); write example_driver_board.driver.Board",
        "spec.template.spec.drivers[2].type: a console needs a board"]
    # Within the ceiling and beside a board, nothing is refused.
    exporter_set["spec"]["parameters"]["power"]["watts"] = "60"
    exporter_set["spec"]["template"]["spec"]["drivers"][1] = {"type": "example_driver_board.driver.Board"}
    resolved = set_overrides.resolve(vclass, exporter_set)
    assert resolved["violations"] == [] and resolved["parameters"]["power"] == {"watts": "60"}
