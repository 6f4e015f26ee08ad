"""Failure rules on the dev cluster (spec.<role>.failureRules): under restartPolicy Never, which fails the job on
any exit of the program, a rule `exit 201 -> RestartRank` restarts the rank that exits 201 and the job
succeeds; without the rule the same job fails at once. (`OOMKilled -> FailJob` needs the kernel's OOM killer:
the real node's test, tests/e2e/test_rank_lifecycle.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.support.cluster import wait_for
from tests.support.jobs import condition, create, get, rank_status, training_job

pytestmark = pytest.mark.usefixtures("operator")

# Worker 1's first pod exits 201 (the trainer's "lost a peer"); every other pod, and its replacement, exits 0.
SCRIPT = (
    "import os, sys; "
    "sys.exit(201 if os.environ['RINGLEADER_INDEX'] == '1' and os.environ['RINGLEADER_ATTEMPT'] == '0' else 0)"
)
RESTART_201 = {"action": "RestartRank", "onExitCodes": {"operator": "In", "values": [201]}}


@pytest.mark.parametrize(("rules", "ends"), [([RESTART_201], "Succeeded"), ([], "Failed")], ids=["rule", "no-rule"])
def test_a_rule_restarts_exit_201_under_never(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, rules: list[dict[str, object]], ends: str
) -> None:
    name = f"rules-{len(rules)}"
    body = training_job(name, SCRIPT, workers=2)
    body["spec"]["workers"] |= {"restartPolicy": "Never", "failureRules": rules}
    create(custom, namespace, body)

    def ended() -> dict[str, Any] | None:
        job = get(custom, namespace, name)
        return job if any((condition(job, k) or {}).get("status") == "True" for k in ("Succeeded", "Failed")) else None

    job = wait_for(f"{name} to end", ended, timeout=120)
    assert (condition(job, ends) or {}).get("status") == "True", job["status"]
    rank = rank_status(job)["worker-1"]
    if rules:
        assert (rank["restarts"], rank["lastExitCode"]) == (1, 201)
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        assert any("spec.workers.failureRules[0] (RestartRank) matched" in (e.message or "") for e in events)
    else:
        failed = condition(job, "Failed") or {}
        assert failed["reason"] == "RankFailed" and "exit code 201" in failed["message"], failed
