"""An instance whose image digest is wrong is a ReplicaFailure at once (a retry
fetches the same wrong image); an unreachable url counts like any failure."""

from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils import constants as c
from ansible_collections.jumpstarter.virtual_exporters.plugins.module_utils.pool.plan import (
    scale_plan,
)
from pool_builders import NOW, exporter, exporter_set, target_class

URL = "http://10.213.0.1:8080/vmlinuz"
MISMATCH = (f"{URL}: digest mismatch: expected sha256:{'0' * 64}, "
            f"got sha256:{'1' * 64}")


def failed(reason, message):
    return scale_plan(exporter_set(min_available=1), target_class(), [exporter("rpi4-0")], [], NOW,
                      instances={"rpi4-0": {"phase": "Failed", "reason": reason, "message": message}})


def degraded(result):
    return next(x for x in result["status"]["conditions"] if x["type"] == c.CONDITION_DEGRADED)


def test_digest_mismatch_degrades_the_set_at_the_first_failure():
    result = failed("ImageDigestMismatch", MISMATCH)
    condition = degraded(result)
    assert (condition["status"], condition["reason"]) == ("True", c.REASON_REPLICA_FAILURE)
    assert condition["message"] == f"1 consecutive instance failure(s); last: rpi4-0: {MISMATCH}"
    warnings = [e for e in result["events"] if e["type"] == "Warning"]
    assert any(MISMATCH in e["message"] for e in warnings), warnings
    # No second instance to fetch the same image until the longest backoff has passed.
    assert result["create"] == []


def test_unreachable_url_is_retried_before_it_degrades_the_set():
    result = failed("ImageUnavailable", f"{URL}: cannot be fetched: connection refused")
    assert degraded(result)["status"] == "False"
