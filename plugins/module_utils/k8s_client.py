"""One way to reach the API server, for modules and the operator alike."""

import os


def api_client(kubeconfig=None):
    """An ``ApiClient`` from a kubeconfig, or in-cluster config inside a Pod.

    Without an explicit path, ``K8S_AUTH_KUBECONFIG`` (kubernetes.core's
    variable) wins over ``KUBECONFIG``.
    """
    from kubernetes import client, config

    path = kubeconfig or os.environ.get("K8S_AUTH_KUBECONFIG") or os.environ.get("KUBECONFIG")
    if path or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return config.new_client_from_config(config_file=path)
    configuration = client.Configuration()
    config.load_incluster_config(client_configuration=configuration)
    return client.ApiClient(configuration)
