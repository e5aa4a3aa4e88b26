"""Nothing outlives its test: what a fixture or a test starts and hands to
its owner stops when that owner ends, and a run whose finished tests left a
process running fails, naming it, and kills it (tests/conftest.py,
tests/testbed/processes.py).

The run under test is a real pytest run in a subprocess with the project's
conftest as a plugin, on a test file written here; its processes are `sleep`s
whose pids the inner tests write down."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from operator_process import ROOT

TESTS = ROOT / "tests"

INNER = '''
import json
import os
import subprocess
from pathlib import Path

import pytest
from testbed import processes

PIDS = Path(os.environ["JVE_INNER_PIDS"])


def note(name, pid):
    PIDS.mkdir(exist_ok=True)
    (PIDS / name).write_text(str(pid))


def alive(name):
    pid = int((PIDS / name).read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # gone before or while we read (ENOENT, ESRCH)
        return False
    return state != "Z"


def sleeper(name):
    proc = subprocess.Popen(["sleep", "300"])
    processes.track(proc.pid, f"sleep {name}")
    note(name, proc.pid)
    return proc


def stop(proc):
    proc.kill()
    proc.wait()


class TestAClass:
    @pytest.fixture(scope="class")
    @classmethod
    def class_sleeper(cls):
        proc = sleeper("class")
        processes.at_owner_end(lambda: stop(proc))
        return proc

    def test_first(self, class_sleeper):
        assert alive("class")

    def test_second(self, class_sleeper):
        # Still there for the class's second test.
        assert alive("class")


def test_the_class_fixtures_process_ended_with_the_class():
    assert not alive("class")


def test_body_starts_one():
    proc = sleeper("body")
    processes.at_owner_end(lambda: stop(proc))


def test_the_bodys_process_ended_with_its_test():
    assert not alive("body")


def test_forgets_a_tracked_one():
    sleeper("tracked")


def test_a_forgotten_one_is_killed_when_its_test_ends():
    assert not alive("tracked")


@pytest.fixture
def forgetful():
    sleeper("fixture")


def test_uses_a_forgetful_fixture(forgetful):
    assert alive("fixture")


def test_a_fixtures_forgotten_one_is_killed_when_the_fixture_ends():
    assert not alive("fixture")


def test_forgets_a_child():
    note("child", subprocess.Popen(["sleep", "300"]).pid)
'''


def run_inner(tmp_path, body):
    (tmp_path / "test_inner.py").write_text(body)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "JVE_INNER_PIDS": str(tmp_path / "pids")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-q", str(tmp_path / "test_inner.py")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def pid_alive(path):
    pid = int(path.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:  # gone before or while we read (ENOENT, ESRCH)
        return False
    return state != "Z"


def test_what_its_owner_started_ends_with_it_and_what_outlives_its_test_fails_the_run(tmp_path):
    done = run_inner(tmp_path, INNER)
    output = done.stdout + done.stderr
    # Every inner test passed: owned processes ended with their class and test.
    assert "10 passed" in output, output
    # Yet the run fails: three processes outlived their test or fixture.
    assert done.returncode == 1, output
    assert "processes that outlived their tests" in output, output
    pids = tmp_path / "pids"
    tracked, fixture, child = ((pids / name).read_text() for name in ("tracked", "fixture", "child"))
    assert (f"pid {tracked}: sleep tracked\n    still running when its owner ended: "
            "test test_inner.py::test_forgets_a_tracked_one") in output, output
    assert (f"pid {fixture}: sleep fixture\n    still running when its owner ended: "
            "fixture forgetful (function-scoped, set up for test_inner.py::test_uses_a_forgetful_fixture)") in output
    assert (f"pid {child}: sleep 300\n    still running at the end of the run, started by "
            "test test_inner.py::test_forgets_a_child (first seen alive after its teardown)") in output, output
    assert "3 process(es) outlived the test or fixture that started them (killed); the run fails." in output
    # ... and killed, so the run leaves nothing behind.
    assert not any(pid_alive(pids / name) for name in ("tracked", "fixture", "child"))
    assert output.count("\npid ") == 3, output


def test_a_run_whose_tests_leave_nothing_passes(tmp_path):
    body = INNER.split("def test_forgets_a_tracked_one")[0]
    done = run_inner(tmp_path, textwrap.dedent(body))
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "5 passed" in output and "outlived" not in output, output
    assert "where the time went" in output, output
