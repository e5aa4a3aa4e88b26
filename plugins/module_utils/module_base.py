# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The one shape of this collection's modules: a module is its
``ARGUMENT_SPEC`` and ``run(module)``, and its ``main()`` is one call of
``main`` here. What every module shares is done here once: check mode, the
connection options merged into the spec, the report of a missing Python
library, and the module's own error types turned into ``fail_json``.

``call`` is the same run for the action plugins that do a module's work
in the task's process (``plugins/plugin_utils/module_work.py``). Diff mode
is ``module_diff.with_diff``."""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib


def argument_spec(spec, connection=None):
    """``spec`` with the ``connection`` options (an argument spec) merged in."""
    overlap = set(spec) & set(connection or {})
    if overlap:
        raise ValueError(f"options {sorted(overlap)} are connection options")
    return {**spec, **(connection or {})}


def call(run, module, errors=()):
    """``run(module)``; an exception of the types of an ``(types, fields)``
    pair of ``errors`` fails the module with its message and
    ``fields(exception)`` (None: the message only; a ``msg`` among them
    is the message, for an exception whose ``str`` is not one), the first
    pair that matches winning."""
    caught = tuple(kind for kinds, _fields in errors for kind in (kinds if isinstance(kinds, tuple) else (kinds,)))
    try:
        run(module)
    except caught as error:
        fields = next(fields for kinds, fields in errors if isinstance(error, kinds))
        module.fail_json(**{"msg": str(error), **(fields(error) if fields else {})})


def main(run, spec, connection=None, requires=None, errors=()):
    """Run the module whose work is ``run`` and options ``spec`` (plus
    ``connection``): with check mode; failing first, naming the library and
    the host, when ``requires`` (``(library, import error or None)``) has an
    error; ``errors`` as for ``call``."""
    module = AnsibleModule(argument_spec=argument_spec(spec, connection), supports_check_mode=True)
    if requires and requires[1] is not None:
        module.fail_json(msg=missing_required_lib(requires[0]), exception=str(requires[1]))
    call(run, module, errors)
