"""plugins/module_utils/ansible_compat.py on the ansible-core it runs
under (tests/collection/test_ansible_cores.py runs this file on every supported
release), and the tree's use of ansible-core: no private name outside it."""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.datatag import deprecate_value
from ansible.template import trust_as_template
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import ansible_compat

ROOT = Path(__file__).resolve().parents[4]
COMPAT = ROOT / "plugins" / "module_utils" / "ansible_compat.py"
# Where the project's Python is.
TREES = ("plugins", "operator", "tests", "scripts", "bench", "drivers", "awx", "roles", "playbooks")
# Python's own public names that start with an underscore.
PYTHON_PUBLIC = frozenset({"_exit", "_getframe", "_asdict", "_replace", "_fields", "_make", "_current_frames"})


_MODULE_NAME = re.compile(r"^ansible(\.[A-Za-z_]\w*)+$")


def _ansible(name):
    return name == "ansible" or name.startswith("ansible.")


def _private_module(name):
    """ansible-core's module ``name`` is private: an underscore part, or the
    configuration it reads at import (``ansible.constants``)."""
    parts = name.split(".")
    return any(part.startswith("_") for part in parts) or parts[:2] == ["ansible", "constants"]


def private_names(source, filename="<source>"):
    """``(line, name)`` of each private ansible-core name ``source`` uses:
    a private module imported (or a private name imported from one, or a
    private module's name as a string: imported by name), and in
    a file that imports ansible-core an underscore attribute of anything but
    ``self`` or ``cls`` (an ansible-core object's: ``validation._warnings``,
    ``module._diff``), by attribute or by ``getattr``/``setattr`` name."""
    tree = ast.parse(source, filename)
    found = []
    uses_ansible = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _ansible(alias.name):
                    uses_ansible = True
                    if _private_module(alias.name):
                        found.append((node.lineno, alias.name))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _ansible(node.module):
            uses_ansible = True
            for alias in node.names:
                if _private_module(f"{node.module}.{alias.name}"):
                    found.append((node.lineno, f"{node.module}.{alias.name}"))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE_NAME.match(node.value) \
                and _private_module(node.value):
            found.append((node.lineno, node.value))  # a module imported by name (__import__, importlib)
    if not uses_ansible:
        return sorted(found)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base, attr = node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            base, attr = node.args[0], node.args[1].value
        else:
            continue
        if not attr.startswith("_") or attr.startswith("__") or attr in PYTHON_PUBLIC:
            continue
        if isinstance(base, ast.Name) and base.id in ("self", "cls"):
            continue  # the class's own, or a plugin base class's API (ActionBase's _task, _execute_module...)
        found.append((node.lineno, f".{attr}"))
    return sorted(found)


def test_no_private_ansible_core_name_outside_the_compatibility_module():
    found = []
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if "__pycache__" in path.parts or path in (COMPAT, Path(__file__)):  # this one: its cases name them
                continue
            found += [f"{path.relative_to(ROOT)}:{line}: {name}"
                      for line, name in private_names(path.read_text(), str(path))]
    assert found == [], "\n".join(found)
    # It reads the compatibility module as any other: there, it finds them.
    assert {"ansible.constants", "._diff", "._warnings", "._no_log_values", "._shell"} <= \
        {name for _, name in private_names(COMPAT.read_text())}


@pytest.mark.parametrize("source, names", [
    ("from ansible._internal._datatag._tags import Origin", ["ansible._internal._datatag._tags.Origin"]),
    ("import ansible._internal._json", ["ansible._internal._json"]),
    ("from ansible import constants as C", ["ansible.constants"]),
    ("import ansible.constants", ["ansible.constants"]),
    ("from ansible.module_utils.basic import _load_params", ["ansible.module_utils.basic._load_params"]),
    ("from ansible.module_utils import basic\nbasic.module._diff", ["._diff"]),
    ("from ansible.plugins.action import ActionBase\nx = self._connection._shell.tmpdir", ["._shell"]),
    ("from ansible.module_utils import basic\ngetattr(m, '_diff', False)", ["._diff"]),
    ("from ansible.plugins.action import ActionBase\nself._task.args; os._exit(0)", []),
    ("import json\nvalidation._warnings", []),  # not a file of ansible-core's users
    ("PRELOAD = ('ansible.cli.playbook', 'ansible._internal._json._profiles')", ["ansible._internal._json._profiles"]),
    ("from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import _x", []),
])
def test_private_names_are_found(source, names):
    assert [name for _, name in private_names(source)] == names


# A module that answers what diff_mode says of it.
DIFF_MODULE = """
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.ansible_compat import diff_mode
module = AnsibleModule(argument_spec={}, supports_check_mode=True)
module.exit_json(diff_mode=diff_mode(module), check_mode=module.check_mode)
"""


@pytest.mark.parametrize("diff", [True, False])
def test_diff_mode_is_the_tasks(tmp_path, diff):
    """As a module process reads its arguments (``python module.py ARGS``)."""
    module = tmp_path / "diff_module.py"
    module.write_text(DIFF_MODULE)
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"_ansible_diff": diff, "_ansible_check_mode": True}}))
    done = subprocess.run([sys.executable, str(module), str(args)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert (result["diff_mode"], result["check_mode"]) == (diff, True)


def test_module_data_is_plain_json_data():
    def tag(value):  # as templating leaves values: tagged str, dict and list subclasses
        return trust_as_template(value) if isinstance(value, str) else deprecate_value(value, "tagged")
    tagged = tag({"name": tag("pool-0"), "list": tag([tag("a"), 1]), "pair": (1, 2)})
    assert type(tagged) is not dict and type(tagged["name"]) is not str
    data = ansible_compat.module_data(tagged)
    assert data == {"name": "pool-0", "list": ["a", 1], "pair": [1, 2]}
    assert (type(data), type(data["name"]), type(data["list"]), type(data["pair"])) == (dict, str, list, list)


def test_alias_warnings_and_no_log_values_of_a_validation():
    spec = {"validate_certs": {"type": "bool", "aliases": ["verify_ssl"]}, "token": {"type": "str", "no_log": True}}
    validation = ArgumentSpecValidator(spec).validate({"validate_certs": True, "verify_ssl": False, "token": "s3cr3t"})
    assert not validation.error_messages
    assert ansible_compat.alias_warnings(validation) == ["Both option validate_certs and its alias verify_ssl are set."]
    assert ansible_compat.no_log_values(validation) == {"s3cr3t"}
    quiet = ArgumentSpecValidator(spec).validate({"validate_certs": True})
    assert ansible_compat.alias_warnings(quiet) == [] and ansible_compat.no_log_values(quiet) == set()


def test_interpreter_python_is_the_hosts_else_the_configurations():
    assert ansible_compat.interpreter_python({"ansible_python_interpreter": "/opt/py/bin/python3"}) == \
        "/opt/py/bin/python3"
    assert ansible_compat.interpreter_python({}) == os.environ.get("ANSIBLE_PYTHON_INTERPRETER", "auto")


def test_config_environment_names_the_base_settings_variables():
    names = ansible_compat.config_environment()
    assert {"ANSIBLE_FORKS", "ANSIBLE_LOCAL_TEMP", "ANSIBLE_COLLECTIONS_PATH"} <= set(names)
    assert names == sorted(set(names))


def test_register_plugin_options_of_a_documented_plugin():
    from ansible.plugins import loader

    loader.init_plugin_loader([])
    tree = loader.callback_loader.get("ansible.builtin.tree", class_only=True)
    assert ansible_compat.register_plugin_options("callback", "tree", tree.__module__) is True
    assert ansible_compat.register_plugin_options("callback", "nothing", "no.such.plugin") is False


def test_the_local_tmp_is_set_for_this_process(tmp_path):
    made = ansible_compat.local_tmp()
    assert os.path.isdir(made)
    try:
        ansible_compat.set_local_tmp(str(tmp_path))
        assert ansible_compat.local_tmp() == str(tmp_path)
    finally:
        ansible_compat.set_local_tmp(made)
