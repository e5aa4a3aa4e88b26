# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # How the collection's modules reach the API server: the argument spec and
    # client of module_utils/api/client.py. Names, aliases and environment
    # variables are kubernetes.core's, so the same module_defaults, AWX
    # Kubernetes credential or kubeconfig serve both collections.
    DOCUMENTATION = r"""
options:
  host:
    description:
      - URL of the API server, for example V(https://api.example.com:6443).
      - Defaults to the E(K8S_AUTH_HOST) environment variable, which the AWX credential type
        C(OpenShift or Kubernetes API Bearer Token) sets.
      - With O(api_key) (or O(client_cert) and O(client_key)) no kubeconfig is read.
    type: str
  api_key:
    description:
      - Bearer token for the API server, for example a ServiceAccount token.
      - Defaults to the E(K8S_AUTH_API_KEY) environment variable.
    type: str
  validate_certs:
    description:
      - Whether the API server's certificate is verified.
      - Defaults to the E(K8S_AUTH_VERIFY_SSL) (or E(K8S_AUTH_VALIDATE_CERTS)) environment
        variable, else what the kubeconfig says, else V(true).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to the CA certificates that sign the API server's certificate.
      - Defaults to the E(K8S_AUTH_SSL_CA_CERT) (or E(K8S_AUTH_CA_CERT)) environment variable.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate to authenticate with, together with O(client_key).
      - Defaults to the E(K8S_AUTH_CERT_FILE) (or E(K8S_AUTH_CLIENT_CERT)) environment variable.
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the private key of O(client_cert).
      - Defaults to the E(K8S_AUTH_KEY_FILE) (or E(K8S_AUTH_CLIENT_KEY)) environment variable.
    type: path
    aliases: [key_file]
  kubeconfig:
    description:
      - Path to a kubeconfig, read when O(host) and a credential are not both given.
      - Defaults to the E(K8S_AUTH_KUBECONFIG) environment variable, then E(KUBECONFIG), then
        C(~/.kube/config); inside a Pod with none of them, the Pod's service account.
      - O(host), O(api_key), O(validate_certs), O(ca_cert), O(client_cert) and O(client_key)
        override what the kubeconfig says.
    type: path
  context:
    description:
      - Context of the kubeconfig to use instead of its current context.
      - Defaults to the E(K8S_AUTH_CONTEXT) environment variable.
    type: str
notes:
  - A play sets these options once for every module of the collection and of
    kubernetes.core's C(k8s) group with
    C(module_defaults) and C(group/jumpstarter.virtual_exporters.kubernetes).
  - Before its first request the module checks that the API server answers and accepts the
    credentials, and fails naming the host when it does not.
requirements:
  - kubernetes >= 30
"""
