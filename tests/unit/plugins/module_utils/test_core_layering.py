"""The core is plain Python: what it reaches, import by import.

The core is the pool logic (``pool/``) with the decision of a pass
(``pool/decision.py``). Following its imports through plugins/module_utils
as far as they go, it reaches neither the API package (``api/``), ``k8s/``, the
``kubernetes`` client nor ansible-core; of the provisioners' code it
imports only the registry and the interface (``provisioners/__init__.py``,
``base.py``: a provisioner's own module is the registry's to import), and
reaches a provisioner's code through the registry alone; the decision of a
pass imports nothing but the constants. test_layers.py
reads each file's own imports; this one their closure.
"""

import ast
import functools
import sys

from test_layers import PREFIX, REGISTRY, ROOT, imports, provisioner_of

CORE = "pool"
DECISION = "pool/decision.py"
# What the decision of a pass may reach.
DECISION_REACHES = {"constants.py"}
PROVISIONER_INTERFACE = {"provisioners/__init__.py", "provisioners/base.py"}


def file_of(module):
    """The file under plugins/module_utils of a module name (``pool.plan``), else the name."""
    for candidate in (ROOT / (module.replace(".", "/") + ".py"), ROOT / module.replace(".", "/") / "__init__.py"):
        if candidate.exists():
            return str(candidate.relative_to(ROOT))
    return module


@functools.cache
def file_imports(path):
    """What the file at ``path`` imports of plugins/module_utils (as files),
    with ``kubernetes`` and ``ansible`` for the client and ansible-core."""
    found = {file_of(name) for name in imports(path)}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        if any(name == "ansible" or name.startswith("ansible.") for name in names):
            found.add("ansible")
    return frozenset(found)


def reached(start, stop=()):
    """Every file (or outside module) the imports of ``start`` reach, with
    ``ansible`` for a file that imports ansible-core; the imports of a file
    in ``stop`` are not followed."""
    seen, todo = set(), [start]
    while todo:
        current = todo.pop()
        path = ROOT / current
        if not path.exists() or current in stop:
            continue
        for target in file_imports(path) - seen:
            seen.add(target)
            todo.append(target)
    return seen


def forbidden(start):
    """What the core may not reach from ``start``: the API package, the
    client, ansible-core; a provisioner's own module, imported directly; a
    provisioner's code reached other than through the registry."""
    bad = {f for f in reached(start) if f.startswith(("api/", "k8s/")) or f in ("kubernetes", "ansible")}
    bad |= {file_of(name) for name in imports(ROOT / start)
            if name.startswith("provisioners") and file_of(name) not in PROVISIONER_INTERFACE}
    bad |= {f for f in reached(start, stop={REGISTRY}) if provisioner_of(f)}
    if start == DECISION:
        bad |= reached(start) - DECISION_REACHES
    return bad


def core_files():
    return [str(path.relative_to(ROOT)) for path in sorted((ROOT / CORE).rglob("*.py"))]


def test_the_core_reaches_no_api_no_ansible_and_no_provisioners_own_module():
    assert DECISION in core_files()
    found = {start: sorted(forbidden(start)) for start in core_files()}
    found = {start: bad for start, bad in found.items() if bad}
    assert not found, "the core reaches what it may not:\n" + "\n".join(
        f"  {start}: {', '.join(bad)}" for start, bad in found.items())


def test_a_forbidden_import_anywhere_down_the_chain_is_found(tmp_path, monkeypatch):
    for package in ("pool", "api", "k8s", "provisioners"):
        (tmp_path / package).mkdir()
    (tmp_path / "api" / "writer.py").write_text("")
    (tmp_path / "pool" / "h.py").write_text(f"from {PREFIX}.api import writer\n")
    (tmp_path / "constants.py").write_text("GROUP = 'g'\n")
    (tmp_path / "pool" / "decision.py").write_text(f"from {PREFIX} import constants\n")
    (tmp_path / "pool" / "a.py").write_text(f"from {PREFIX}.pool import b\n")
    (tmp_path / "pool" / "b.py").write_text(f"def f():\n    from {PREFIX}.k8s import status\n")
    (tmp_path / "k8s" / "status.py").write_text("from kubernetes import client\n")
    (tmp_path / "pool" / "c.py").write_text(f"from {PREFIX}.provisioners import qemu_pod, base\n")
    (tmp_path / "provisioners" / "qemu_pod.py").write_text("")
    (tmp_path / "provisioners" / "base.py").write_text("")
    (tmp_path / "pool" / "d.py").write_text("from ansible.module_utils.basic import AnsibleModule\n")
    # Through the registry a provisioner's code is not found; through a
    # module of the pool's own it is.
    (tmp_path / "provisioners" / "__init__.py").write_text(f"from {PREFIX}.provisioners import qemu_pod\n")
    (tmp_path / "pool" / "e.py").write_text(f"from {PREFIX} import provisioners\n")
    (tmp_path / "pool" / "f.py").write_text(f"from {PREFIX}.pool import g\n")
    (tmp_path / "pool" / "g.py").write_text(f"def h():\n    from {PREFIX} import top\n")
    (tmp_path / "top.py").write_text(f"from {PREFIX}.provisioners import qemu_pod\n")
    monkeypatch.setattr(sys.modules["test_layers"], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert forbidden("pool/decision.py") == set()
    assert forbidden("pool/a.py") == {"k8s/status.py", "kubernetes"}
    assert forbidden("pool/c.py") == {"provisioners/qemu_pod.py"}
    assert forbidden("pool/d.py") == {"ansible"}
    assert forbidden("pool/e.py") == set()
    assert forbidden("pool/f.py") == {"provisioners/qemu_pod.py"}
    assert forbidden("pool/h.py") == {"api/writer.py"}
    (tmp_path / "pool" / "decision.py").write_text(f"from {PREFIX}.pool import c\n")
    file_imports.cache_clear()
    assert forbidden("pool/decision.py") == {"pool/c.py", "provisioners/qemu_pod.py", "provisioners/base.py"}
