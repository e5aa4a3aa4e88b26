"""The fake Corellium API driven by the Jumpstarter Corellium driver's own API client.

If the published driver (jumpstarter-driver-corellium, pinned in
requirements-test.txt) can work against the fake, the fake speaks the shapes
the real service speaks to it; and both clients see each other's instances.
"""

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import client as cc
from corellium_fake import Delays, FakeCorellium
from jumpstarter_driver_corellium.corellium.api import ApiClient
from jumpstarter_driver_corellium.corellium.exceptions import CorelliumApiException
from jumpstarter_driver_corellium.corellium.types import Instance
from jumpstarter_driver_corellium.driver import Corellium

POLL = {"timeout": 5, "poll_interval": 0.01}


@pytest.fixture
def driver_api(corellium_fake, monkeypatch):
    # The driver's requests session trusts what REQUESTS_CA_BUNDLE names.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", corellium_fake.ca_path)
    return ApiClient(corellium_fake.host, corellium_fake.token)


@pytest.fixture
def our_client(corellium_fake):
    return cc.CorelliumClient(corellium_fake.host, corellium_fake.token,
                              ca_path=corellium_fake.ca_path)


def test_driver_finds_projects_by_name_and_id(corellium_fake, driver_api):
    project = corellium_fake.projects[1]

    assert driver_api.get_project(project.name).id == project.id
    assert driver_api.get_project(project.id).name == project.name
    assert driver_api.get_project().name == "Default Project"
    assert driver_api.get_project("nope") is None


def test_driver_reads_models_into_its_device_type(driver_api):
    device = driver_api.get_device("kronos")

    assert (device.flavor, device.model, device.name) == ("kronos", "kronos", "rd1ae")
    assert device.quotas["cores"] > 0
    assert driver_api.get_device("nope") is None


def test_driver_lifecycle_is_seen_by_our_client(corellium_fake, driver_api, our_client):
    project = driver_api.get_project("Default Project")
    device = driver_api.get_device("kronos")

    created = driver_api.create_instance("driver-made", project, device, "1.1.1",
                                         "Critical Application Monitor (Baremetal)")

    ours = our_client.find_instance(project.id, "driver-made")
    assert ours["id"] == created.id
    our_client.wait_for_state(created.id, ["on"], **POLL)
    assert driver_api.get_instance("driver-made") == Instance(id=created.id, state="on")

    driver_api.set_instance_state(created, "off")
    assert our_client.wait_for_state(created.id, ["off"], **POLL)["state"] == "off"
    assert driver_api.get_instance(created.id) == Instance(id=created.id, state="off")

    driver_api.destroy_instance(created)
    assert our_client.wait_for_state(created.id, [cc.ABSENT], **POLL) is None
    assert driver_api.get_instance(created.id) is None
    assert corellium_fake.count("POST", "/v1/instances") == 1


def test_driver_reuses_an_instance_our_client_made(driver_api, our_client, default_project):
    created = our_client.create_instance(default_project, "pool-0", "kronos", "1.1.1")
    our_client.wait_for_state(created["id"], ["on"], **POLL)

    # The driver's power-on looks the name up before it creates anything.
    found = driver_api.get_instance("pool-0")

    assert found == Instance(id=created["id"], state="on")


def test_driver_reaches_the_console_url(driver_api, our_client, default_project):
    created = our_client.create_instance(default_project, "console", "kronos", "1.1.1")
    instance = Instance(id=created["id"])

    console_id = driver_api.get_instance_console_id(instance, "Primary Compute Non-Secure")
    url = driver_api.get_instance_console_url(instance, console_id)

    assert console_id == "port-1-cons"
    assert url.startswith("wss://") and created["id"] in url


def test_driver_surfaces_the_fakes_errors(corellium_fake, driver_api, default_project):
    project = driver_api.get_project(default_project)
    device = driver_api.get_device("kronos")
    corellium_fake.set_quota(default_project, 0)

    with pytest.raises(CorelliumApiException, match="quota"):
        driver_api.create_instance("over", project, device, "1.1.1", "build")
    with pytest.raises(CorelliumApiException, match="No instance|not found"):
        driver_api.destroy_instance(Instance(id="7f4f241c-821f-4219-905f-c3b50b0db5dd"))

    wrong = ApiClient(corellium_fake.host, "not-the-token")
    with pytest.raises(CorelliumApiException, match="Invalid or missing authorization token"):
        wrong.get_project()


@pytest.fixture
def instant_fake(monkeypatch):
    """A fake whose transitions are immediate: the driver polls every 5 s otherwise."""
    with FakeCorellium(delays=Delays(create=0, boot=0, stop=0, delete=0, reboot=0)) as fake:
        monkeypatch.setenv("CORELLIUM_API_HOST", fake.host)
        monkeypatch.setenv("CORELLIUM_API_TOKEN", fake.token)
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", fake.ca_path)
        monkeypatch.setenv("CORELLIUM_API_RETRIES", "3")
        yield fake


def test_driver_power_cycle_creates_and_destroys_one_instance(instant_fake):
    driver = Corellium(project_id="Default Project", device_name="jmp-0",
                       device_flavor="kronos")

    driver.children["power"].on()

    (instance,) = instant_fake.instances()
    assert (instance["name"], instance["state"], instance["flavor"]) == ("jmp-0", "on", "kronos")
    driver.children["power"].off(destroy=True)
    assert instant_fake.instances() == []
    assert instant_fake.count("POST", "/v1/instances") == 1
    assert instant_fake.count("DELETE") == 1


def test_driver_power_on_starts_the_instance_the_pool_made(instant_fake):
    project = instant_fake.projects[0].id
    pool = cc.CorelliumClient(instant_fake.host, instant_fake.token,
                              ca_path=instant_fake.ca_path)
    created = pool.create_instance(project, "jmp-1", "kronos", "1.1.1")
    pool.set_state(created["id"], "off")
    driver = Corellium(project_id=project, device_name="jmp-1", device_flavor="kronos")

    driver.children["power"].on()

    assert [(i["id"], i["state"]) for i in instant_fake.instances()] == [(created["id"], "on")]
    assert instant_fake.count("POST", "/v1/instances") == 1
