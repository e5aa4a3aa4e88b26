"""Every module has one shape: it never builds an ``AnsibleModule`` itself,
and its ``main()`` is one call of ``module_base.main``
(plugins/module_utils/module_base.py), which for a module on the API server
(``connection=``) names its errors (``errors=``: api/errors.py's pairs)."""

import ast
from pathlib import Path

import pytest

MODULES = sorted((Path(__file__).resolve().parents[4] / "plugins" / "modules").glob("*.py"))


def faults(source):
    """What keeps ``source`` (a module's text) from the one shape."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        names = [getattr(node, "id", None), getattr(node, "attr", None)]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names += [alias.name.rsplit(".", 1)[-1] for alias in node.names]
        if "AnsibleModule" in names:
            found.append(f"line {node.lineno}: AnsibleModule")
    mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
    if len(mains) != 1:
        return [*found, "no main()"]
    body = mains[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Expr) else None
    if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "module_base.main"):
        found.append(f"line {mains[0].lineno}: main() is not one call of module_base.main")
    elif "connection" in (named := {k.arg for k in call.keywords}) and "errors" not in named:
        found.append(f"line {mains[0].lineno}: connection= without errors=")
    return found


@pytest.mark.parametrize("path", MODULES, ids=[path.stem for path in MODULES])
def test_the_module_has_the_one_shape(path):
    assert faults(path.read_text()) == []


def test_the_shape_check_finds_a_module_of_another_shape():
    assert len(MODULES) >= 13
    own = "from ansible.module_utils.basic import AnsibleModule\n\ndef main():\n    run(AnsibleModule({}))\n"
    assert len(faults(own)) == 3
    wrapped = "def main():\n    module = make()\n    module_base.main(run, {})\n"
    assert faults(wrapped) == ["line 1: main() is not one call of module_base.main"]
    assert faults("def run(module):\n    pass\n") == ["no main()"]
    documented = 'def main():\n    """Doc."""\n    module_base.main(run, SPEC, connection=AUTH, errors=ERRORS)\n'
    assert faults(documented) == []
    assert faults("def main():\n    module_base.main(run, SPEC, connection=AUTH)\n") == [
        "line 1: connection= without errors="
    ]
