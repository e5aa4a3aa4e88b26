"""The CA that exporters trust when they reach the Jumpstarter controller.

The controller publishes its CA in the ConfigMap
``jumpstarter-service-ca-cert`` (key ``ca.crt``) of the namespace it
serves, which is the namespace of the ExporterSets it serves. A class may
name another ConfigMap with the ``constants.ANNOTATION_CONTROLLER_CA_CONFIGMAP``
annotation, as ``name`` or ``name/key``.

Every provisioner writes the CA, base64-encoded, as ``tls.ca`` in each
instance's ExporterConfig. ``read_controller_ca`` is the one way to get it,
for the operator and for a by-hand run of the reconcile playbook alike; an
unavailable CA is a result with a message naming the ConfigMap and key, which
the plan turns into a Degraded condition and a Warning Event.
"""

import base64
import binascii
import re

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
# A DER certificate is an ASN.1 SEQUENCE.
_DER_SEQUENCE = 0x30


def configmap_reference(virtual_target_class):
    """(ConfigMap name, key) of the controller CA for a class."""
    annotations = ((virtual_target_class or {}).get("metadata") or {}).get("annotations") or {}
    text = (annotations.get(constants.ANNOTATION_CONTROLLER_CA_CONFIGMAP) or "").strip()
    if not text:
        return constants.DEFAULT_CONTROLLER_CA_CONFIGMAP, constants.DEFAULT_CONTROLLER_CA_KEY
    name, _, key = text.partition("/")
    return (name.strip() or constants.DEFAULT_CONTROLLER_CA_CONFIGMAP,
            key.strip() or constants.DEFAULT_CONTROLLER_CA_KEY)


def pem_certificate_problem(text):
    """Why ``text`` is not a PEM bundle of certificates, or None when it is one."""
    blocks = _PEM_BLOCK.findall(text or "")
    certificates = [body for label, body in blocks if label == "CERTIFICATE"]
    if not certificates:
        return "holds no PEM certificate"
    for number, body in enumerate(certificates, start=1):
        try:
            der = base64.b64decode("".join(body.split()), validate=True)
        except (binascii.Error, ValueError):
            return f"certificate {number} is not valid base64"
        if not der or der[0] != _DER_SEQUENCE:
            return f"certificate {number} is not a DER certificate"
    return None


def controller_ca(configmap, namespace, name, key):
    """The result for a ConfigMap as read (None when it does not exist).

    ``{"available", "configmap", "key", "tls_ca", "message"}``; ``tls_ca`` is
    the base64 PEM bundle, empty when the CA is unavailable.
    """
    where = f"ConfigMap {namespace}/{name} key {key}"
    if configmap is None:
        return _unavailable(namespace, name, key,
                            f"{where}: the ConfigMap does not exist (the Jumpstarter controller's "
                            "CA, written as tls.ca into every exporter config)")
    text = (configmap.get("data") or {}).get(key)
    if not text:
        return _unavailable(namespace, name, key, f"{where}: no such key in the ConfigMap")
    problem = pem_certificate_problem(text)
    if problem:
        return _unavailable(namespace, name, key, f"{where}: {problem}")
    return {
        "available": True,
        "configmap": f"{namespace}/{name}",
        "key": key,
        "tls_ca": base64.b64encode(text.encode()).decode(),
        "message": "",
    }


def _unavailable(namespace, name, key, message):
    return {"available": False, "configmap": f"{namespace}/{name}", "key": key, "tls_ca": "",
            "message": message}


def read_controller_ca(api_client, namespace, virtual_target_class):
    """GET the class's controller CA ConfigMap in ``namespace`` and check it."""
    from kubernetes.client.rest import ApiException

    name, key = configmap_reference(virtual_target_class)
    try:
        found = k8s_core.CoreApi(api_client).read("ConfigMap", namespace, name, missing_ok=True)
    except ApiException as exc:
        return _unavailable(namespace, name, key,
                            f"ConfigMap {namespace}/{name} key {key}: could not be read: "
                            f"{exc.status} {exc.reason}")
    return controller_ca(found, namespace, name, key)
