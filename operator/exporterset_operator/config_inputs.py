"""Caches of what a Pod-backed instance's config is made from, in the
namespaces that hold such pools: the Secrets (their metadata only: the
credential Secret's version stands for its token, and the config Secret
notes the digest it was written from) and the ConfigMaps (the controller CA).

A cache is started for a namespace the first time a set of a Pod
provisioner this operator serves is reconciled there: these are the
namespaces where the pool role (config/rbac/pool_role_qemu.yaml) is bound, and
where it grants list and watch on Secrets and ConfigMaps. Until both caches
of a namespace are synced (or while that grant is missing) the sets there
are re-synced on the fallback period instead (k8s/observe.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants

from .informer import Handler, Informer, Resource

SECRETS = Resource(constants.SECRET.kind, *constants.SECRET[:3], metadata_only=True)
CONFIGMAPS = Resource("ConfigMap", "", "v1", "configmaps")
KINDS = (SECRETS, CONFIGMAPS)


class ConfigInputs:
    def __init__(self, api_client, handler_for: Callable[[str], Handler], clock=time.monotonic):
        self.api_client = api_client
        self.handler_for = handler_for
        self.clock = clock
        self._lock = threading.Lock()
        self._caches: dict[str, dict[str, Informer]] = {}
        self._stopped = False

    def watch(self, namespace: str) -> None:
        """Start the namespace's caches, once."""
        with self._lock:
            if self._stopped or namespace in self._caches:
                return
            caches = {}
            for resource in KINDS:
                informer = Informer(resource, self.api_client, namespace=namespace, clock=self.clock)
                informer.handlers.append(self.handler_for(resource.kind))
                caches[resource.kind] = informer
            self._caches[namespace] = caches
        for informer in caches.values():
            informer.start()

    def objects(self, namespace: str) -> dict[str, list[dict]]:
        """``{"Secret": [...], "ConfigMap": [...]}`` of the namespace once both
        caches are synced; empty before (the caller plans without them)."""
        with self._lock:
            caches = self._caches.get(namespace)
        if not caches or not all(informer.synced.is_set() for informer in caches.values()):
            return {}
        return {kind: informer.list(namespace) for kind, informer in caches.items()}

    def namespaces(self) -> list[str]:
        with self._lock:
            return sorted(self._caches)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            caches = [informer for by_kind in self._caches.values() for informer in by_kind.values()]
        for informer in caches:
            informer.stop()
