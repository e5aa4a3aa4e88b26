"""The test bed API server's audit log (``Bed.audit_log``, of a bed made
with ``audit=True`` or ``audit_users``): what a user sent and whether it was refused."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

# What the operator asks at start-up of its own account
# (exporterset_operator/permissions.py): every authenticated user may
# (Kubernetes' system:basic-user), no Role of ours grants it.
SELF_REVIEWS = {("authorization.k8s.io", "selfsubjectrulesreviews", "create"),
                ("authorization.k8s.io", "selfsubjectaccessreviews", "create")}


def audited(log: Path, username: str) -> tuple[set[tuple[str, str, str]], list[str]]:
    """(group, resource[/subresource], verb) of every request ``username``
    made, and a line for each one the API server refused."""
    used, refused = set(), []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("user", {}).get("username") != username or entry.get("stage") != "ResponseComplete":
            continue
        ref = entry.get("objectRef")
        if not ref:
            continue  # discovery (/api, /apis): every authenticated user may
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (ref.get("apiGroup", ""), resource, entry["verb"])
        if entry.get("responseStatus", {}).get("code") == 403:
            refused.append(f"{key} in {ref.get('namespace')}: {entry['requestURI']}")
        else:
            used.add(key)
    return used, refused


def written_after(log: Path, moment: datetime) -> bool:
    lines = log.read_text().splitlines()
    return bool(lines) and datetime.fromisoformat(json.loads(lines[-1])["stageTimestamp"]) > moment
