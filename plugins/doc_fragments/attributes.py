"""The attributes most of the collection's modules share."""


class ModuleDocFragment:
    # Check mode and diff mode of a module that reads the cluster or a host
    # and writes to it only outside check mode.
    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: none
    description: Returns no diff.
"""

    # Check mode and diff mode of a module that writes to the cluster:
    # --check --diff shows what it would change.
    DIFF = r"""
attributes:
  check_mode:
    support: full
    description: Reports what would change and writes nothing.
  diff_mode:
    support: full
    description: Returns the parts of the objects it writes (or would write), before and after.
"""

    # A module whose second run with the same input changes nothing.
    IDEMPOTENT = r"""
attributes:
  idempotent:
    support: full
    description: A second run with the same input reports no change.
"""
