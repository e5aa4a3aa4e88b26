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

    # A module whose second run with the same input changes nothing.
    IDEMPOTENT = r"""
attributes:
  idempotent:
    support: full
    description: A second run with the same input reports no change.
"""
