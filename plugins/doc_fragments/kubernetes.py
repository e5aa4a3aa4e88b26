# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # How the collection's modules reach the API server (module_utils/k8s_client.py).
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description: Path to a kubeconfig. Default is C(K8S_AUTH_KUBECONFIG), C(KUBECONFIG), then in-cluster.
    type: path
requirements:
  - kubernetes >= 30
"""
