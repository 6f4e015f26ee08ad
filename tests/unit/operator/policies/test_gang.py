"""Gang admission by the operator, table-style: release together, wait saying why, fail past the timeout."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.admission import Cluster
from ringleader_operator.api import Role
from ringleader_operator.policies.gang import admit_gang

from ..builders import NOW, after, gated, gpu_node, job, pod, round_of

PAIR = [gated(pod(Role.WORKER, 0, "Pending")), gated(pod(Role.WORKER, 1, "Pending"))]
WAITING_SINCE_NOW = {"conditions": [{"type": "Admitted", "status": "False", "reason": "Unschedulable",
                                     "message": "needs 6 nvidia.com/gpu, 4 allocatable",
                                     "lastTransitionTime": NOW}]}  # fmt: skip


@pytest.mark.parametrize(
    ("pods", "gpus", "status", "timeout", "now", "want"),
    [
        # -> (released, waiting for room, requeue after, failed, events)
        (PAIR[:1], 8, {}, None, NOW, ([], False, None, False, [])),  # worker 1 has no pod yet
        (PAIR, None, {}, None, NOW, ([], False, None, False, [])),  # no look at the cluster: nothing released
        (PAIR, 8, {}, None, NOW, (["j-worker-0", "j-worker-1"], False, None, False, ["GangAdmitted"])),
        (PAIR, 4, {}, None, NOW, ([], True, 5, False, ["Unschedulable"])),
        (PAIR, 4, WAITING_SINCE_NOW, None, after(5), ([], True, 5, False, [])),  # the same verdict: no new event
        (PAIR, 4, WAITING_SINCE_NOW, 30, after(28), ([], True, 2, False, [])),  # the timeout comes first
        (PAIR, 4, WAITING_SINCE_NOW, 30, after(30), ([], True, None, True, ["Unschedulable"])),
    ],
    ids=["a-rank-missing", "no-cluster", "fits", "never-fits", "still-waiting", "nearly-timed-out", "timed-out"],
)
def test_admit_gang(
    pods: list[dict[str, Any]], gpus: int | None, status: dict[str, Any], timeout: int | None, now: str,
    want: tuple[Any, ...],
) -> None:  # fmt: skip
    r = round_of(job(status=status, runPolicy={"schedulingTimeoutSeconds": timeout}), pods, now=now)
    if len(pods) < 2:
        r.plan.create_pods.append({"metadata": {"name": "j-worker-1"}})  # what the restarts policy planned
    admit_gang(r, None if gpus is None else Cluster([gpu_node(gpus)], []))
    got = (r.plan.ungate_pods, r.plan.waiting_for_room, r.plan.requeue_after, r.failed,
           [e.reason for e in r.plan.events])  # fmt: skip
    assert got == want


def test_a_pod_planned_for_deletion_is_neither_weighed_nor_released() -> None:
    extra = gated(pod(Role.WORKER, 2, "Pending"), gpus=8)
    r = round_of(job(), [*PAIR, extra])
    r.plan.delete_pods.append("j-worker-2")  # left from before a scale-down
    admit_gang(r, Cluster([gpu_node(8)], []))
    assert r.plan.ungate_pods == ["j-worker-0", "j-worker-1"]


def test_a_gang_scheduler_gets_a_pod_group_with_the_pods_it_creates() -> None:
    volcano = {"spec": {"containers": [{"name": "t", "image": "t"}], "schedulerName": "volcano"}}
    r = round_of(job(workers={"replicas": 2, "template": volcano}))
    admit_gang(r, None)
    assert r.plan.pod_group is None  # nothing is being created
    r.plan.create_pods.append({"metadata": {"name": "j-worker-0"}})
    admit_gang(r, None)
    assert r.plan.pod_group is not None and r.plan.pod_group["spec"]["minMember"] == 2
