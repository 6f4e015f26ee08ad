"""Kueue's answer in a round (policies/queue.py, through `plan`): a job Kueue has not admitted, or has evicted, has
no pods and says why; admitted, its pods are made on the flavors' nodes."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.kueue import QueueState
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from ..builders import NOW, job, names, pod

WAITING = QueueState(False, "waiting in Kueue's queue team-a (Workload w): insufficient quota for cpu")
EVICTED = QueueState(False, "evicted by Kueue (Preempted): to make room", ("Preempted", "to make room"))
ADMITTED = QueueState(
    True,
    "admitted by Kueue's ClusterQueue cq (Workload w)",
    placement={"worker": ({"pool": "spot"}, [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}])},
)
RUNNING = {
    "startTime": NOW,
    "phase": "Running",
    "ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}},
    "conditions": [{"type": "Running", "status": "True", "reason": "JobRunning"}],
}
QUEUED = {"phase": "Queued", "conditions": [{"type": "Suspended", "status": "True", "reason": "Queued"}]}
PREEMPTED = {"phase": "Queued", "conditions": [{"type": "Suspended", "status": "True", "reason": "QueueEvicted",
                                                "message": EVICTED.message}]}  # fmt: skip
BOTH = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")]


@pytest.mark.parametrize(
    ("status", "pods", "state", "reason", "deleted", "events"),
    [
        ({}, [], WAITING, "Queued", [], ["Queued"]),
        (RUNNING, BOTH, EVICTED, "QueueEvicted", ["j-worker-0", "j-worker-1"], ["QueueEvicted"]),
        (PREEMPTED, [pod(Role.WORKER, 0, "Running", deleting=True)], EVICTED, "QueueEvicted", [], []),
    ],
    ids=["new-job-waits", "evicted-stops-its-pods", "evicted-pods-going"],  # an event for each change
)  # fmt: skip
def test_a_job_kueue_has_not_admitted_has_no_pods_and_says_why(
    status: dict[str, Any], pods: list[dict[str, Any]], state: QueueState, reason: str, deleted: list[str],
    events: list[str],
) -> None:  # fmt: skip
    p = plan(Reading(job(status=status), pods, True, queued=state), NOW)
    assert p.create_pods == [] and p.delete_pods == deleted
    assert p.status.phase == "Queued" and p.status.start_time is None
    (suspended,) = [c for c in p.status.conditions if c.type.value == "Suspended"]
    assert (suspended.status, suspended.reason, suspended.message) == ("True", reason, state.message)
    assert [e.reason for e in p.events if e.reason.startswith("Queue")] == events
    assert all(not rank.pod_seen for rank in p.status.ranks.values())  # their going is no failure
    assert all(c.status == "False" for c in p.status.conditions if c.type.value == "Running")
    assert p.status.replica_statuses["worker"].restarts == 0


@pytest.mark.parametrize(("status", "events"), [(QUEUED, ["QueueAdmitted"]), (PREEMPTED, ["QueueAdmitted"]),
                                                ({}, [])])  # fmt: skip
def test_an_admitted_job_makes_its_pods_on_the_flavors_nodes(status: dict[str, Any], events: list[str]) -> None:
    p = plan(Reading(job(status=status), [], True, queued=ADMITTED), NOW)
    assert names(p.create_pods) == ["j-worker-0", "j-worker-1"]
    for created in p.create_pods:
        assert created["spec"]["nodeSelector"] == {"pool": "spot"}
        assert {"key": "spot", "operator": "Exists", "effect": "NoSchedule"} in created["spec"]["tolerations"]
    assert [e.reason for e in p.events if e.reason.startswith("Queue")] == events
    suspended = [c for c in p.status.conditions if c.type.value == "Suspended"]
    assert all(c.status == "False" for c in suspended) and p.status.phase == "Pending"


def test_a_job_kueue_does_not_queue_is_unaffected() -> None:
    assert names(plan(Reading(job(), [], True, queued=None), NOW).create_pods) == ["j-worker-0", "j-worker-1"]


def test_a_suspended_queued_job_is_suspended_not_queued() -> None:
    p = plan(Reading(job(status=RUNNING, runPolicy={"suspend": True}), BOTH, True, queued=EVICTED), NOW)
    assert p.status.phase == "Suspended" and p.delete_pods == ["j-worker-0", "j-worker-1"]
