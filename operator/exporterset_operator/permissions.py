"""What the operator's account may do, asked once at start-up.

A SelfSubjectRulesReview in the watched namespace (one request, which every
authenticated user may make); when its answer is incomplete (an authorizer
that cannot list rules), a SelfSubjectAccessReview for each grant a feature
needs and the rules left out. The pool logic decides from the answer (pool/permissions.py). When the
API server cannot say, every feature stays on: a refused call then fails
where it is made, as it would without this check.
"""

from __future__ import annotations

import json
import logging

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import provisioners as registry
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool import permissions
from kubernetes import client
from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)


def _post(api_client, kind: str, spec: dict) -> dict:
    api = client.AuthorizationV1Api(api_client)
    create = {"SelfSubjectRulesReview": api.create_self_subject_rules_review,
              "SelfSubjectAccessReview": api.create_self_subject_access_review}[kind]
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec}
    return json.loads(create(body, _preload_content=False).data)


def _access_rule(api_client, namespace: str | None, group: str, resource: str, verb: str) -> list[dict]:
    """A rule granting just ``verb`` on ``resource`` when the API server says it may be done."""
    base, _, sub = resource.partition("/")
    attributes = {"group": group, "resource": base, "verb": verb, "namespace": namespace or ""}
    if sub:
        attributes["subresource"] = sub
    answer = _post(api_client, "SelfSubjectAccessReview", {"resourceAttributes": attributes})
    if (answer.get("status") or {}).get("allowed"):
        return [{"apiGroups": [group], "resources": [resource], "verbs": [verb]}]
    return []


def features_for(provisioners) -> tuple[permissions.Feature, ...]:
    """The features the operator of ``provisioners`` may use: the reset in
    a running Pod only where one of them resets there."""
    in_pod = any(registry.get(name).reset_in_pod for name in provisioners)
    return tuple(f for f in permissions.FEATURES if f.name != "exec-reset" or in_pod)


def probe(api_client, namespace: str | None, provisioners=()) -> permissions.Permissions:
    """What the account lacks in ``namespace`` for the features of
    ``provisioners``. Watching every namespace, the grants are the pool
    namespaces' own (config/rbac/pool): nothing is asked, every feature
    stays on."""
    if not namespace:
        return permissions.ALL_GRANTED
    features = features_for(provisioners)
    try:
        review = _post(api_client, "SelfSubjectRulesReview", {"namespace": namespace})
        status = review.get("status") or {}
        rules = status.get("resourceRules") or []
        if status.get("incomplete"):
            for needs in permissions.missing(rules, features).values():
                for need in needs:
                    rules += _access_rule(api_client, namespace, *need)
        found = permissions.Permissions(permissions.missing(rules, features))
    except (ApiException, HTTPError, OSError, ValueError) as exc:
        log.warning("cannot ask the API server what this account may do; every feature stays on",
                    extra={"error": str(exc)[:300]})
        return permissions.ALL_GRANTED
    if found.lacking:
        log.warning("permissions missing: features off", extra={
            "namespace": namespace or "*", "missing": found.as_denied(),
            "condition": permissions.condition(found)["message"]})
    return found
