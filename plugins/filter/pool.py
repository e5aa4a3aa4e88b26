"""Filters that expose the pool logic of plugins/module_utils to playbooks."""

from ansible.errors import AnsibleFilterError
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.demand import (
    attribute_lease_demand,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.merge import (
    deep_merge,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.parameters import (
    validate_parameters,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.status import (
    pool_status,
)


def _reporting_errors(function):
    """Turn bad input into an AnsibleFilterError that names the filter."""

    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except (TypeError, ValueError, KeyError) as error:
            raise AnsibleFilterError(f"{function.__name__}: {error}") from error

    wrapper.__name__ = function.__name__
    wrapper.__doc__ = function.__doc__
    return wrapper


@_reporting_errors
def deep_merge_filter(base, override):
    return deep_merge(base, override)


@_reporting_errors
def validate_parameters_filter(parameters, provisioner):
    return validate_parameters(provisioner, parameters)


@_reporting_errors
def scale_plan_filter(exporter_set, virtual_target_class, exporters, pending_leases, now,
                      instances=None, options=None, leases=None):
    return scale_plan(exporter_set, virtual_target_class, exporters, pending_leases, now,
                      instances=instances, options=options, leases=leases)


@_reporting_errors
def lease_demand_filter(exporter_sets, leases, exporters, now):
    return attribute_lease_demand(exporter_sets, leases, exporters, now)


@_reporting_errors
def pool_status_filter(exporter_set, exporters, instances=None):
    return pool_status(exporter_set, exporters, instances)


class FilterModule:
    def filters(self):
        return {
            "deep_merge": deep_merge_filter,
            "validate_parameters": validate_parameters_filter,
            "scale_plan": scale_plan_filter,
            "lease_demand": lease_demand_filter,
            "pool_status": pool_status_filter,
        }
