"""Session-wide test setup shared by every test module.

Besides the fixtures, three things watch the run:
- ownership: each test and each fixture owns the processes started while it
  runs (beds of `testbed_factory`, operators, QEMU guests), and stops them
  when it ends (tests/testbed/processes.py); the lab hosts' instances end
  with their test (tests/labhosts);
- the leak check: a process still running when its test or fixture has
  ended, a child of this process or a process of this run's lab-host
  instances still running at the end of the run is listed, killed, and
  fails the run;
- the profile: time in bed start-up, fixture setup and teardown and the
  tests' bodies, printed after the run (and written as JSON with
  --profile-json).
"""

import json
import os
import time
from pathlib import Path

# Before anything imports grpc: the stand-in serves gRPC in this process,
# and with gRPC's fork support (on in its wheels) a pty fork's child
# (ansible-runner's pexpect) restarts gRPC's poller, closes its fds before
# exec and dies there: a job that never starts.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import hypothesis_profile  # noqa: F401
import pytest
import split
from testbed import STARTUPS, BedFactory, failure_report, mark_failed, namespace_name, processes, shared_bed

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
    may restart at will, or one with other CRDs (`crd_files=`). A bed stops
    when the test or fixture that made it ends: one made in a test's body
    after that test's teardown, one made by a module-scoped fixture at the
    end of the module."""
    factory = BedFactory(_run_id(request.config))
    yield factory
    factory.close()


# Session fixtures whose tests scripts/test keeps in one process
# (tests/split.py), so that each is set up once.
SHARED_FIXTURES = ("pod_real_node",)


@pytest.fixture(scope="session")
def pod_real_node(testbed, tmp_path_factory):
    """The session's real node for Pods of the project's images
    (tests/operator_pod.py's ``pod_node``): containerd, the kubelet and the
    image imports are paid once for every file that uses it."""
    from operator_pod import pod_node

    with pod_node(testbed, tmp_path_factory.mktemp("pod-node"), "pod-node", session_wide=True) as node:
        yield node


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
        _release_finalizers(api, name)


# The kinds whose objects a test may leave with a finalizer that only an
# operator removes (the set's teardown, the class's in-use).
_FINALIZED_KINDS = (("virtualtarget.jumpstarter.dev", "v1alpha1", "exportersets"),
                    ("virtualtarget.jumpstarter.dev", "v1alpha1", "virtualtargetclasses"),
                    ("virtualtarget.jumpstarter.dev", "v1alpha1", "exportersetpolicies"),
                    ("jumpstarter.dev", "v1alpha1", "exporters"))


def _release_finalizers(api, namespace: str) -> None:
    """Once the test is over no operator is left to finish its objects'
    finalizers: without this the namespace stays Terminating for the rest
    of the run, and the bed's namespace controller sweeps it again and
    again (a list and a delete of every kind, about once a second for all
    such namespaces), a steady load on the API server the later tests pay."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    for group, version, plural in _FINALIZED_KINDS:
        try:
            items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except client.ApiException as exc:
            if exc.status == 404:
                continue  # a bed without that kind
            raise
        for obj in items:
            if not obj["metadata"].get("finalizers"):
                continue
            try:
                custom.patch_namespaced_custom_object(group, version, namespace, plural, obj["metadata"]["name"],
                                                      {"metadata": {"finalizers": None}})
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    funcargs = getattr(item, "funcargs", {})
    bed = funcargs.get("testbed")
    if report.failed and bed is not None:
        report.sections.append(("test bed", failure_report(bed)))
        if funcargs.get("namespace"):
            report.sections.append(("namespace " + funcargs["namespace"],
                                    _namespace_report(bed, funcargs["namespace"])))
    for proc in getattr(funcargs.get("operator"), "processes", ()) if report.failed else ():
        report.sections.append((f"operator log {proc.log_path} (last 60 lines)", proc.log_tail()))
    return report


def _namespace_report(bed, namespace: str) -> str:
    """The sets' conditions, the Exporters and the last Events of a failed test's namespace."""
    from kubernetes import client

    lines = []
    try:
        with bed.api_client() as api:
            custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
            sets = custom.list_namespaced_custom_object(
                "virtualtarget.jumpstarter.dev", "v1alpha1", namespace, "exportersets")["items"]
            for exporter_set in sets:
                status = exporter_set.get("status") or {}
                lines.append(f"ExporterSet {exporter_set['metadata']['name']}: replicas "
                             f"{status.get('replicas')} ready {status.get('readyReplicas')} "
                             f"available {status.get('availableReplicas')}")
                for condition in status.get("conditions") or []:
                    lines.append(f"  {condition.get('type')}={condition.get('status')} "
                                 f"{condition.get('reason')}: {str(condition.get('message'))[:300]}")
            exporters = custom.list_namespaced_custom_object(
                "jumpstarter.dev", "v1alpha1", namespace, "exporters")["items"]
            for exporter in exporters:
                status = exporter.get("status") or {}
                lines.append(f"Exporter {exporter['metadata']['name']}: enabled "
                             f"{(exporter.get('spec') or {}).get('enabled', True)} "
                             f"leaseRef {status.get('leaseRef')}")
            events = sorted(core.list_namespaced_event(namespace).items,
                            key=lambda e: str(e.last_timestamp or e.event_time or ""))
            for event in events[-20:]:
                lines.append(f"Event {event.type} {event.reason} {event.involved_object.kind}/"
                             f"{event.involved_object.name}: {str(event.message)[:300]}")
    except Exception as error:  # the report must not hide the failure it explains
        lines.append(f"(could not read the namespace: {error})")
    return "\n".join(lines) or "(empty)"


def pytest_collection_finish(session):
    # Importing jumpstarter_cli (unit/scripts/test_demo_usage.py takes jmp's
    # click group) swaps ssl.SSLContext for truststore's, which reads the
    # system CA store again on every TLS connection: about 19 ms of CPU for
    # each of the thousands this process opens to its beds. The tests' own
    # clients take Python's; jmp's processes inject it as ever.
    import ssl

    if ssl.SSLContext.__module__.startswith("truststore"):
        import truststore

        truststore.extract_from_ssl()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Every test on the lab hosts (machine-wide network namespaces) carries
    # the `labhosts` mark, before `-m` selects: scripts/test runs those in one
    # process and the rest in another, side by side. Other files join the
    # lab hosts' process by measured durations (tests/split.py) and carry
    # `second_process`; that process runs its lab-host files first.
    # Every test that uses the bed carries `testbed`, so `-m "not testbed and
    # not labhosts"` selects the tests that need neither.
    lab_files, kinds = set(), {}
    for item in items:
        fixturenames = getattr(item, "fixturenames", ())
        kind = "plain"
        if "testbed" in fixturenames:
            item.add_marker(pytest.mark.testbed)
            kind = "testbed"
        if item.get_closest_marker("realnode"):
            kind = "realnode"
        if "lab_hosts" in fixturenames:
            item.add_marker(pytest.mark.labhosts)
            lab_files.add(item.path.name)
            kind = "labhosts"
        kinds.setdefault(item.path.name, []).append(kind)
    durations = {**split.estimate(kinds), **split.measured_durations()}
    together = [{item.path.name for item in items if name in getattr(item, "fixturenames", ())}
                for name in SHARED_FIXTURES]
    joined = split.beside_lab_hosts(set(kinds), lab_files, durations, together=together)
    for item in items:
        if item.path.name in joined:
            item.add_marker(pytest.mark.second_process)
    # Stable: files keep their order within each group.
    items.sort(key=lambda item: item.path.name not in lab_files)
    _phases["collected"] = len(items)


# -- ownership: nothing outlives its test ---------------------------------------

_OWNER = pytest.StashKey[processes.Owner]()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    # What starts while a fixture sets up is stopped with the fixture's own
    # finalizers (after its teardown code, which may still need it); the
    # check of what is left runs last of them.
    label = f"fixture {fixturedef.argname} ({fixturedef.scope}-scoped, set up for {request.node.nodeid})"
    owner = processes.Owner(label, fixturedef.addfinalizer)
    fixturedef.addfinalizer(owner.close)
    with processes.owning(owner):
        return (yield)


def _item_owner(item) -> processes.Owner:
    if _OWNER not in item.stash:
        item.stash[_OWNER] = processes.Owner(f"test {item.nodeid}")
    return item.stash[_OWNER]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with processes.owning(_item_owner(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with processes.owning(_item_owner(item)):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    owner = _item_owner(item)
    try:
        with processes.owning(owner):
            return (yield)
    finally:
        # After every fixture of the test is torn down: what its body started.
        try:
            owner.finish()
        finally:
            owner.close()
            processes.note_descendants(owner.label)


# -- the leak check -------------------------------------------------------------

_LEAKS = pytest.StashKey[list]()


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    # trylast: after pytest's own hook has torn down what -x or Ctrl-C left set up.
    if session.config.pluginmanager.has_plugin("dsession"):
        return  # an xdist controller: each worker checks its own processes
    # What was still running when its test or fixture ended (killed then),
    # and what is still running now.
    leaks = list(processes.outlived)
    left = processes.leftovers()
    for process in left:
        leaks.append(f"pid {process.pid}: {process.what}\n    still running at the end of the run, "
                     f"started by {process.owner_label}")
    processes.kill([process.pid for process in left])
    # Registered by pytest_plugins above (imported there, so that its asserts are rewritten).
    labhosts = session.config.pluginmanager.get_plugin("labhosts")
    if labhosts is not None and labhosts.lab_hosts_used():
        leaks += [f"on the lab host {line}" for line in labhosts.leftover_instance_processes()]
    session.config.stash[_LEAKS] = leaks
    if leaks and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# -- the profile ----------------------------------------------------------------

# Seconds of every test's setup, call and teardown, summed; set at configure.
_phases: dict[str, float] = {}
# Seconds per test file (setup, call and teardown of its tests), for tests/split.py.
_files: dict[str, float] = {}
# Per test file: CPU seconds of this process and of the children it reaped
# (playbook runs, operators, beds, guests once stopped), and core-seconds the
# machine stood idle while the file's tests ran (waits no process filled).
_files_cpu: dict[str, float] = {}
_files_idle: dict[str, float] = {}
_started = 0.0


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _idle_seconds() -> float:
    """Idle core-seconds of the whole machine since boot (/proc/stat)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cpu, idle = _cpu_seconds(), _idle_seconds()
    try:
        return (yield)
    finally:
        name = item.path.name
        _files_cpu[name] = _files_cpu.get(name, 0.0) + _cpu_seconds() - cpu
        _files_idle[name] = _files_idle.get(name, 0.0) + _idle_seconds() - idle


def pytest_addoption(parser):
    parser.addoption("--profile-json", metavar="PATH", default=None,
                     help="write where the run's time went (bed start-up, fixtures, tests) as JSON to PATH")


def pytest_configure(config):
    global _started
    _phases.update(setup=0.0, call=0.0, teardown=0.0, tests=0)
    _started = time.monotonic()


def pytest_runtest_logreport(report):
    _phases[report.when] = _phases.get(report.when, 0.0) + report.duration
    name = Path(report.nodeid.split("::", 1)[0]).name
    _files[name] = _files.get(name, 0.0) + report.duration
    if report.when == "setup":
        _phases["tests"] = _phases.get("tests", 0) + 1


def _process_seconds() -> float:
    """How long this process has run (from its start, imports included)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _started


def _profile(config) -> dict:
    phases = _phases
    wall = _process_seconds()
    beds = sum(seconds for _name, seconds in STARTUPS)
    return {
        "selection": config.getoption("markexpr") or "",
        "tests": phases["tests"],
        # Before -m and -k: scripts/test checks its processes ran them all.
        "collected": phases.get("collected", 0),
        "wall_seconds": round(wall, 1),
        "bed_startup_seconds": round(beds, 1),
        "beds_started": len(STARTUPS),
        "fixture_setup_seconds": round(phases["setup"], 1),
        "test_body_seconds": round(phases["call"], 1),
        "fixture_teardown_seconds": round(phases["teardown"], 1),
        "outside_tests_seconds": round(wall - phases["setup"] - phases["call"] - phases["teardown"], 1),
        "cpu_seconds": round(_cpu_seconds(), 1),
        "files": {name: round(seconds, 1) for name, seconds in sorted(_files.items())},
        "files_cpu_seconds": {name: round(seconds, 1) for name, seconds in sorted(_files_cpu.items())},
        "files_machine_idle_seconds": {name: round(seconds, 1) for name, seconds in sorted(_files_idle.items())},
    }


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write = terminalreporter.write_line
    _report_leaks(terminalreporter, config)
    if config.option.collectonly:
        return
    profile = _profile(config)
    terminalreporter.section("where the time went")
    write(f"wall clock {profile['wall_seconds']:.0f} s, {profile['tests']} tests "
          f"({profile['selection'] or 'every test'}):")
    write(f"  fixture setup      {profile['fixture_setup_seconds']:8.1f} s")
    write(f"  test bodies        {profile['test_body_seconds']:8.1f} s")
    write(f"  fixture teardown   {profile['fixture_teardown_seconds']:8.1f} s")
    write(f"  outside tests      {profile['outside_tests_seconds']:8.1f} s (start, collection, the end)")
    write(f"  bed start-up       {profile['bed_startup_seconds']:8.1f} s ({profile['beds_started']} beds; "
          "part of the setup or bodies above)")
    write(f"  CPU                {profile['cpu_seconds']:8.1f} s (this process and the children it reaped)")
    heavy = sorted(profile["files_cpu_seconds"].items(), key=lambda entry: -entry[1])[:10]
    write("  most CPU: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in heavy))
    idle = sorted(profile["files_machine_idle_seconds"].items(), key=lambda entry: -entry[1])[:10]
    write("  machine idle while running: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in idle))
    path = config.getoption("profile_json")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(profile, indent=2) + "\n")


def _report_leaks(terminalreporter, config) -> None:
    leaks = config.stash.get(_LEAKS, [])
    if leaks:
        write = terminalreporter.write_line
        terminalreporter.section("processes that outlived their tests", red=True, bold=True)
        for line in leaks:
            write(line, red=True)
        write(f"{len(leaks)} process(es) outlived the test or fixture that started them (killed); "
              "the run fails.", red=True, bold=True)
