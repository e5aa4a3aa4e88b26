"""The credential Secret the Jumpstarter controller issues to each Exporter.

The controller names it in the Exporter's ``status.credential`` (by default
``<exporter>-exporter``), makes it owned by the Exporter, and binds the token
to the Exporter's UID: a token issued to an earlier Exporter of the same name
is refused at Register, forever. Hence three rules, kept here:

* a backend only ever gets a token whose Secret names the Exporter's UID
  among its owner references (``token_for``);
* the pool deletes an Exporter's credential Secret with it (``k8s_apply``);
* a name is not used for a new Exporter while a Secret of that name is in the
  way (``blocking_secret``), and such a Secret is deleted when no live
  Exporter owns it.

A Secret's data is only ever read by name (GET); the operator's cache of
Secrets (k8s/config_sync.py) holds their metadata only.
"""

import base64

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import core as k8s_core
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import objects as k8s_objects
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api import writer

TOKEN_KEY = "token"


def credential_secret_name(exporter):
    """The Secret the controller names, or the name it gives by default."""
    named = ((exporter.get("status") or {}).get("credential") or {}).get("name")
    return named or exporter["metadata"]["name"] + constants.CREDENTIAL_SECRET_SUFFIX


def issued_to(secret, exporter):
    """Whether the Secret belongs to this very Exporter (its UID, not only its name)."""
    return k8s_objects.controlled_by(secret, exporter["metadata"].get("uid"))


def token_for(secret, exporter):
    """The Exporter's token from its credential Secret, or None when it may not be used."""
    if secret is None or not issued_to(secret, exporter):
        return None
    encoded = (secret.get("data") or {}).get(TOKEN_KEY)
    return base64.b64decode(encoded).decode() if encoded else None


def read_secret(api_client, namespace, name):
    """The Secret as a dict, or None when it does not exist (other errors raise)."""
    return k8s_core.CoreApi(api_client).read("Secret", namespace, name, missing_ok=True)


def read_token(api_client, exporter):
    """The token a backend may be given for ``exporter``, or None while there is none.

    None also when the named Secret was issued to another Exporter of the same
    name: the controller issues this one its own Secret in time.
    """
    return read_credential(api_client, exporter)[0]


def read_credential(api_client, exporter):
    """``(token, Secret)``: ``read_token``'s token and the Secret it was read
    from (its version stands for the token in k8s/config_sync.py); the
    Secret is None when the token is."""
    if not ((exporter.get("status") or {}).get("credential") or {}).get("name"):
        return None, None
    secret = read_secret(api_client, exporter["metadata"]["namespace"],
                         credential_secret_name(exporter))
    token = token_for(secret, exporter)
    return token, secret if token is not None else None


def live_exporter_owns(api_client, namespace, secret):
    """Whether the Exporter the Secret belongs to exists (that name with that UID)."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    ref = k8s_objects.controller_ref(secret, constants.EXPORTER.kind)
    if not (ref or {}).get("name"):
        return False
    try:
        exporter = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            *constants.EXPORTER.at(namespace), ref["name"])
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return k8s_objects.controlled_by(secret, exporter["metadata"].get("uid"))


def blocking_secret(api_client, namespace, exporter_name):
    """The credential Secret a new Exporter of this name would inherit, or None."""
    return read_secret(api_client, namespace, exporter_name + constants.CREDENTIAL_SECRET_SUFFIX)


def delete_secret(api_client, namespace, secret):
    """Delete this very Secret (UID precondition); False when it was already gone or replaced."""
    meta = secret["metadata"]
    return writer.Writer(api_client).delete("Secret", namespace, meta["name"], uid=meta["uid"]).written
