"""The operator image, without an image builder.

No container engine runs on the test machines, so these tests stand in for
``podman build -f operator/Containerfile .``: the Containerfile's only
install step is ``operator/install.sh``, which they run into a fresh
``python -m venv`` and a collections directory under tmp_path, from a clean
copy of the repository. What the image would hold is then checked there: the
pinned dependencies, the collection where Ansible finds it, the operator
importing its pool logic from that installed collection with no PYTHONPATH,
and the run-time environment the Containerfile sets (every writable path
under /tmp, a numeric non-root user).

The venv is kept across runs in the cache, one per hash of what decides its
pinned contents (requirements.lock, install.sh, the Python): install.sh runs
into it every time, whole, and its pip step then finds every pinned package
already there instead of installing some 70 of them again. A change to the
lock or the script makes a fresh venv.
"""

import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from collection_tree import copy_collection
from operator_process import ROOT
from requirement_files import pins
from testbed import CACHE_DIR

CONTAINERFILE = ROOT / "operator" / "Containerfile"
IMAGE_COLLECTIONS = "/usr/share/ansible/collections"
FQCN = "jumpstarter.virtual_exporters"


# Every Containerfile of the repository, each built by scripts/images.
CONTAINERFILES = ("operator/Containerfile", "images/python/Containerfile",
                  "images/exporter/Containerfile", "images/qemu-runtime/Containerfile")


def _instructions(path=CONTAINERFILE):
    """(instruction, arguments) of the Containerfile, continuation lines joined."""
    logical, current = [], ""
    for line in path.read_text().splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        keyword, _, rest = current.strip().partition(" ")
        logical.append((keyword.upper(), rest.strip()))
        current = ""
    return logical


def _image_env():
    env = {}
    for keyword, rest in _instructions():
        if keyword == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(rest))
    return env


def _pins():
    """The versions the image runs (operator/requirements.in, locked in requirements.lock)."""
    return pins(ROOT / "operator" / "requirements.in")


def _clean_env(**extra):
    """The caller's environment without the checkout's Python and Ansible paths."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ANSIBLE_") and key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def test_containerfile_installs_with_the_script_and_runs_as_a_numeric_user():
    instructions = _instructions()
    runs = [rest for keyword, rest in instructions if keyword == "RUN"]
    assert len(runs) == 1 and "/src/operator/install.sh /src " + IMAGE_COLLECTIONS in runs[0]
    users = [rest for keyword, rest in instructions if keyword == "USER"]
    assert users[-1].isdigit() and int(users[-1]) != 0
    # The last USER comes after the install and before the entry point.
    keywords = [keyword for keyword, _ in instructions]
    assert len(keywords) - 1 - keywords[::-1].index("USER") > keywords.index("RUN")
    entrypoint = json.loads(dict(instructions)["ENTRYPOINT"])
    assert entrypoint[-2:] == ["-m", "exporterset_operator"]


@pytest.mark.parametrize("path", CONTAINERFILES)
def test_each_containerfile_takes_its_base_pinned_as_a_build_argument(path):
    """The base is a build argument, so scripts/images builds the same file on
    a base it made from Debian's packages while a user's build takes the
    public default; that default is pinned (a digest or a dated tag), never a
    tag that moves."""
    instructions = _instructions(ROOT / path)
    assert instructions[0][0] == "ARG" and instructions[0][1].startswith("BASE_IMAGE="), instructions[0]
    assert instructions[1] == ("FROM", "${BASE_IMAGE}")
    default = instructions[0][1].split("=", 1)[1]
    image, _, digest = default.partition("@")
    tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest) or re.search(r"(?<!\d)20\d{6}(?!\d)", tag), default
    assert [keyword for keyword, _ in instructions].count("FROM") == 1


@pytest.mark.parametrize("path, package", [("images/python/Containerfile", "python3"),
                                           ("images/exporter/Containerfile", "python3"),
                                           ("images/qemu-runtime/Containerfile", "qemu-system-x86")])
def test_debian_packages_are_pinned_and_the_build_script_passes_each_pin(path, package):
    """The package each image is for is installed at a version a build
    argument pins, with a default; scripts/images passes every such argument
    (the version apt offers on the machine) and the local base, so its build
    never falls back on a default it did not choose."""
    instructions = _instructions(ROOT / path)
    defaults = dict(rest.split("=", 1) for keyword, rest in instructions if keyword == "ARG" and "=" in rest)
    installs = " ".join(rest for keyword, rest in instructions if keyword == "RUN" and "apt-get install" in rest)
    pinned = re.findall(r"\b([a-z0-9][a-z0-9.+-]*)=\$\{([A-Z0-9_]+)\}", installs)
    assert package in dict(pinned), installs
    script = (ROOT / "scripts" / "images").read_text()
    for package, argument in pinned:
        assert re.fullmatch(r"(\d+:)?[0-9][A-Za-z0-9.+~-]*", defaults[argument]), (package, defaults[argument])
        assert f'--build-arg "{argument}=$' in script, argument
    assert "-f \"$PROJECT_ROOT/$containerfile\"" in script and f" {path}" in script
    assert '--build-arg "BASE_IMAGE=$' in script


@pytest.mark.parametrize("path, user", [("images/exporter/Containerfile", "1000:1000"),
                                        ("images/qemu-runtime/Containerfile", "1000:1000"),
                                        ("images/python/Containerfile", "1001")])
def test_pod_images_run_as_the_users_the_provisioner_expects(path, user):
    """The provisioner's Pods run these images as non-root with fsGroup 1000
    (plugins/module_utils/k8s/pod.py); the operator's base has the user the
    operator image ends on."""
    users = [rest for keyword, rest in _instructions(ROOT / path) if keyword == "USER"]
    assert users[-1] == user


def test_image_environment_keeps_every_writable_path_under_tmp():
    """With a read-only root filesystem only the emptyDir at /tmp is writable:
    HOME, the temporary directories of Python and Ansible and the runner
    artifacts all have to live there."""
    env = _image_env()
    for key in ("HOME", "TMPDIR", "ANSIBLE_HOME", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_REMOTE_TEMP", "ARTIFACTS_DIR"):
        assert env[key] == "/tmp" or env[key].startswith("/tmp/"), key
    assert env["ANSIBLE_COLLECTIONS_PATH"] == IMAGE_COLLECTIONS
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def _venv_key() -> str:
    """What decides the venv's pinned contents: the lock, the script, the Python."""
    digest = hashlib.sha256()
    for path in (ROOT / "requirements.lock", ROOT / "operator" / "install.sh"):
        digest.update(path.read_bytes())
    digest.update(f"{sys.version}|{os.path.realpath(sys.executable)}".encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """(python, collections dir) after install.sh ran as the image build runs it.

    The venv comes from the cache (module docstring); a partial one, left by
    a run that stopped before install.sh succeeded, is made afresh. Held
    under a lock for the module: one run at a time installs into it."""
    work = tmp_path_factory.mktemp("image")
    source = copy_collection(work / "src")
    before = sorted(str(path.relative_to(source)) for path in source.rglob("*"))
    cache = CACHE_DIR / "operator-image"
    cache.mkdir(parents=True, exist_ok=True)
    venv = cache / _venv_key() / "venv"
    complete = venv.parent / "complete"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not complete.exists():
            shutil.rmtree(venv.parent, ignore_errors=True)
            venv.parent.mkdir(parents=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        python = venv / "bin" / "python"
        collections = work / "collections"
        result = subprocess.run([str(source / "operator" / "install.sh"), str(source), str(collections)],
                                env=_clean_env(PYTHON=str(python)), capture_output=True, text=True, timeout=900)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        complete.touch()
        after = sorted(str(path.relative_to(source)) for path in source.rglob("*"))
        assert after == before, "install.sh wrote into its source"
        yield python, collections


def _image_run(image, tmp_path, *argv):
    """argv in the image's run-time environment, /tmp mapped to tmp_path."""
    _, collections = image
    env = {key: value.replace(IMAGE_COLLECTIONS, str(collections)).replace("/tmp", str(tmp_path))
           for key, value in _image_env().items()}
    return subprocess.run(argv, env=_clean_env(**env), capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_pinned_dependencies_are_installed(image):
    python, _ = image
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"],
                            check=True, capture_output=True, text=True).stdout
    installed = {re.sub(r"[-_.]+", "-", entry["name"]).lower(): entry["version"] for entry in json.loads(listed)}
    assert {name: installed.get(name) for name in _pins()} == _pins()
    assert installed["jumpstarter-exporterset-operator"]


@pytest.mark.slow
def test_the_operator_imports_its_pool_logic_from_the_installed_collection(image, tmp_path):
    python, collections = image
    result = _image_run(image, tmp_path, str(python), "-c",
                        "import exporterset_operator.__main__ as main; print(main._collection_root())")
    assert result.returncode == 0, result.stderr
    root = Path(result.stdout.strip())
    assert root == collections / "ansible_collections" / "jumpstarter" / "virtual_exporters"
    # What the operator reads and runs from there.
    for needed in ("operator/watches.yaml", "playbooks/reconcile.yml", "roles/reconcile/tasks/main.yml"):
        assert (root / needed).is_file(), needed
    help_text = _image_run(image, tmp_path, str(python), "-m", "exporterset_operator", "--help")
    assert help_text.returncode == 0 and "--provisioner" in help_text.stdout


# Where the image links the slot's command (the Containerfile's RUN).
SLOT_COMMAND = "/exporter-set-controller"
IMAGE_PYTHON_BIN = "/opt/app-root/bin/"


@pytest.mark.slow
def test_the_slots_command_runs_the_operator_with_its_args(image, tmp_path):
    """``/exporter-set-controller`` links to a script of the image's Python
    that runs the operator with the args it is given."""
    (run,) = [rest for keyword, rest in _instructions() if keyword == "RUN"]
    target = re.search(rf"\bln -s (\S+) {re.escape(SLOT_COMMAND)}(\s|$)", run)
    assert target and target[1].startswith(IMAGE_PYTHON_BIN), run
    python, _ = image
    script = python.parent / target[1].removeprefix(IMAGE_PYTHON_BIN)
    done = _image_run(image, tmp_path, str(script), "--provisioner=nope", "--zap-log-level=info")
    assert done.returncode == 2, done.stderr
    assert "unknown provisioner 'nope'; supported: corellium.jumpstarter.dev" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_ansible_finds_the_collection_and_its_dependencies(image, tmp_path):
    python, collections = image
    bin_dir = python.parent
    listed = _image_run(image, tmp_path, str(bin_dir / "ansible-galaxy"), "collection", "list", FQCN)
    assert listed.returncode == 0, listed.stderr
    assert str(collections / "ansible_collections") in listed.stdout and FQCN in listed.stdout
    for plugin in (f"{FQCN}.exporterset_info", f"{FQCN}.exporter_pods", "kubernetes.core.k8s"):
        doc = _image_run(image, tmp_path, str(bin_dir / "ansible-doc"), "--json", plugin)
        assert doc.returncode == 0, doc.stderr
        assert plugin in json.loads(doc.stdout)
