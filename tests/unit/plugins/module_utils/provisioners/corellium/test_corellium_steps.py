"""The instance steps both Corellium modules drive, against the fake API."""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import client as cc
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import steps
from corellium_fake import FakeCorellium

pytest_plugins = ["corellium_fake.pytest_plugin"]


def _client(fake):
    return cc.CorelliumClient(fake.host, fake.token, ca_path=fake.ca_path)


def _steps(fake, check_mode=False):
    return steps.InstanceSteps(_client(fake), check_mode, wait_timeout=10, poll_interval=0.01)


def test_creating_without_flavor_or_os_fails_naming_them(corellium_fake):
    with pytest.raises(ValueError, match="'a' does not exist; creating it needs flavor and os"):
        _steps(corellium_fake).create("p", "a", None, "")
    with pytest.raises(ValueError, match="needs os$"):
        _steps(corellium_fake).create("p", "a", "kronos", None)


def test_check_mode_predicts_and_writes_nothing(corellium_fake):
    project = corellium_fake.projects[0].id
    real = _client(corellium_fake).create_instance(project, "on-1", "kronos", "1.1.1")
    on = _client(corellium_fake).wait_for_state(real["id"], ["on"], 10, 0.01)
    dry = _steps(corellium_fake, check_mode=True)
    assert dry.create(project, "new", "kronos", "1.1.1")["state"] == "creating"
    assert dry.power(on, "off") == ({**on, "state": "off"}, True)
    assert dry.delete(on, wait=True)
    assert dry.changed
    assert corellium_fake.count("POST") == 1 and corellium_fake.count("DELETE") == 0
    assert _client(corellium_fake).get_instance(real["id"])["state"] == "on"


def test_a_busy_instance_is_waited_for_before_its_power_changes(corellium_fake):
    corellium_fake.delays.create = 0.3
    project = corellium_fake.projects[0].id
    the_steps = _steps(corellium_fake)
    created = the_steps.create(project, "busy", "kronos", "1.1.1")
    assert created["state"] == "creating"
    # The API refuses a change now (test_corellium_client); the step waits first.
    _, changed = the_steps.power(created, "off")
    assert changed
    assert the_steps.wait_for(created["id"], ["off"])["state"] == "off"
    assert the_steps.power(_client(corellium_fake).get_instance(created["id"]), "off")[1] is False


def test_a_name_being_released_is_waited_for_and_deleted_once(corellium_fake):
    # Long enough that a loaded machine still reads it "deleting" after the
    # DELETE; released() waits for its end, so the test takes this long.
    corellium_fake.delays.delete = 2.0
    project = corellium_fake.projects[0].id
    client = _client(corellium_fake)
    created = client.create_instance(project, "going", "kronos", "1.1.1")
    client.wait_for_state(created["id"], ["on"], 10, 0.01)
    client.delete_instance(created["id"])
    dying = client.get_instance(created["id"])
    assert dying["state"] == "deleting"
    the_steps = _steps(corellium_fake)
    assert the_steps.delete(dying, wait=False) is False   # already going: no second DELETE
    assert corellium_fake.count("DELETE") == 1
    assert the_steps.released(dying) is None
    assert client.get_instance(created["id"]) is None


def test_released_in_check_mode_does_not_wait():
    with FakeCorellium() as fake:
        dry = _steps(fake, check_mode=True)
        assert dry.released({"id": "x", "state": "deleting"}) is None
        assert fake.count("GET") == 0
