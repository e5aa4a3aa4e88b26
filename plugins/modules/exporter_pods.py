#!/usr/bin/python
# Copyright: Jumpstarter virtual exporters maintainers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

DOCUMENTATION = r"""
---
module: exporter_pods
short_description: Create or remove the Pods and config Secrets of Pod-backed instances
version_added: 0.1.0
description:
  - For each named Exporter of an ExporterSet, renders the instance's
    ExporterConfig into a Secret owned by the Exporter, then the instance Pod
    (also owned by the Exporter), in one module run for all of them.
  - The Pod is made only once the exporter credential exists (the Secret the
    Jumpstarter controller names in the Exporter's C(status.credential));
    Exporters still waiting for it are returned in C(waiting), which is not a failure.
  - With I(state=absent), deletes the Pods and config Secrets of the named Exporters, each only
    when a fresh read just before shows its Exporter gone, or disabled and unleased from both
    sides (lease safety); otherwise it is returned in C(waiting) and left as it is.
  - A Pod the pool made for an earlier Exporter of the same name (owned by another UID) is
    deleted, and the Exporter waits for the next run; a Pod of that name the pool did not
    make is left alone and the Exporter waits.
  - The exporter token is read from the credential Secret and written only
    into the config Secret; it is never returned. A credential Secret that does
    not name the Exporter's UID among its owners was issued to an earlier
    Exporter of the same name; its token is never used, and the Exporter waits.
  - The ExporterConfig carries the controller CA as C(tls.ca) and
    C(exitOnLeaseEnd) (true unless the set's C(recycleStrategy) is C(InPlaceReuse)).
  - With I(state=synced), re-renders the ExporterConfig of each named Exporter whose Pod runs
    (token, controller endpoint, CA, drivers) and compares it with its config Secret. One that
    differs is rewritten and its Pod deleted, so the next run starts the exporter afresh on the
    new config (C(resynced)). This is done as a reset in place is. The Exporter is disabled
    while no lease holds it from either side (resourceVersion precondition, annotated as retiring
    for C(InPlaceReuse)); a fresh read must then see it disabled and unleased; it is enabled again
    after the restart. A leased one is left exactly as it is and returned in C(waiting); it is
    re-synced once its lease ends. A lease the controller gives between the checks keeps the
    Exporter disabled and marked, and the pool resets it in place once that lease ends. Nothing
    is written without the controller CA
    (I(controller_tls_ca) empty), so a run that could not read it never strips it.
  - Every config Secret written notes a digest of its inputs (the credential Secret's version
    standing for the token; annotation C(virtualtarget.jumpstarter.dev/config-inputs)), which
    the operator compares with its caches to re-sync on the pass that sees an input change. With
    I(state=synced), a config that is still equal but notes an older digest gets the new one
    (C(noted)), without a restart, leased or not.
author:
  - Jumpstarter virtual exporters maintainers (@jumpstarter-dev)
options:
  images:
    description: The class images with the set's per-field overrides.
    type: dict
    default: {}
  default_images:
    description:
      - The install's images (the operator's C(--image-registry) and image options pass them as
        C(exporter_pod_images)); a role left out is the released image of the collection's version.
      - C(exporter) and C(runtime) run where neither the class nor the set names an image;
        C(images) is the image of the C(images) init container, which fetches a class's images
        into the node's image cache, and which no class or set can choose.
    type: dict
    default: {}
    suboptions:
      exporter: &image_spec
        description: The ImageSpec of that role (C(runtime) is QEMU's for C(qemu.jumpstarter.dev)).
        type: dict
        suboptions:
          image:
            description: The image reference.
            type: str
            required: true
          imagePullPolicy:
            description: Its pull policy.
            type: str
            choices: [Always, IfNotPresent, Never]
            default: IfNotPresent
      runtime: *image_spec
      images: *image_spec
  controller_tls_ca:
    description:
      - The Jumpstarter controller's CA bundle, base64-encoded PEM, written as C(tls.ca)
        into every ExporterConfig (the reconcile playbook passes C(controller_tls_ca)).
      - Empty writes no C(tls.ca); the exporter then trusts the system CAs only.
    type: str
    default: ""
  state:
    description:
      - Whether the instances' Pods and config Secrets should exist; C(synced) re-syncs the
        config of running instances; C(reset) resets the instances in place (InPlaceReuse).
      - "With C(reset), each instance whose Pod runs is reset where it runs when its provisioner
        can (C(qemu.jumpstarter.dev) runs its reset command in QEMU's container through the API's
        exec, which asks for C(pods/exec)): a fresh disk and a fresh QEMU, the same Pod, config
        and Exporter, and the exporter serves again once the VM is fresh (returned in C(reset))."
      - "An instance that cannot be reset where it runs (no Pod, a Pod that ended, an exporter
        that still serves, a failed exec) has its Pod and config Secret deleted as with
        C(absent), for a later C(present) to start afresh, with a warning that says why. Lease
        safety is checked on a fresh read just before, as for C(absent)."
    type: str
    choices: [present, absent, synced, reset]
    default: present
extends_documentation_fragment:
  - jumpstarter.virtual_exporters.attributes.diff
  - jumpstarter.virtual_exporters.exporterset.provisioner
  - jumpstarter.virtual_exporters.attributes.idempotent
  - jumpstarter.virtual_exporters.kubernetes
  - jumpstarter.virtual_exporters.exporterset.denied
"""

EXAMPLES = r"""
- name: Make the Pods of the Exporters that have their credential
  jumpstarter.virtual_exporters.exporter_pods:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    virtual_target_class: "{{ virtual_target_class }}"
    owned_exporters: "{{ owned_exporters }}"
    exporters: "{{ unprovisioned_exporters }}"
    parameters: "{{ merged_parameters }}"
    images: "{{ merged_images }}"
    default_images: "{{ exporter_pod_images }}"
    controller_tls_ca: "{{ controller_tls_ca }}"

- name: Remove the Pods of the Exporters the plan deletes
  jumpstarter.virtual_exporters.exporter_pods:
    exporterset: "{{ _virtualtarget_jumpstarter_dev_exporterset }}"
    virtual_target_class: "{{ virtual_target_class }}"
    owned_exporters: "{{ owned_exporters }}"
    exporters: "{{ exporterset_plan.delete | map(attribute='name') | list }}"
    state: absent
"""

RETURN = r"""
created:
  description: Exporters whose Pod was created.
  returned: always
  type: list
  elements: str
deleted:
  description: Exporters whose Pod or config Secret was deleted.
  returned: always
  type: list
  elements: str
waiting:
  description: Exporters whose credential does not exist yet, or was issued to another UID; with
    I(state=absent), those whose instance lease safety keeps; with I(state=synced), those whose
    config differs and that a lease holds.
  returned: always
  type: list
  elements: str
resynced:
  description: With I(state=synced), Exporters whose config Secret was rewritten and whose Pod was
    deleted to start again on it.
  returned: always
  type: list
  elements: str
noted:
  description: With I(state=synced), Exporters whose config was equal and whose config Secret got
    the digest of the current inputs only.
  returned: always
  type: list
  elements: str
reset:
  description: With I(state=reset), Exporters whose instance was reset in its running Pod.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import module_base
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.api.client import AUTH_ARG_SPEC
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.k8s import exporter_pods


def main():
    # The work is in module_utils/k8s/exporter_pods.py; the action plugin of
    # this name does it in process on a local connection.
    module_base.main(
        exporter_pods.run, exporter_pods.ARGUMENT_SPEC, connection=AUTH_ARG_SPEC, errors=exporter_pods.ERRORS
    )


if __name__ == "__main__":
    main()
