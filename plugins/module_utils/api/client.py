"""One way to reach the API server, for modules and the operator alike.

The connection options are kubernetes.core's (same names, aliases and
``K8S_AUTH_*`` environment variables), so a play, an AWX Kubernetes bearer
token credential or a kubeconfig reach the API server the same way for this
collection's modules as for ``kubernetes.core.k8s``. The options are
documented once, in ``plugins/doc_fragments/kubernetes.py``.
"""

import os

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.core import CoreApi

# option: (argument spec, environment variables read when the option is not
# given, first match wins; the same names kubernetes.core reads)
AUTH_OPTIONS = {
    "kubeconfig": ({"type": "path"}, ("K8S_AUTH_KUBECONFIG",)),
    "context": ({"type": "str"}, ("K8S_AUTH_CONTEXT",)),
    "host": ({"type": "str"}, ("K8S_AUTH_HOST",)),
    "api_key": ({"type": "str", "no_log": True}, ("K8S_AUTH_API_KEY",)),
    "validate_certs": ({"type": "bool", "aliases": ["verify_ssl"]},
                       ("K8S_AUTH_VALIDATE_CERTS", "K8S_AUTH_VERIFY_SSL")),
    "ca_cert": ({"type": "path", "aliases": ["ssl_ca_cert"]}, ("K8S_AUTH_CA_CERT", "K8S_AUTH_SSL_CA_CERT")),
    "client_cert": ({"type": "path", "aliases": ["cert_file"]}, ("K8S_AUTH_CLIENT_CERT", "K8S_AUTH_CERT_FILE")),
    "client_key": ({"type": "path", "aliases": ["key_file"]}, ("K8S_AUTH_CLIENT_KEY", "K8S_AUTH_KEY_FILE")),
}

# The argument spec every module that talks to the API server merges in.
AUTH_ARG_SPEC = {name: dict(spec) for name, (spec, _env) in AUTH_OPTIONS.items()}

# kubernetes.client.Configuration attribute of each option applied over a
# loaded kubeconfig or in-cluster configuration.
_CONFIGURATION_ATTRIBUTES = {
    "host": "host",
    "validate_certs": "verify_ssl",
    "ca_cert": "ssl_ca_cert",
    "client_cert": "cert_file",
    "client_key": "key_file",
}
_FALSE = ("0", "false", "no", "off", "n", "f")


class ConnectionOptionsError(Exception):
    """The connection options cannot make a client; the message names the option or host."""


def resolve_auth(**given):
    """The connection options: each one given, else its environment variable;
    ``_sources`` says which option or variable each value came from."""
    unknown = set(given) - set(AUTH_OPTIONS)
    if unknown:
        raise TypeError(f"unknown connection options: {', '.join(sorted(unknown))}")
    auth = {"_sources": {}}
    for name, (spec, env) in AUTH_OPTIONS.items():
        value = given.get(name)
        source = name
        if value is None:
            variable = next((v for v in env if os.environ.get(v) not in (None, "")), None)
            if variable:
                value, source = os.environ[variable], variable
                if spec["type"] == "bool":
                    value = value.strip().lower() not in _FALSE
        if value is not None and value != "":
            auth[name] = value
            auth["_sources"][name] = source
    return auth


def _configuration(auth):
    from kubernetes import client, config

    host = auth.get("host")
    if host:
        auth["host"] = host = host.rstrip("/")
    complete = host and (auth.get("api_key") or (auth.get("client_cert") and auth.get("client_key")))
    configuration = client.Configuration()
    # Room for the requests a module or the operator makes side by side.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 8)
    if complete:
        pass  # the options alone reach and authenticate to the API server
    elif auth.get("kubeconfig") or auth.get("context") or os.environ.get("KUBECONFIG") \
            or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        path = auth.get("kubeconfig")
        # KUBECONFIG may list several files; the client merges them.
        files = path or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            config.load_kube_config(config_file=files, context=auth.get("context"),
                                    client_configuration=configuration)
        except (config.ConfigException, OSError) as error:
            where = f"kubeconfig {path}" if path else f"the default kubeconfig ({files})"
            hint = "" if host else "; or give host and api_key (K8S_AUTH_HOST, K8S_AUTH_API_KEY)"
            raise ConnectionOptionsError(f"cannot load {where}: {error}{hint}") from None
    else:
        try:
            config.load_incluster_config(client_configuration=configuration)
        except config.ConfigException as error:
            raise ConnectionOptionsError(f"cannot load the in-cluster configuration: {error}") from None
    for option, attribute in _CONFIGURATION_ATTRIBUTES.items():
        if option in auth:
            setattr(configuration, attribute, auth[option])
    if "api_key" in auth:
        configuration.api_key = {"authorization": f"Bearer {auth['api_key']}"}
        configuration.api_key_prefix = {}
        configuration.refresh_api_key_hook = None
    for option in ("ca_cert", "client_cert", "client_key"):
        if option in auth and not os.path.isfile(auth[option]):
            raise ConnectionOptionsError(
                f"{auth['_sources'][option]}: {auth[option]} is not a file (option {option})")
    return configuration


def api_client(kubeconfig=None, **options):
    """A ``kubernetes.client.ApiClient`` from the connection options.

    Options not given come from their ``K8S_AUTH_*`` variables. With
    ``host`` and ``api_key`` (or ``host``, ``client_cert`` and
    ``client_key``) no kubeconfig is read; otherwise the kubeconfig
    (``kubeconfig``, else ``KUBECONFIG``, else ``~/.kube/config``) or, inside a
    Pod with neither, the in-cluster configuration is loaded, and the options
    given override what it says.
    """
    from kubernetes import client

    auth = resolve_auth(kubeconfig=kubeconfig, **options)
    return _bounded(client.ApiClient)(_configuration(auth))


def _bounded(api_client_class):
    """``api_client_class`` reading custom objects (plain JSON, response type
    ``object``) at any depth the API server sends, kept to what the
    operator reads (bounded_json): one deeply nested set must not make the
    namespace's list unreadable."""
    from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import bounded_json

    class Bounded(api_client_class):
        def deserialize(self, response_text, response_type, content_type):
            if response_type == "object" and response_text and "json" in (content_type or "application/json"):
                return bounded_json.loads(response_text)
            return super().deserialize(response_text, response_type, content_type)

    return Bounded


def describe_source(auth):
    """Where the credentials of ``auth`` came from, for error messages."""
    sources = auth.get("_sources", {})
    if "api_key" in sources:
        return f"the bearer token ({'option api_key' if sources['api_key'] == 'api_key' else sources['api_key']})"
    if "client_cert" in sources:
        return f"the client certificate {auth['client_cert']}"
    if "kubeconfig" in auth:
        return f"the credentials of kubeconfig {auth['kubeconfig']}"
    return "the credentials of the kubeconfig or the Pod's service account"


def connect(**options):
    """``api_client`` that first checks the API server answers and accepts the
    credentials (one GET /version), raising ``ConnectionOptionsError`` naming the
    host and where the credentials came from."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    auth = resolve_auth(**options)
    configuration = _configuration(auth)
    api = _bounded(client.ApiClient)(configuration)
    host = configuration.host
    try:
        client.VersionApi(api).get_code(_request_timeout=30)
    except ApiException as error:
        if error.status == 401:
            raise ConnectionOptionsError(
                f"the API server at {host} refused {describe_source(auth)}: 401 Unauthorized "
                "(a wrong, expired or revoked token or certificate)") from None
        if error.status != 403:  # /version may be closed to some users; the credentials were accepted
            raise ConnectionOptionsError(f"the API server at {host} answered {error.status} {error.reason} "
                                         f"to GET /version") from None
    except Exception as error:  # urllib3's connection, TLS and timeout errors, after its retries
        reason = getattr(error, "reason", None) or error
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(reason):
            hint = (f" (its certificate is not trusted by "
                    f"{'ca_cert ' + auth['ca_cert'] if 'ca_cert' in auth else 'the configured CA'}; "
                    "set ca_cert / K8S_AUTH_SSL_CA_CERT)")
        raise ConnectionOptionsError(f"cannot reach the API server at {host}: {reason}{hint}") from None
    return api


def module_api_client(module):
    """The API client of a module taking ``AUTH_ARG_SPEC`` (``module_base.main``
    with ``connection=AUTH_ARG_SPEC``); fails the module
    with a message naming the host or option at fault."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        module.fail_json(msg="the kubernetes Python client is required (pip install kubernetes)")
    try:
        return connect(**{name: module.params.get(name) for name in AUTH_OPTIONS})
    except ConnectionOptionsError as error:
        module.fail_json(msg=str(error))


class ClusterModule:
    """The base of a module's work on the cluster, as kubernetes.core's
    AnsibleK8SModule is for its modules: the module taking ``AUTH_ARG_SPEC``
    (``module_base.main``), its parameters, check mode, and one API client (with the
    core and custom-object APIs) connected from the connection options."""

    def __init__(self, module):
        from kubernetes import client

        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.api_client = module_api_client(module)
        # core/v1 on plain dicts, without the generated CoreV1Api (core.py).
        self.core = CoreApi(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
