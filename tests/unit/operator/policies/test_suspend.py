"""runPolicy.suspend, table-style."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.policies.suspend import resume, suspend

from ..builders import NOW, job, pod, round_of

SUSPENDED = {"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]}
RESUMED = {"conditions": [{"type": "Suspended", "status": "False", "reason": "JobResumed"}]}
RUNNING = {"startTime": NOW, "ranks": {"worker-0": {"podSeen": True}}, "phase": "Running"}


@pytest.mark.parametrize(
    ("flag", "status", "pods", "suspended", "deleted"),
    [
        (False, RUNNING, [pod(Role.WORKER, 0, "Running")], False, []),
        (True, RUNNING, [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Pending", deleting=True)], True,
         ["j-worker-0"]),
        (True, SUSPENDED, [], True, []),
    ],
    ids=["not-suspended", "suspends", "stays-suspended"],
)  # fmt: skip
def test_suspend(
    flag: bool, status: dict[str, Any], pods: list[dict[str, Any]], suspended: bool, deleted: list[str]
) -> None:
    r = round_of(job(status=status, runPolicy={"suspend": flag}), pods)
    assert suspend(r) is suspended
    assert r.plan.delete_pods == deleted
    if suspended:
        assert r.status.phase == "Suspended" and r.status.start_time is None
        assert all(not rank.pod_seen for rank in r.status.ranks.values())  # their going is no failure
    else:
        assert r.status.phase == "Running" and r.status.start_time == NOW


@pytest.mark.parametrize(("status", "events"), [(SUSPENDED, 1), (RESUMED, 0), ({}, 0)])
def test_resume_says_so_once(status: dict[str, Any], events: int) -> None:
    r = round_of(job(status=status))
    resume(r)
    assert [e.reason for e in r.plan.events] == ["JobResumed"] * events
    assert all(c.status == "False" for c in r.status.conditions if c.type.value == "Suspended")
