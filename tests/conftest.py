"""Session-wide test setup shared by every test module."""

import os

import pytest
from testbed import BedFactory, failure_report, mark_failed, namespace_name, shared_bed

# Fixture modules several test files use, registered once so that their
# session fixtures (the lab hosts above all) are set up once per run.
pytest_plugins = ["pool_helpers", "labhosts", "corellium_fake.pytest_plugin", "jumpstarter_standin.pytest_plugin"]


def _run_id(config: pytest.Config) -> str:
    # Every xdist worker of one run sees the same PYTEST_XDIST_TESTRUNUID
    # and so attaches to the same bed; a plain run gets its own.
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"run-{os.getpid()}"


@pytest.fixture(scope="session")
def testbed(request):
    """The run's real control plane (etcd, kube-apiserver, controller-manager,
    scheduler, kwok) with the upstream and project CRDs installed.
    KUBECONFIG and PATH point at it for the whole session."""
    run_id = _run_id(request.config)
    with shared_bed(run_id) as bed:
        saved = {key: os.environ.get(key) for key in bed.env}
        os.environ.update(bed.env)
        try:
            yield bed
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            if request.session.testsfailed:
                mark_failed(run_id)


@pytest.fixture(scope="session")
def testbed_factory(request, testbed):
    """Makes extra beds, e.g. `testbed_factory("faults")` for a bed a test
    may restart at will, or one with other CRDs (`crd_files=`)."""
    factory = BedFactory(_run_id(request.config))
    yield factory
    factory.close()


@pytest.fixture
def namespace(testbed, request):
    """A fresh namespace, deleted (without waiting) after the test."""
    from kubernetes import client

    name = namespace_name(request.node.name)
    with testbed.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        yield name
        core.delete_namespace(name)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    bed = getattr(item, "funcargs", {}).get("testbed")
    if report.failed and bed is not None:
        report.sections.append(("test bed", failure_report(bed)))
    return report


# Bed tests that run beside the others in the lab hosts' process (see below).
SECOND_PROCESS_FILES = frozenset({
    "test_pool_healing.py", "test_pool_policy.py", "test_rollout.py",
    "test_standin_controller.py", "test_standin_grpc.py",
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Every test on the lab hosts (machine-wide network namespaces) carries
    # the `labhosts` mark, before `-m` selects: scripts/test runs those in one
    # process and the rest in another, side by side.
    # A few files of bed tests carry `second_process` too: that process
    # reaches them after the lab hosts' tests (they sort after every file of
    # those, and pytest collects files in name order), so the two processes end
    # near each other instead of one running alone for its last third.
    for item in items:
        if "lab_hosts" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.labhosts)
        if item.path.name in SECOND_PROCESS_FILES:
            item.add_marker(pytest.mark.second_process)
