# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What the collection and its operator need of ansible-core that
ansible-core does not publish: the one place that names its private parts
(underscore names, ``ansible._internal``, the configuration it reads at
import, ``ansible.constants``), for every supported release
(``meta/runtime.yml``; ``tests/sanity/ansible-cores.txt``). Everything else
uses published names only (``tests/unit/plugins/module_utils/test_ansible_compat.py``
reads the tree).

Module side: what a module process may import (``ansible.module_utils``).
Controller side (the functions below ``CONTROLLER``): the action plugins and
the operator's fork server only; they import ``ansible.constants`` when
called, never in a module process."""

import json

from ansible.module_utils.common.json import Direction, get_module_encoder

# What a module's arguments go through on their way to a module process
# (tags dropped, tuples and sets as lists, dates as text).
_TO_MODULE = get_module_encoder("legacy", Direction.CONTROLLER_TO_MODULE)


def diff_mode(module):
    """Whether the task runs with ``--diff`` (``diff: true``): what
    ``AnsibleModule`` keeps of ``_ansible_diff``."""
    return bool(getattr(module, "_diff", False))


def module_data(data):
    """``data`` (templated arguments: tagged str, dict and list subclasses)
    as the plain JSON data a module process reads."""
    return json.loads(json.dumps(data, cls=_TO_MODULE))


def alias_warnings(validation):
    """The warnings of an ``ArgumentSpecValidator`` result that
    ``AnsibleModule`` issues: an option set together with its alias."""
    return [f"Both option {both['option']} and its alias {both['alias']} are set."
            for both in getattr(validation, "_warnings", ())]


def no_log_values(validation):
    """The values of ``no_log`` options an ``ArgumentSpecValidator`` result
    found, which ``AnsibleModule`` masks in its result."""
    return set(validation._no_log_values)


# CONTROLLER: the functions below run in the controller's processes only.

def remote_tmpdir(connection):
    """The remote temporary directory a module run on ``connection`` made,
    which the normal action removes after a synchronous run."""
    return connection._shell.tmpdir


def interpreter_python(variables):
    """The configured Python interpreter of a host with ``variables``
    (``ansible_python_interpreter``, else ``interpreter_python``), untemplated."""
    from ansible import constants

    return constants.config.get_config_value("INTERPRETER_PYTHON", variables=variables)


def inject_invocation(variables):
    """Whether a module's result carries ``invocation`` (its arguments) for a
    host with ``variables``: always before ansible-core 2.21; from 2.21 on,
    as ``INJECT_INVOCATION`` (default off) says."""
    from ansible import constants

    if "INJECT_INVOCATION" not in constants.config.get_configuration_definitions():
        return True
    return bool(constants.config.get_config_value("INJECT_INVOCATION", variables=variables))


def config_environment():
    """Every environment variable ansible-core's base configuration reads
    when it is imported."""
    from ansible import constants

    return sorted({entry["name"] for definition in constants.config.get_configuration_definitions().values()
                   for entry in definition.get("env") or ()})


def register_plugin_options(kind, name, module_name):
    """The documented options of the plugin ``module_name`` put into the
    configuration under ``name`` as well (how a run finds a callback: by its
    file's name); False when it has none."""
    from ansible import constants

    options = constants.config.get_configuration_definitions(kind, module_name)
    if not options:
        return False
    constants.config.initialize_plugin_configuration_definitions(kind, name, options)
    return True


def local_tmp():
    """The local temporary directory ansible-core made when it was imported."""
    from ansible import constants

    return constants.DEFAULT_LOCAL_TMP


def set_local_tmp(path):
    """Make ``path`` this process's local temporary directory (a process
    forked after the import, which must not share its parent's)."""
    from ansible import constants

    constants.DEFAULT_LOCAL_TMP = path
