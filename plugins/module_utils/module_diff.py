# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a module returns for ``--diff``: the parts of the objects it writes
(or would write, in check mode) before and after, keyed ``Kind/name``, as
kubernetes.core's modules return theirs.

Plain Python (the writers shared with the operator record into a
``Changes``); only ``with_diff`` asks the module."""

import copy
import threading


def with_diff(module, result, before, after):
    """``result`` with ``diff`` (``before`` and ``after``) when the task
    runs with ``--diff``; without it, ``result`` as it is."""
    from .ansible_compat import diff_mode

    if diff_mode(module):
        result["diff"] = {"before": before, "after": after}
    return result


def projection(obj, shape):
    """The parts of ``obj`` at the paths of ``shape`` (a merge patch): what
    writing ``shape`` replaces, None where ``obj`` has nothing."""
    if not isinstance(shape, dict):
        return copy.deepcopy(obj)
    obj = obj if isinstance(obj, dict) else {}
    return {key: projection(obj.get(key), value) for key, value in shape.items()}


class Changes:
    """The writes of one run, ``Kind/name`` to the parts before and after.

    The first ``before`` of a key is kept (what was there when the run
    began) and its ``after`` merged over by later writes of it; safe to
    record from several threads."""

    def __init__(self):
        self.before, self.after = {}, {}
        self._lock = threading.Lock()

    def record(self, key, before, after):
        with self._lock:
            if key not in self.before:
                self.before[key] = copy.deepcopy(before)
            self.after[key] = _merged(self.after.get(key), copy.deepcopy(after))

    def patch(self, key, current, body):
        """A merge patch ``body`` of ``current`` (the object as last read, or None)."""
        self.record(key, projection(current, body), body)

    def __bool__(self):
        return bool(self.after)


def _merged(base, patch):
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return patch
    merged = dict(base)
    for key, value in patch.items():
        merged[key] = _merged(base.get(key), value)
    return merged
