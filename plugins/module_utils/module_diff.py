# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What a module returns for ``--diff``: the parts of the objects it writes
(or would write, in check mode) before and after, keyed ``Kind/name``, as
kubernetes.core's modules return theirs."""

from .ansible_compat import diff_mode


def with_diff(module, result, before, after):
    """``result`` with ``diff`` (``before`` and ``after``) when the task
    runs with ``--diff``; without it, ``result`` as it is."""
    if diff_mode(module):
        result["diff"] = {"before": before, "after": after}
    return result
