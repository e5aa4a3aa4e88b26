# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # How the Corellium modules reach the API: the options of
    # module_utils/provisioners/corellium/steps.py connection_argument_spec.
    DOCUMENTATION = r"""
options:
  api_host:
    description:
      - Corellium API host (and optional port), without scheme or C(/api),
        for example C(app.corellium.com).
      - Defaults to the E(CORELLIUM_API_HOST) environment variable, the name the
        Jumpstarter Corellium driver reads.
    type: str
    required: true
  api_token:
    description:
      - Corellium API token, sent as a Bearer token. Never logged or returned.
      - Defaults to the E(CORELLIUM_API_TOKEN) environment variable, the name the
        Jumpstarter Corellium driver reads.
    type: str
    required: true
  project:
    description: Project id or project name the instances belong to.
    type: str
    required: true
  ca_path:
    description: PEM file of certificate authorities to trust in addition to the system ones.
    type: path
  validate_certs:
    description: Verify the API's TLS certificate. Turn off only for lab endpoints.
    type: bool
    default: true
"""

    # The waiting options of the modules that change instances
    # (module_utils/provisioners/corellium/steps.py waiting_argument_spec).
    WAITING = r"""
options:
  wait_timeout:
    description: Seconds to wait for one instance before failing.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two state queries while waiting.
    type: float
    default: 5
"""
