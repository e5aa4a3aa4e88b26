"""``corellium.jumpstarter.dev``: a device in Corellium's cloud, made over its
REST API (client.py and steps.py here, roles/corellium), and a thin exporter Pod whose
Corellium driver reaches it.

The class's API token goes only to ``parameters.api.host`` and into the
exporter container, from the Secret the class names.
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.base import (
    Field,
    Provisioner,
)
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.provisioners.corellium import identity

DRIVER_TYPE = "jumpstarter_driver_corellium.driver.Corellium"
TOKEN_ENV = "CORELLIUM_API_TOKEN"
HOST_ENV = "CORELLIUM_API_HOST"
# The key of the token in the class's credentials Secret.
CREDENTIALS_KEY = "token"

PROPERTIES = {
    "api": Field(
        "object",
        "Corellium API endpoint.",
        required=True,
        properties={
            "host": Field("string", "API host, hostname[:port].", required=True,
                          format="hostname-port"),
            "projectId": Field("string", "Project UUID.", required=True, format="uuid"),
        },
    ),
    "device": Field(
        "object",
        "Virtual device to create.",
        required=True,
        properties={
            "flavor": Field("string", "Device flavor, e.g. kronos.", required=True),
            "os": Field("string", "OS version, e.g. 1.1.1.", required=True),
            "build": Field("string", "Firmware build name."),
        },
    ),
    "console": Field("string", "Name of the console to attach."),
}


class Corellium(Provisioner):
    name = constants.PROVISIONER_CORELLIUM
    role = "jumpstarter.virtual_exporters.corellium"
    schema = Field("object", "corellium.jumpstarter.dev parameters.", properties=PROPERTIES)

    has_pods = True

    credential_parameters = {
        ("api", "host"): "the class's API token is sent there",
        ("api", "projectId"): "the class's API token creates, resets and deletes instances "
                              "by name in that project",
    }
    credential_images = {"exporter": "the exporter container receives the class's API token"}
    default_driver_types = (DRIVER_TYPE,)

    def instance_name(self, exporter):
        """The Exporter's name and a digest of its namespace and UID, so that
        no two Exporters of one project meet (identity.py)."""
        return identity.exporter_instance_name(exporter)

    def exporter_env(self, class_spec, parameters):
        """The API host, and the token by reference to the class's Secret (never its value)."""
        secret_ref = class_spec.get("credentialsSecretRef") or {}
        return [
            {"name": HOST_ENV, "value": (parameters.get("api") or {}).get("host", "")},
            {"name": TOKEN_ENV,
             "valueFrom": {"secretKeyRef": {"name": secret_ref.get("name", ""), "key": CREDENTIALS_KEY}}},
        ]

    def driver_overrides(self, drivers, parameters, instance_name):
        """The Corellium driver powers the instance's device in the class's project."""
        overrides = {}
        for driver in drivers:
            if driver.get("type") == DRIVER_TYPE:
                device = parameters.get("device") or {}
                config = {
                    "project_id": (parameters.get("api") or {}).get("projectId"),
                    "device_name": instance_name,
                    "device_flavor": device.get("flavor"),
                    "device_os": device.get("os"),
                    "device_build": device.get("build"),
                    "console_name": parameters.get("console"),
                }
                overrides[driver["name"]] = {"config": {k: v for k, v in config.items() if v is not None}}
        return overrides
