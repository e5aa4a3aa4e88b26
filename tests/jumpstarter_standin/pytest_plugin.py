"""The ``standin`` fixture: the Jumpstarter controller stand-in serving the
test's namespace for the whole test, as a real controller would."""

from __future__ import annotations

import pytest
from kubernetes import client, config

from . import JumpstarterStandIn
from .controller import StandInController


@pytest.fixture
def standin(testbed, namespace):
    """A running controller stand-in for ``namespace`` and a user's view of it."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(testbed.kubeconfig), client_configuration=configuration)
    # Five watches and the reconcile loop share the client.
    configuration.connection_pool_maxsize = 16
    api_client = client.ApiClient(configuration)
    controller = StandInController(api_client, namespace).start()
    view = JumpstarterStandIn(api_client, namespace)
    view.controller = controller
    try:
        yield view
    finally:
        controller.stop()
        api_client.close()
    assert not controller.errors, f"controller stand-in errors: {controller.errors}"

