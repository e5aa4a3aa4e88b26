"""The Corellium client against the fake API over real HTTPS on loopback."""

import email.utils
import logging
import time

import pytest
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import client as cc
from corellium_fake import Delays, FakeCorellium

pytest_plugins = ["corellium_fake.pytest_plugin"]


class VirtualTime:
    """Sleeps without waiting: the clock jumps by every sleep. With
    ``real=False`` it moves only by the sleeps, so the time a request takes on
    a busy machine never shows in what a test counts (for a test whose fake
    never changes state while it runs)."""

    def __init__(self, real: bool = True):
        self.sleeps: list[float] = []
        self.start = time.monotonic()
        self.real = real

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)

    def clock(self) -> float:
        return (time.monotonic() if self.real else self.start) + sum(self.sleeps)


def make_client(fake, *, token=None, vtime=None, jitter=0.5, **policy):
    vtime = vtime or VirtualTime()
    return cc.CorelliumClient(
        fake.host, token or fake.token, ca_path=fake.ca_path,
        retry=cc.RetryPolicy(**policy) if policy else cc.RetryPolicy(),
        sleep=vtime.sleep, clock=vtime.clock, jitter=lambda: jitter,
    )


def test_retry_after_seconds_is_honoured(corellium_fake):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime, jitter=0.0)
    corellium_fake.inject(429, times=2, path="/v1/projects", retry_after="7")

    projects = client.list_projects()

    assert [p["name"] for p in projects] == [p.name for p in corellium_fake.projects]
    assert vtime.sleeps == [7.0, 7.0]
    assert corellium_fake.count("GET", "/v1/projects") == 3


def test_retry_after_http_date_is_honoured(corellium_fake):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime, jitter=0.0)
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    corellium_fake.inject(503, times=1, retry_after=when)

    client.list_models()

    assert len(vtime.sleeps) == 1
    assert 17.0 <= vtime.sleeps[0] <= 20.0


@pytest.mark.parametrize("jitter, expected", [
    (1.0, [1.0, 2.0, 4.0, 5.0, 5.0]),   # upper edge of full jitter, capped at max_delay
    (0.25, [0.25, 0.5, 1.0, 1.25, 1.25]),
])
def test_backoff_is_exponential_with_full_jitter_and_capped(corellium_fake, jitter, expected):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime, jitter=jitter,
                         attempts=6, base_delay=1.0, max_delay=5.0, deadline=300.0)
    corellium_fake.inject(500, times=5, path="/v1/models")

    assert client.list_models()
    assert vtime.sleeps == expected


def test_retries_stop_at_the_attempt_bound(corellium_fake):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime, attempts=3, base_delay=0.1)
    corellium_fake.inject(500, times=10, path="/v1/projects")

    with pytest.raises(cc.RetryBudgetExhausted) as failure:
        client.list_projects()

    assert failure.value.status == 500
    assert corellium_fake.count("GET", "/v1/projects") == 3
    assert len(vtime.sleeps) == 2


def test_retries_stop_at_the_deadline_rather_than_sleep_past_it(corellium_fake):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime, attempts=100, deadline=100.0)
    corellium_fake.inject(429, times=100, path="/v1/projects", retry_after="40")

    with pytest.raises(cc.RetryBudgetExhausted):
        client.list_projects()

    assert vtime.sleeps == [40.0, 40.0]
    assert sum(vtime.sleeps) <= 100.0
    assert corellium_fake.count("GET", "/v1/projects") == 3


def test_unauthorized_is_not_retried(corellium_fake):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime)
    corellium_fake.inject(401, times=1)

    with pytest.raises(cc.AuthError) as failure:
        client.list_instances()

    assert failure.value.status == 401
    assert vtime.sleeps == []
    assert corellium_fake.count("GET") == 1


def test_wrong_token_is_an_auth_error_without_the_token(corellium_fake, caplog):
    secret = "wrong-token-4d7c1e9a"
    client = make_client(corellium_fake, token=secret)
    caplog.set_level(logging.DEBUG)

    with pytest.raises(cc.AuthError) as failure:
        client.list_projects()

    assert failure.value.status == 403
    assert failure.value.message == "Invalid or missing authorization token"
    texts = [str(failure.value), repr(failure.value), repr(client), str(failure.value.as_dict()),
             caplog.text]
    assert all(secret not in text for text in texts)


def test_token_stays_out_of_network_errors_and_logs(caplog):
    secret = "secret-token-81f2"
    # Port 9 on loopback: nothing listens, every attempt is refused.
    client = cc.CorelliumClient("127.0.0.1:9", secret, sleep=lambda _: None,
                                retry=cc.RetryPolicy(attempts=2))
    caplog.set_level(logging.DEBUG)

    with pytest.raises(cc.RetryBudgetExhausted) as failure:
        client.list_projects()

    assert "connection failed" in str(failure.value)
    assert secret not in str(failure.value) and secret not in repr(failure.value)
    assert secret not in caplog.text and secret not in repr(client)


def test_untrusted_certificate_fails_without_retries(corellium_fake):
    vtime = VirtualTime()
    client = cc.CorelliumClient(corellium_fake.host, corellium_fake.token,
                                sleep=vtime.sleep, clock=vtime.clock)

    with pytest.raises(cc.CorelliumError) as failure:
        client.list_projects()

    assert not isinstance(failure.value, cc.RetryBudgetExhausted)
    assert "certificate" in str(failure.value).lower()
    assert vtime.sleeps == []


def test_delete_of_a_missing_instance_is_success_without_change(corellium_fake, default_project):
    client = make_client(corellium_fake)
    created = client.create_instance(default_project, "gone-soon", "kronos", "1.1.1")

    assert client.delete_instance(created["id"]) is True
    client.wait_for_state(created["id"], [cc.ABSENT], timeout=5, poll_interval=0.02)
    assert client.delete_instance(created["id"]) is False
    assert client.delete_instance("7f4f241c-0000-4000-8000-000000000000") is False


def test_quota_refusal_is_a_quota_error_with_the_api_message(corellium_fake, default_project):
    corellium_fake.set_quota(default_project, 1)
    client = make_client(corellium_fake)
    client.create_instance(default_project, "first", "kronos", "1.1.1")

    with pytest.raises(cc.QuotaError) as failure:
        client.create_instance(default_project, "second", "kronos", "1.1.1")

    assert "quota" in failure.value.message.lower()
    assert failure.value.as_dict()["kind"] == "QuotaError"
    assert corellium_fake.count("POST", "/v1/instances") == 2
    assert [i["name"] for i in corellium_fake.instances()] == ["first"]


def test_unknown_flavor_is_a_plain_api_error(corellium_fake, default_project):
    client = make_client(corellium_fake)

    with pytest.raises(cc.CorelliumError) as failure:
        client.create_instance(default_project, "x", "no-such-flavor", "1.1.1")

    assert type(failure.value) is cc.CorelliumError
    assert failure.value.status == 400
    assert "Unsupported device model" in failure.value.message


def test_a_429_storm_during_create_yields_exactly_one_instance(corellium_fake, default_project):
    vtime = VirtualTime()
    client = make_client(corellium_fake, vtime=vtime)
    corellium_fake.inject(429, times=5, method="POST", path="/v1/instances", retry_after="1")

    created = client.create_instance(default_project, "storm", "kronos", "1.1.1")

    instances = corellium_fake.instances()
    assert [(i["id"], i["name"]) for i in instances] == [(created["id"], "storm")]
    assert corellium_fake.count("POST", "/v1/instances") == 6
    assert len(vtime.sleeps) == 5


def test_a_create_that_succeeded_behind_a_500_is_not_repeated(corellium_fake, default_project):
    client = make_client(corellium_fake)
    corellium_fake.inject(502, times=1, method="POST", path="/v1/instances", after_commit=True)

    created = client.create_instance(default_project, "committed", "kronos", "1.1.1")

    instances = corellium_fake.instances()
    assert [(i["id"], i["name"]) for i in instances] == [(created["id"], "committed")]
    assert corellium_fake.count("POST", "/v1/instances") == 1


def test_lifecycle_through_every_state(corellium_fake, default_project):
    client = make_client(corellium_fake)
    created = client.create_instance(default_project, "cycle", "rpi4b", "11.2.0", "build-1")
    assert created["state"] == "creating"

    on = client.wait_for_state(created["id"], ["on"], timeout=5, poll_interval=0.01)
    assert (on["name"], on["flavor"], on["os"]) == ("cycle", "rpi4b", "11.2.0")
    client.set_state(created["id"], "off")
    assert client.wait_for_state(created["id"], ["off"], 5, 0.01)["state"] == "off"
    client.set_state(created["id"], "on")
    client.wait_for_state(created["id"], ["on"], 5, 0.01)
    # Long enough that the next read sees it rebooting on a busy machine too.
    corellium_fake.delays.reboot = 0.5
    client.reboot(created["id"])
    assert client.get_instance(created["id"])["state"] == "rebooting"
    client.wait_for_state(created["id"], ["on"], 5, 0.01)
    client.delete_instance(created["id"])
    assert client.wait_for_state(created["id"], [cc.ABSENT], 5, 0.01) is None
    assert client.get_instance(created["id"]) is None


def test_state_change_on_a_busy_instance_is_a_conflict(corellium_fake, default_project):
    corellium_fake.delays.create = 60
    client = make_client(corellium_fake)
    created = client.create_instance(default_project, "busy", "kronos", "1.1.1")

    with pytest.raises(cc.ConflictError):
        client.set_state(created["id"], "off")


def test_wait_for_state_gives_up_at_its_deadline():
    with FakeCorellium(delays=Delays(create=3600)) as fake:
        vtime = VirtualTime(real=False)
        client = make_client(fake, vtime=vtime)
        created = client.create_instance(fake.projects[0].id, "slow", "kronos", "1.1.1")

        with pytest.raises(cc.StateTimeout) as failure:
            client.wait_for_state(created["id"], ["on"], timeout=10, poll_interval=3)

    assert failure.value.last_state == "creating"
    assert vtime.sleeps == [3, 3, 3, pytest.approx(1, abs=0.1)]


def test_instances_are_filtered_by_project_and_name(corellium_fake):
    client = make_client(corellium_fake)
    first, other = (p.id for p in corellium_fake.projects)
    client.create_instance(first, "a", "kronos", "1.1.1")
    client.create_instance(first, "b", "kronos", "1.1.1")
    client.create_instance(other, "a", "kronos", "1.1.1")

    assert sorted(i["name"] for i in client.list_instances(project=first)) == ["a", "b"]
    assert client.find_instance(other, "a")["project"] == other
    assert client.find_instance(other, "b") is None
    assert len(client.list_instances()) == 3


def test_duplicate_names_in_a_project_are_reported(corellium_fake, default_project):
    client = make_client(corellium_fake)
    client.create_instance(default_project, "twin", "kronos", "1.1.1")
    client.request("POST", "/v1/instances",
                   {"project": default_project, "name": "twin", "flavor": "kronos", "os": "1"})

    with pytest.raises(cc.CorelliumError, match="2 instances are named 'twin'"):
        client.find_instance(default_project, "twin")


def test_projects_and_models_are_found_by_id_or_name(corellium_fake):
    client = make_client(corellium_fake)
    project = corellium_fake.projects[1]

    assert client.get_project(project.name)["id"] == project.id
    assert client.get_project(project.id)["name"] == project.name
    assert client.get_project("nope") is None
    assert client.get_model("kronos")["name"] == "rd1ae"
    assert client.get_model("nope") is None


@pytest.mark.parametrize("status, body, expected", [
    (401, {}, cc.AuthError),
    (403, {"error": "Invalid or missing authorization token", "errorID": "PermissionDenied"},
     cc.AuthError),
    (403, {"error": "Project quota exceeded", "errorID": "QuotaExceeded"}, cc.QuotaError),
    (400, {"error": "Not enough cores available in project", "errorID": "UserError"},
     cc.QuotaError),
    (404, {"error": "Instance not found"}, cc.NotFoundError),
    (400, {"error": "Unsupported device model", "errorID": "UserError"}, cc.CorelliumError),
    (429, {"error": "Rate limit exceeded"}, cc.CorelliumError),
    (500, ["not", "an", "object"], cc.CorelliumError),
])
def test_error_classification(status, body, expected):
    assert type(cc.classify_error(status, body, "POST", "/v1/instances")) is expected


@pytest.mark.parametrize("header, expected", [
    (None, None),
    ("0", 0.0),
    ("120", 120.0),
    ("soon", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", 30.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),
])
def test_retry_after_parsing(header, expected):
    reference = email.utils.parsedate_to_datetime("Wed, 21 Oct 2015 07:27:30 GMT").timestamp()
    assert cc.parse_retry_after(header, now=reference) == expected
