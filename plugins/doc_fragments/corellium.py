# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


class ModuleDocFragment:
    # How the Corellium modules reach the API: the options of
    # module_utils/corellium/steps.py connection_argument_spec.
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
  ca_path:
    description: PEM file of certificate authorities to trust in addition to the system ones.
    type: path
  validate_certs:
    description: Verify the API's TLS certificate. Turn off only for lab endpoints.
    type: bool
    default: true
"""
