"""The layers of plugins/module_utils, read from the imports.

The sub-packages stand in layers (``LAYERS``), each importing only from
those below it. At the bottom the backends' code that imports nothing of
the other sub-packages: QEMU's (``provisioners/qemu/``: the command line,
the image fetcher, the QMP client) and Corellium's (``provisioners/corellium/``: its
REST client, its instance steps and how its instances are named). Above it
the pure pool logic (``pool/``), which imports nothing that talks to the
API server (neither ``api/``, ``k8s/`` nor the ``kubernetes`` client), and beside it
the provisioners (``provisioners/``: their schemas, facts, policy and
rendering, which the pool reads and which import nothing of the pool). The
lab hosts' code (``provisioners/qemu_baremetal/``), which reads the pool's
Exporter state, above those; ``api/``, the API access (the client, the
core/v1 calls, the objects' builders and readers, the one writer), above
them; ``k8s/``, which reads and writes the API through it and renders what
is written, on top. An import upwards is against the layers,
and so is an import cycle between two sub-packages of one layer: no two
sub-packages import each other, directly or through others.

A provisioner's package (``provisioners/<name>/``) is two units: its
``__init__.py`` is the provisioner the registry reads and stands with
``provisioners/``; its other modules are its backend's code, with a layer
of their own (``package_of``). Its ``__init__.py`` may import that code
whatever its layer (the lab-host provisioner's view of its hosts, which
reads the pool, imported when the observation asks for it); no other
module of ``provisioners/`` may import it upwards. The top-level modules (``constants.py``,
``timeutil.py``, ``quantity.py``, ``exporterset_options.py``) are below
every layer.

``KNOWN`` lists the imports that break these rules today, each with the
reason it is still there. The list can only shrink: an import it names that
is gone fails the test until it is struck from the list, and an import
against the layers that it does not name fails the test at once.

The core (``pool/``, ``api/``, ``k8s/``) reads a provisioner through the registry:
it names none, and of ``provisioners/`` it imports only the registry and
the interface (``base.py``); the set's policy (``pool/set_overrides.py``)
imports no backend's code either. The pool imports no provisioner's code at
all, and no provisioner imports another's (``across_provisioners``); nor
does ``k8s/`` import one provisioner's code (``core_imports_of_a_provisioner``:
the observation asks the lab-host provisioner for its view of its hosts).
"""

import ast
import re
import sys
from pathlib import Path

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners

# tests/unit/plugins/module_utils/ mirrors the directory it reads.
ROOT = Path(__file__).resolve().parents[4] / "plugins" / "module_utils"
PREFIX = "ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils"
# Whatever talks to the API server.
API = ("api", "k8s", "kubernetes")
# Each sub-package of plugins/module_utils, bottom (0) to top.
LAYERS = {"provisioners/qemu": 0, "provisioners/corellium": 0, "pool": 1, "provisioners": 1,
          "provisioners/qemu_baremetal": 2, "api": 3, "k8s": 4}

# (importing file, what it imports): the imports against the layers that are
# still there, and why.
KNOWN = {
    # None today: a new import against the layers fails the test at once.
}


# The core: it asks the provisioner of a class (``provisioners.get``) what it
# needs, and never names one.
CORE = ("api", "k8s", "pool")
# A provisioner constant (constants.PROVISIONER_QEMU, POD_PROVISIONERS, ...).
_PROVISIONER_CONSTANT = re.compile(r"^PROVISIONER_|_PROVISIONERS$")
# What the core may import of provisioners/: the registry and the interface
# (base.py). A provisioner's own module (qemu, qemu_pod, corellium...)
# it reads through ``provisioners.get(name)``.
CORE_READS_OF_PROVISIONERS = ("__init__", "base")
# Modules of the core that import no backend's code either: what they know
# of a backend is its provisioner's answer. The set's policy: what a set may
# change of its class is each provisioner's to say (resource ceilings,
# driver type hints, the entries a template may not have).
BACKEND_FREE = ("pool/set_overrides.py",)
BACKENDS = ("provisioners/qemu", "provisioners/corellium", "provisioners/qemu_baremetal")


def imports(path):
    """What ``path`` imports from plugins/module_utils (as ``package.module``)
    and from ``kubernetes`` (as ``kubernetes``), wherever in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != PREFIX else [f"{PREFIX}.{a.name}" for a in node.names]
            if node.module.startswith(PREFIX + ".") and node.module.count(".") == PREFIX.count(".") + 1:
                # from ...module_utils.pool import plan: the modules named.
                names = [f"{node.module}.{a.name}" for a in node.names]
            elif node.module.startswith(PREFIX + "."):
                # from ...provisioners.corellium import client: a module of
                # a deeper package when it is one, else a name of its __init__.
                package = ROOT.joinpath(*node.module[len(PREFIX) + 1:].split("."))
                names = [f"{node.module}.{a.name}" if (package / f"{a.name}.py").exists()
                         or (package / a.name).is_dir() else node.module for a in node.names]
        else:
            continue
        for name in names:
            if name == "kubernetes" or name.startswith("kubernetes."):
                found.add("kubernetes")
            elif name.startswith(PREFIX + "."):
                found.add(name[len(PREFIX) + 1:])
    return found


def package_of(relative):
    """The unit of the layers a file (``pool/plan.py``) stands in: its
    sub-package, or ``provisioners/<name>`` for a module of a provisioner's
    package other than its ``__init__.py``; None for a top-level module."""
    parts = Path(relative).parts
    if len(parts) > 2 and parts[0] == "provisioners" and parts[-1] != "__init__.py":
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else None


def unit_of(module):
    """The unit of an imported module (``provisioners.corellium.client``), as ``package_of``."""
    parts = module.split(".")
    return package_of("/".join(parts[:-1] + [parts[-1] + ".py"])) or parts[0]


def edges():
    """(importing file, imported module) for every file under plugins/module_utils."""
    return {(str(path.relative_to(ROOT)), name)
            for path in sorted(ROOT.rglob("*.py")) for name in imports(path)}


def against_the_layers(all_edges):
    """The imports of pool/ that reach the API, the imports upwards, and the
    imports that close a cycle between sub-packages of one layer."""
    bad = {(f, m) for f, m in all_edges if package_of(f) == "pool" and m.split(".")[0] in API}
    graph = {}
    for f, m in all_edges:
        source, target = package_of(f), unit_of(m)
        if source is None or target == source or target not in LAYERS:
            continue
        if LAYERS[target] > LAYERS[source]:
            if f != f"{target}/__init__.py":
                bad.add((f, m))
        elif LAYERS[target] == LAYERS[source]:
            graph.setdefault(source, set()).add(target)
    cyclic = {(a, b) for a in graph for b in graph[a] if a in _reachable(graph, b)}
    bad |= {(f, m) for f, m in all_edges if (package_of(f), unit_of(m)) in cyclic}
    return bad


def test_every_sub_package_has_its_layer():
    units = {package_of(str(path.relative_to(ROOT))) for path in ROOT.rglob("*.py")} - {None}
    assert units == set(LAYERS), "give each sub-package of plugins/module_utils its place in LAYERS"


def _reachable(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_pool_logic_reaches_no_api_and_no_sub_packages_import_each_other():
    bad = against_the_layers(edges())
    new = sorted(bad - set(KNOWN))
    assert not new, "imports against the layers (pool/ reaching the API, or an import cycle):\n" + "\n".join(
        f"  {f} imports {m}" for f, m in new)


def test_the_known_exceptions_only_shrink():
    gone = sorted(set(KNOWN) - against_the_layers(edges()))
    assert not gone, "no longer against the layers, strike from KNOWN:\n" + "\n".join(
        f"  {f} imports {m}" for f, m in gone)


def test_the_reader_sees_an_api_import_and_a_cycle(tmp_path, monkeypatch):
    """The checks above can fail: a pool module that imports the client, two
    packages of one layer that import each other, and an import upwards (a
    provisioner package's backend code reading the pool, a provisioner
    reading another's backend code above it), are found; an import downwards
    (the provisioner reading its own backend code) is not, nor is the
    provisioner reading its own backend code above it."""
    for package in ("pool", "provisioners/corellium", "k8s", "provisioners/qemu", "provisioners/qemu_baremetal"):
        (tmp_path / package).mkdir(parents=True)
    (tmp_path / "pool" / "a.py").write_text(
        "def f():\n    from kubernetes import client\n"
        f"from {PREFIX}.provisioners import p\nfrom {PREFIX}.provisioners.qemu import argv\n")
    (tmp_path / "provisioners" / "p.py").write_text(f"from {PREFIX}.pool.a import f\n")
    (tmp_path / "provisioners" / "qemu" / "argv.py").write_text(f"from {PREFIX}.pool.a import f\n")
    (tmp_path / "provisioners" / "corellium" / "c.py").write_text(
        f"from {PREFIX}.provisioners.qemu.argv import g\nfrom {PREFIX}.pool.a import f\n")
    (tmp_path / "provisioners" / "corellium" / "__init__.py").write_text(
        f"from {PREFIX}.provisioners.corellium import c\n")
    (tmp_path / "k8s" / "b.py").write_text(f"from {PREFIX}.pool import a\n")
    (tmp_path / "provisioners" / "qemu_baremetal" / "pool.py").write_text(f"from {PREFIX}.pool.a import f\n")
    (tmp_path / "provisioners" / "qemu_baremetal" / "__init__.py").write_text(
        f"def view():\n    from {PREFIX}.provisioners.qemu_baremetal import pool\n")
    (tmp_path / "provisioners" / "q.py").write_text(f"from {PREFIX}.provisioners.qemu_baremetal import pool\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert against_the_layers(edges()) == {
        ("pool/a.py", "kubernetes"), ("pool/a.py", "provisioners.p"), ("provisioners/p.py", "pool.a"),
        ("provisioners/qemu/argv.py", "pool.a"), ("provisioners/corellium/c.py", "pool.a"),
        ("provisioners/q.py", "provisioners.qemu_baremetal.pool")}


def provisioner_names(path):
    """Where ``path`` names a provisioner: a ``PROVISIONER_*`` (or
    ``*_PROVISIONERS``) constant, used or imported, or a provisioner's
    string itself. A file of the core that does dispatches on the name."""
    strings = set(provisioners.names())
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and node.value in strings:
            found.append((node.lineno, repr(node.value)))
            continue
        else:
            continue
        found += [(node.lineno, name) for name in names if _PROVISIONER_CONSTANT.search(name)]
    return sorted(set(found))


def named_provisioners():
    """(file, line, what) for each place a module of the core names a provisioner."""
    return [(str(path.relative_to(ROOT)), line, what)
            for package in CORE for path in sorted((ROOT / package).rglob("*.py"))
            for line, what in provisioner_names(path)]


def test_the_core_names_no_provisioner():
    found = named_provisioners()
    assert not found, ("the core names a provisioner; ask provisioners.get(name) and add what it "
                       "needs to the Provisioner interface (provisioners/base.py) instead:\n"
                       + "\n".join(f"  {f}:{line}: {what}" for f, line, what in found))


def test_the_provisioner_check_sees_each_way_of_naming_one(tmp_path, monkeypatch):
    """The check above can fail: a comparison with a constant, a membership
    test, an import of one, a provisioner's string, in k8s/ or pool/; the
    provisioners' own code may name them."""
    for package in ("pool", "k8s", "provisioners"):
        (tmp_path / package).mkdir()
    (tmp_path / "pool" / "a.py").write_text(
        f"from {PREFIX} import constants\n"
        "def f(p):\n"
        "    if p == constants.PROVISIONER_QEMU:\n"
        "        return 1\n"
        "    return p in constants.POD_PROVISIONERS\n")
    (tmp_path / "k8s" / "b.py").write_text(
        f"from {PREFIX}.constants import PROVISIONER_CORELLIUM\n"
        "def g(p):\n"
        "    return p != 'qemu-baremetal.jumpstarter.dev'\n")
    (tmp_path / "provisioners" / "c.py").write_text(
        f"from {PREFIX} import constants\nname = constants.PROVISIONER_QEMU\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert named_provisioners() == [
        ("k8s/b.py", 1, "PROVISIONER_CORELLIUM"), ("k8s/b.py", 3, "'qemu-baremetal.jumpstarter.dev'"),
        ("pool/a.py", 3, "PROVISIONER_QEMU"), ("pool/a.py", 5, "POD_PROVISIONERS")]


def provisioner_internals(all_edges):
    """(file, module) for each import by the core of a provisioner's own
    module, and of a backend's code by a ``BACKEND_FREE`` module."""
    own_modules = ({path.stem for path in (ROOT / "provisioners").glob("*.py")}
                   | {path.parent.name for path in (ROOT / "provisioners").glob("*/__init__.py")}
                   ) - set(CORE_READS_OF_PROVISIONERS)
    found = set()
    for f, m in all_edges:
        parts = m.split(".")
        if package_of(f) in CORE and unit_of(m) == "provisioners" and len(parts) > 1 and parts[1] in own_modules:
            found.add((f, m))
        if f in BACKEND_FREE and unit_of(m) in BACKENDS:
            found.add((f, m))
    return found


def test_the_core_reads_a_provisioner_through_the_registry_alone():
    found = sorted(provisioner_internals(edges()))
    assert not found, ("the core imports a provisioner's own module or a backend's code; give the "
                       "Provisioner interface (provisioners/base.py) what it needs and read it from "
                       "provisioners.get(name):\n" + "\n".join(f"  {f} imports {m}" for f, m in found))


def test_the_registry_check_sees_a_provisioners_module_and_a_backend(tmp_path, monkeypatch):
    """The check above can fail: the set's policy importing QEMU's shared
    module or the command line's defaults is found, and so is a module of
    k8s/ importing a provisioner's module or package, and the set's policy
    importing a provisioner package's backend code; the registry, base.py
    and a backend's code elsewhere in the core are not."""
    for package in ("pool", "k8s", "provisioners/corellium", "provisioners/qemu"):
        (tmp_path / package).mkdir(parents=True)
    for name in ("__init__", "base", "qemu/__init__", "qemu/argv", "qemu/images", "qemu_pod", "corellium/__init__",
                 "corellium/identity"):
        (tmp_path / "provisioners" / f"{name}.py").write_text("")
    (tmp_path / "pool" / "set_overrides.py").write_text(
        f"from {PREFIX} import provisioners\n"
        f"from {PREFIX}.provisioners.base import DEFAULT_IMAGES\n"
        f"from {PREFIX}.provisioners.qemu import DEFAULT_CPU\n"
        f"from {PREFIX}.provisioners.qemu.argv import DEFAULT_MEMORY\n"
        f"from {PREFIX}.provisioners.corellium import identity\n")
    (tmp_path / "pool" / "parameters.py").write_text(f"from {PREFIX}.provisioners.qemu import images\n")
    (tmp_path / "k8s" / "pod.py").write_text(
        f"from {PREFIX}.provisioners import corellium\nfrom {PREFIX}.provisioners import qemu_pod\n"
        f"from {PREFIX}.provisioners.corellium import identity\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert provisioner_internals(edges()) == {
        ("pool/set_overrides.py", "provisioners.qemu"), ("pool/set_overrides.py", "provisioners.qemu.argv"),
        ("pool/set_overrides.py", "provisioners.corellium.identity"),
        ("k8s/pod.py", "provisioners.corellium"), ("k8s/pod.py", "provisioners.qemu_pod")}


# What the provisioners share: the registry, the interface, and QEMU's
# package (qemu/: the schema, facts and rendering qemu_pod and
# qemu_baremetal both use, in its __init__.py, and the QEMU library below
# it). Every other module of provisioners/ is one provisioner's, and a
# provisioner's package is all its own.
SHARED_BY_PROVISIONERS = ("__init__", "base", "qemu")
REGISTRY = "provisioners/__init__.py"


def provisioner_of(relative):
    """The provisioner whose code the file is (``corellium`` for
    ``provisioners/corellium/client.py``, ``qemu_pod`` for
    ``provisioners/qemu_pod.py``); None for a shared module or a file
    outside provisioners/."""
    parts = Path(relative).parts
    if len(parts) < 2 or parts[0] != "provisioners":
        return None
    name = parts[1].removesuffix(".py")
    return None if name in SHARED_BY_PROVISIONERS else name


def across_provisioners(all_edges):
    """(file, module) for each import of a provisioner's code by pool/, by
    another provisioner's code, or by a module the provisioners share other
    than the registry."""
    found = set()
    for f, m in all_edges:
        parts = m.split(".")
        imported = provisioner_of("/".join(parts[:2]) + ".py") if parts[0] == "provisioners" else None
        if imported is None or f == REGISTRY:
            continue
        if package_of(f) == "pool" or (f.startswith("provisioners/") and provisioner_of(f) != imported):
            found.add((f, m))
    return found


def test_the_pool_and_each_provisioner_keep_out_of_the_provisioners_code():
    found = sorted(across_provisioners(edges()))
    assert not found, ("pool/ or a provisioner imports a provisioner's code (another's, for a "
                       "provisioner); move what both need to base.py or behind the Provisioner "
                       "interface:\n" + "\n".join(f"  {f} imports {m}" for f, m in found))


def test_the_provisioner_check_sees_each_import_across(tmp_path, monkeypatch):
    """The check above can fail: pool/ importing a provisioner's backend
    code, a provisioner's module or package importing another's, and the
    shared QEMU package (its facts or its library) importing one, are found;
    the registry importing them all, a provisioner importing its own
    package's code, the shared package and the interface, are not."""
    for package in ("pool", "provisioners/corellium", "provisioners/qemu_baremetal", "provisioners/qemu"):
        (tmp_path / package).mkdir(parents=True)
    files = {
        "provisioners/__init__.py": "from {p}.provisioners import base, corellium, qemu_baremetal, qemu_pod\n",
        "provisioners/base.py": "",
        "provisioners/qemu/__init__.py": "from {p}.provisioners import qemu_pod\n",
        "provisioners/qemu/argv.py": "from {p}.provisioners.qemu_baremetal import hosts\n",
        "provisioners/qemu_pod.py": "from {p}.provisioners import base, qemu\n"
                                    "from {p}.provisioners.corellium import identity\n",
        "provisioners/corellium/__init__.py": "from {p}.provisioners.corellium import identity\n",
        "provisioners/corellium/identity.py": "",
        "provisioners/corellium/client.py": "from {p}.provisioners.qemu_baremetal import hosts\n",
        "provisioners/qemu_baremetal/__init__.py": "from {p}.provisioners import qemu\n"
                                                   "from {p}.provisioners.qemu import argv\n",
        "provisioners/qemu_baremetal/hosts.py": "from {p}.provisioners import qemu_baremetal\n",
        "pool/a.py": "from {p} import provisioners\nfrom {p}.provisioners import base\n"
                     "from {p}.provisioners.corellium import identity\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text.format(p=PREFIX))
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert across_provisioners(edges()) == {
        ("provisioners/qemu/__init__.py", "provisioners.qemu_pod"),
        ("provisioners/qemu/argv.py", "provisioners.qemu_baremetal.hosts"),
        ("provisioners/qemu_pod.py", "provisioners.corellium.identity"),
        ("provisioners/corellium/client.py", "provisioners.qemu_baremetal.hosts"),
        ("pool/a.py", "provisioners.corellium.identity")}


def core_imports_of_a_provisioner(all_edges):
    """(file, module) for each import by the core (``k8s/``, ``pool/``) of one
    provisioner's code: its module, its package or the package's backend
    code. The QEMU package both QEMU provisioners share is none's own."""
    found = set()
    for f, m in all_edges:
        parts = m.split(".")
        if package_of(f) in CORE and parts[0] == "provisioners" and provisioner_of("/".join(parts[:2]) + ".py"):
            found.add((f, m))
    return found


def test_the_core_imports_no_provisioners_code():
    found = sorted(core_imports_of_a_provisioner(edges()))
    assert not found, ("the core imports a provisioner's code; ask provisioners.get(name) and add what it "
                       "needs to the Provisioner interface (provisioners/base.py) instead:\n"
                       + "\n".join(f"  {f} imports {m}" for f, m in found))


def test_the_core_check_sees_a_provisioners_backend_code(tmp_path, monkeypatch):
    """The check above can fail: the observation importing the lab hosts'
    code is found, and so is the pool importing a provisioner's module; the
    registry, the interface and the shared QEMU library are not."""
    for package in ("pool", "k8s", "provisioners/qemu_baremetal", "provisioners/qemu"):
        (tmp_path / package).mkdir(parents=True)
    for name in ("__init__", "base", "qemu_pod", "qemu/__init__", "qemu/images", "qemu_baremetal/__init__",
                 "qemu_baremetal/pool"):
        (tmp_path / "provisioners" / f"{name}.py").write_text("")
    (tmp_path / "k8s" / "observe.py").write_text(
        f"from {PREFIX} import provisioners\nfrom {PREFIX}.provisioners.qemu_baremetal import pool\n")
    (tmp_path / "k8s" / "pod.py").write_text(
        f"from {PREFIX}.provisioners.base import PodParts\nfrom {PREFIX}.provisioners.qemu import images\n")
    (tmp_path / "pool" / "a.py").write_text(f"from {PREFIX}.provisioners import qemu_pod\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert core_imports_of_a_provisioner(edges()) == {
        ("k8s/observe.py", "provisioners.qemu_baremetal.pool"), ("pool/a.py", "provisioners.qemu_pod")}


# Every write to the API server goes through the one writer (api/writer.py):
# outside api/, no call of the client's writes, nor of CoreApi's.
CLIENT_WRITE = re.compile(r"^(create|patch|replace|delete)_namespaced_")
CORE_API_WRITES = ("create", "replace", "patch", "delete")
WRITING_TREES = ("plugins", "operator")
# (file, call): the writes that stay outside the writer, and why.
WRITES_OUTSIDE_THE_WRITER = {
    # The leader election's Lease, released through the client's typed
    # LeaseLock objects (read, then replaced with the version read).
    ("operator/exporterset_operator/election.py", "replace_namespaced_lease"),
}


def _is_core_api(node):
    """Whether ``node`` is a CoreApi: ``CoreApi(...)``, or a name or attribute called ``core`` (``self.core``)."""
    if isinstance(node, ast.Call):
        func = node.func
        return getattr(func, "id", None) == "CoreApi" or getattr(func, "attr", None) == "CoreApi"
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "core" or name.endswith("_core")


def writes_outside_the_writer(repository):
    """(file, call) for each write of the kubernetes client (a
    ``*_namespaced_*`` create, patch, replace or delete) or of a CoreApi in
    plugins/ and operator/, outside plugins/module_utils/api/."""
    found = set()
    for tree in WRITING_TREES:
        for path in sorted((repository / tree).rglob("*.py")):
            relative = str(path.relative_to(repository))
            if relative.startswith("plugins/module_utils/api/"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                    continue
                if CLIENT_WRITE.match(node.func.attr):
                    found.add((relative, node.func.attr))
                elif node.func.attr in CORE_API_WRITES and _is_core_api(node.func.value):
                    found.add((relative, f"CoreApi.{node.func.attr}"))
    return found


def test_every_write_goes_through_the_writer():
    found = writes_outside_the_writer(ROOT.parents[1])
    new = sorted(found - WRITES_OUTSIDE_THE_WRITER)
    assert not new, ("a write to the API server outside api/writer.py; write through "
                     "api.writer.Writer (its outcomes, check mode and diff):\n"
                     + "\n".join(f"  {f}: {call}" for f, call in new))
    gone = sorted(WRITES_OUTSIDE_THE_WRITER - found)
    assert not gone, "no longer there, strike from WRITES_OUTSIDE_THE_WRITER:\n" + "\n".join(
        f"  {f}: {call}" for f, call in gone)


def test_the_write_check_sees_the_clients_and_core_apis_writes(tmp_path):
    """The check above can fail: the client's custom object and typed
    writes, and CoreApi's, in a module, a module_utils file or the
    operator, are found; reads, the writer's own calls and api/ are not."""
    files = {
        "plugins/modules/m.py": "def f(custom, core):\n"
                                "    custom.patch_namespaced_custom_object('g', 'v', 'ns', 'p', 'n', {})\n"
                                "    core.delete('Pod', 'ns', 'n')\n"
                                "    custom.get_namespaced_custom_object('g', 'v', 'ns', 'p', 'n')\n",
        "plugins/module_utils/k8s/a.py": "def g(self, api_client):\n"
                                         "    self.core.create('Secret', 'ns', {})\n"
                                         "    CoreApi(api_client).replace('Secret', 'ns', 'n', {})\n"
                                         "    k8s_core.CoreApi(api_client).patch('Event', 'ns', 'n', {})\n"
                                         "    self.core.read('Pod', 'ns', 'n')\n"
                                         "    self.writer.delete('Pod', 'ns', 'n')\n"
                                         "    write.create('Event', 'ns', {})\n",
        "operator/o/x.py": "def h(api):\n    api.create_namespaced_lease('ns', {})\n",
        "plugins/module_utils/api/writer.py": "def w(custom):\n"
                                              "    custom.delete_namespaced_custom_object('g', 'v', 'ns', 'p', 'n')\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert writes_outside_the_writer(tmp_path) == {
        ("plugins/modules/m.py", "patch_namespaced_custom_object"), ("plugins/modules/m.py", "CoreApi.delete"),
        ("plugins/module_utils/k8s/a.py", "CoreApi.create"), ("plugins/module_utils/k8s/a.py", "CoreApi.replace"),
        ("plugins/module_utils/k8s/a.py", "CoreApi.patch"), ("operator/o/x.py", "create_namespaced_lease")}
