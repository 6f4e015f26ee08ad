"""Whole rounds of gang admission and elastic resizing: gated pods released together once they fit, what a job
that does not fit says and when it times out, a gang scheduler's PodGroup, a resize restarting every worker."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator import admission
from ringleader_operator.admission import Cluster
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from .builders import NOW, TEMPLATE, after, again, gated, gpu_node, job, pod

PENDING_PAIR = [gated(pod(Role.WORKER, 0, "Pending")), gated(pod(Role.WORKER, 1, "Pending"))]


def test_gated_pods_are_released_together_once_every_rank_has_one_and_they_fit() -> None:
    one = plan(Reading(job(), PENDING_PAIR[:1], True), NOW, Cluster([gpu_node(8)], []))
    # The missing rank is created with the gang: it goes out released, the gated one is released with it.
    assert one.ungate_pods == ["j-worker-0"] and [x["metadata"]["name"] for x in one.create_pods] == ["j-worker-1"]
    assert not any(admission.gated(x) for x in one.create_pods)
    fresh = plan(Reading(job(), [], True), NOW, Cluster([gpu_node(8)], []))
    assert len(fresh.create_pods) == 2 and not any(admission.gated(x) for x in fresh.create_pods)
    assert plan(Reading(job(), [], True), NOW).create_pods[0]["spec"]["schedulingGates"] == [{"name": admission.GATE}]
    both = plan(Reading(job(), PENDING_PAIR, True), NOW, Cluster([gpu_node(8)], PENDING_PAIR))
    assert both.ungate_pods == ["j-worker-0", "j-worker-1"] and not both.waiting_for_room
    admitted = next(c for c in both.status.conditions if c.type.value == "Admitted")
    assert (admitted.status, admitted.reason) == ("True", "GangAdmitted")
    assert ("Normal", "GangAdmitted", "2 pods fit the cluster's free room together: released to the scheduler") in (
        both.events
    )
    # Without a look at the cluster nothing is released.
    assert plan(Reading(job(), PENDING_PAIR, True), NOW).ungate_pods == []


@pytest.mark.parametrize(
    ("gpus", "others", "reason", "message"),
    [
        (4, [], "Unschedulable", "needs 6 nvidia.com/gpu, 4 allocatable"),
        (8, [{"metadata": {}, "spec": {"nodeName": "n1", "containers": [{"name": "x", "resources": {
            "limits": {"nvidia.com/gpu": "6"}}}]}, "status": {"phase": "Running"}}], "WaitingForCapacity",
         "needs 6 nvidia.com/gpu, 2 free"),
    ],
    ids=["never-fits", "others-hold-the-room"],
)  # fmt: skip
def test_gated_pods_that_do_not_fit_wait_and_say_why(
    gpus: int, others: list[dict[str, Any]], reason: str, message: str
) -> None:
    p = plan(Reading(job(), PENDING_PAIR, True), NOW, Cluster([gpu_node(gpus)], others))
    assert p.ungate_pods == [] and p.waiting_for_room and p.requeue_after == 5
    admitted = next(c for c in p.status.conditions if c.type.value == "Admitted")
    assert (admitted.status, admitted.reason, admitted.message) == ("False", reason, message)
    assert p.events[-1] == ("Warning", reason, message) and p.status.phase == "Pending"
    # The same verdict again says nothing new.
    later = plan(
        Reading(job(status=p.status.model_dump(by_alias=True)), PENDING_PAIR, True),
        after(5),
        Cluster([gpu_node(gpus)], others),
    )
    assert later.events == [] and later.status.phase == "Pending"


def test_scheduling_timeout_fails_a_job_that_keeps_waiting() -> None:
    policy = {"schedulingTimeoutSeconds": 30}
    small = Cluster([gpu_node(4)], [])
    first = plan(Reading(job(runPolicy=policy), PENDING_PAIR, True), NOW, small)
    assert first.requeue_after == 5 and first.status.phase == "Pending"
    nearly = plan(
        Reading(job(status=first.status.model_dump(by_alias=True), runPolicy=policy), PENDING_PAIR, True),
        after(28),
        small,
    )
    assert nearly.requeue_after == 2 and nearly.status.phase == "Pending"
    late = plan(
        Reading(job(status=nearly.status.model_dump(by_alias=True), runPolicy=policy), PENDING_PAIR, True),
        after(30),
        small,
    )
    failed = next(c for c in late.status.conditions if c.type.value == "Failed")
    assert late.status.phase == "Failed" and failed.reason == "Unschedulable"
    assert failed.message == (
        "the pods found no room to run together within runPolicy.schedulingTimeoutSeconds (30 s): "
        "needs 6 nvidia.com/gpu, 4 allocatable"
    )
    assert sorted(late.delete_pods) == ["j-worker-0", "j-worker-1"] and late.ungate_pods == []


def test_a_gang_scheduler_gets_its_pod_group_and_ungated_pods() -> None:
    volcano = {"spec": {**TEMPLATE["spec"], "schedulerName": "volcano"}}
    p = plan(Reading(job(workers={"replicas": 2, "template": volcano}), [], True), NOW)
    (group,) = p.scheduling_objects
    assert group["spec"]["minMember"] == 2
    assert all("schedulingGates" not in x["spec"] for x in p.create_pods)
    assert all(x["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "j" for x in p.create_pods)


def world_pod(index: int, workers: int, phase: str = "Running") -> dict[str, Any]:
    p = pod(Role.WORKER, index, phase)
    p["metadata"]["annotations"]["ringleader.dev/workers"] = str(workers)
    return p


ELASTIC = {"replicas": 2, "minReplicas": 1, "maxReplicas": 4, "template": TEMPLATE}


@pytest.mark.parametrize(("old", "new"), [(4, 2), (2, 3)], ids=["down", "up"])
def test_a_resized_job_restarts_every_worker_at_the_new_size_without_counting_failures(old: int, new: int) -> None:
    running = plan(
        Reading(job(workers={**ELASTIC, "replicas": old}), [world_pod(i, old) for i in range(old)], True), NOW
    )
    assert running.status.phase == "Running" and running.status.replicas == old
    pods = [world_pod(i, old) for i in range(old)]
    # Growing is weighed against the cluster (auto-elastic admission: policies/elastic.py); there is room.
    scaled = job(status=running.status.model_dump(by_alias=True), workers={**ELASTIC, "replicas": new})
    p = plan(Reading(scaled, pods, True), NOW, Cluster([gpu_node(8)], []))
    assert sorted(p.delete_pods) == [f"j-worker-{i}" for i in range(old)]
    # Ranks the old world did not have are made at once (gated: they run only with the whole new world).
    assert [x["metadata"]["name"] for x in p.create_pods] == [f"j-worker-{i}" for i in range(old, new)]
    assert p.status.phase == "Restarting" and p.status.replicas == 0
    message = (
        f"workers {old} -> {new}: every worker restarts at the new world size and resumes from the latest checkpoint"
    )
    assert p.events == [("Normal", "Resized", message)]
    assert set(p.status.ranks) <= {f"worker-{i}" for i in range(new)}  # a rank the job lost is forgotten
    assert all(r.restarts == 0 for r in p.status.ranks.values())
    # While the old pods go, nothing is counted and nothing created in their names; then the new world comes.
    going = [{**x, "metadata": {**x["metadata"], "deletionTimestamp": NOW}} for x in pods]
    waiting = again(p, going, workers={**ELASTIC, "replicas": new})
    assert [x["metadata"]["name"] for x in waiting.create_pods] == [f"j-worker-{i}" for i in range(old, new)]
    assert waiting.events == [] and sum(r.restarts for r in waiting.status.ranks.values()) == 0
    fresh = again(waiting, [], workers={**ELASTIC, "replicas": new})
    made = fresh.create_pods
    assert [x["metadata"]["name"] for x in made] == [f"j-worker-{i}" for i in range(new)]
    assert all(x["metadata"]["annotations"]["ringleader.dev/workers"] == str(new) for x in made)
    assert fresh.status.replica_statuses["worker"].restarts == 0
    back = again(fresh, [world_pod(i, new) for i in range(new)], workers={**ELASTIC, "replicas": new})
    assert back.status.phase == "Running" and back.status.replicas == new
    assert back.status.selector == "ringleader.dev/job-name=j,ringleader.dev/replica-type=worker"


def test_a_gated_pod_being_deleted_is_neither_weighed_nor_released() -> None:
    # worker-2 is left from before a scale-down: it goes, and the two that stay are admitted on their own.
    extra = gated(pod(Role.WORKER, 2, "Pending"), gpus=8)
    p = plan(Reading(job(), [*PENDING_PAIR, extra], True), NOW, Cluster([gpu_node(8)], []))
    assert p.delete_pods == ["j-worker-2"] and p.ungate_pods == ["j-worker-0", "j-worker-1"]
