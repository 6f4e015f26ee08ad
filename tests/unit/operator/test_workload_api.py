"""Gangs through Kubernetes' Workload API (gang_backends/workload_api.py): the Workload and PodGroup a job gets,
its pods joining the group instead of carrying the operator's gate, what the group's status says, and how the
backend is chosen."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from ringleader_api import Role, TrainingJob
from ringleader_operator import admission
from ringleader_operator.gang_backends import choose, workload_api
from ringleader_operator.gang_backends.workload_api import WORKLOAD_API
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.reconciler import Reconciler

from tests.unit.operator.builders import NOW, TEMPLATE, job, pod, training_job


def under_api(j: TrainingJob, pods: list[dict[str, Any]], verdict: workload_api.Gang) -> Reading:
    """What a round reads of `j` where the operator admits gangs through the Workload API."""
    return Reading(j, pods, True, gang=choose(j, WORKLOAD_API), gang_verdict=verdict)


def test_a_job_gets_a_workload_and_a_gang_of_every_rank() -> None:
    j = training_job(
        workers={"replicas": 3}, strategy="parameter-server", parameterServers={"replicas": 2, "template": TEMPLATE}
    )
    wl, group = workload_api.objects(j)
    assert (wl["apiVersion"], wl["kind"], wl["metadata"]["name"]) == ("scheduling.k8s.io/v1alpha2", "Workload", "j")
    assert wl["spec"]["controllerRef"] == {"apiGroup": "ringleader.dev", "kind": "TrainingJob", "name": "j"}
    (template,) = wl["spec"]["podGroupTemplates"]
    assert template == {"name": "ranks", "schedulingPolicy": {"gang": {"minCount": 5}}}
    assert (group["kind"], group["metadata"]["name"]) == ("PodGroup", "j-5")
    assert group["spec"] == {
        "podGroupTemplateRef": {"workload": {"workloadName": "j", "podGroupTemplateName": "ranks"}},
        "schedulingPolicy": {"gang": {"minCount": 5}},
    }
    for obj in (wl, group):
        assert obj["metadata"]["ownerReferences"][0]["uid"] == "u" and obj["metadata"]["namespace"] == "ns"


def test_a_topology_key_keeps_the_gang_in_one_domain() -> None:
    wl, group = workload_api.objects(training_job(), topology_key="topology.kubernetes.io/rack")
    constraint = {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    assert wl["spec"]["podGroupTemplates"][0]["schedulingConstraints"] == constraint
    assert group["spec"]["schedulingConstraints"] == constraint


def test_with_the_workload_api_the_pods_join_the_group_instead_of_being_gated() -> None:
    p = plan(under_api(job(), [], workload_api.Gang()), NOW)
    assert [o["kind"] for o in p.scheduling_objects] == ["Workload", "PodGroup"]
    assert len(p.create_pods) == 2
    for created in p.create_pods:
        assert not admission.gated(created) and workload_api.member(created)
        assert created["spec"]["schedulingGroup"] == {"podGroupName": "j-2"}
    without = plan(Reading(job(), [], True), NOW)
    assert without.scheduling_objects == [] and all(admission.gated(x) for x in without.create_pods)


def test_a_replaced_rank_joins_the_same_group() -> None:
    status = {"phase": "Running", "startTime": NOW, "ranks": {"worker-0": {"podSeen": True}}}
    p = plan(under_api(job(status=status), [pod(Role.WORKER, 0, "Running")], workload_api.Gang()), NOW)
    (created,) = p.create_pods
    assert created["metadata"]["name"] == "j-worker-1" and created["spec"]["schedulingGroup"]["podGroupName"] == "j-2"


def test_a_job_naming_a_gang_scheduler_keeps_its_own_pod_group() -> None:
    template = {"spec": {**TEMPLATE["spec"], "schedulerName": "volcano"}}
    p = plan(under_api(training_job(template=template), [], workload_api.Gang()), NOW)
    (group,) = p.scheduling_objects
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert not any(workload_api.member(x) for x in p.create_pods)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([{"type": "PodGroupScheduled", "status": "True", "reason": "Scheduled"}], (True, "Scheduled")),
        (
            [{"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "0/2 nodes"}],
            (False, "0/2 nodes"),
        ),
    ],
)
def test_the_groups_status_says_whether_kube_scheduler_placed_it(
    conditions: list[dict[str, Any]], expected: tuple[bool, str] | None
) -> None:
    assert workload_api.reading({"status": {"conditions": conditions}}) == expected


class Discovery:
    def __init__(self, served: bool) -> None:
        self.served = served
        self.asked = 0

    async def serves(self, group: str, version: str, *plurals: str) -> bool:
        self.asked += 1
        assert (group, version, set(plurals)) == ("scheduling.k8s.io", "v1alpha2", {"workloads", "podgroups"})
        return self.served


@pytest.mark.parametrize(
    ("backend", "served", "chosen", "asked"),
    [
        ("auto", True, "workload-api", 1),
        ("auto", False, "gates", 1),
        ("gates", True, "gates", 0),
        ("workload-api", True, "workload-api", 1),
    ],
)
def test_the_backend_is_the_workload_api_where_it_is_served_unless_told_otherwise(
    backend: str, served: bool, chosen: str, asked: int
) -> None:
    kube = Discovery(served)
    r = Reconciler(kube, emit=lambda *_: None)  # type: ignore[arg-type]
    assert asyncio.run(r.reader.use_backend(backend)) == chosen
    assert r.reader.backend.name == chosen and kube.asked == asked


def test_asking_for_the_workload_api_where_it_is_not_served_says_so() -> None:
    r = Reconciler(Discovery(False), emit=lambda *_: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"does not serve scheduling\.k8s\.io/v1alpha2"):
        asyncio.run(r.reader.use_backend("workload-api"))


def member_pod(index: int, node: str = "") -> dict[str, Any]:
    p = pod(Role.WORKER, index, "Running" if node else "Pending")
    p["spec"] = {"schedulingGroup": {"podGroupName": "j-2"}, **({"nodeName": node} if node else {})}
    return p


UNPLACED = workload_api.Gang((False, "0/1 placements are available: pod group is unschedulable"))


def test_the_job_says_what_kube_scheduler_says_of_its_group_and_fails_past_the_scheduling_timeout() -> None:
    status = {"ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}}}
    pods = [member_pod(0), member_pod(1)]
    p = plan(under_api(job(status=status, runPolicy={"schedulingTimeoutSeconds": 60}), pods, UNPLACED), NOW)
    (admitted,) = [c for c in p.status.conditions if c.type.value == "Admitted"]
    assert (admitted.status, admitted.reason) == ("False", "WaitingForCapacity")
    assert admitted.message == "kube-scheduler: 0/1 placements are available: pod group is unschedulable (PodGroup j-2)"
    assert [e.reason for e in p.events if e.type == "Warning"] == ["WaitingForCapacity"]
    later = plan(
        under_api(
            job(status=p.status.model_dump(by_alias=True), runPolicy={"schedulingTimeoutSeconds": 60}), pods, UNPLACED
        ),
        "2026-01-01T00:01:00Z",
    )
    assert later.status.phase == "Failed" and "schedulingTimeoutSeconds (60 s)" in later.status.conditions[-1].message


def test_a_placed_group_admits_the_job() -> None:
    pods = [member_pod(0, "n1"), member_pod(1, "n1")]
    p = plan(under_api(job(), pods, workload_api.Gang((True, "Scheduled"))), NOW)
    (admitted,) = [c for c in p.status.conditions if c.type.value == "Admitted"]
    assert (admitted.status, admitted.reason) == ("True", "GangAdmitted") and "PodGroup j-2" in admitted.message
    unplaced = plan(under_api(job(), pods, UNPLACED), NOW)  # every pod bound: a stale reading says nothing
    assert all(c.type.value != "Admitted" for c in unplaced.status.conditions)


def test_a_round_is_due_only_when_what_kube_scheduler_says_changes() -> None:
    r = Reconciler(Discovery(True), emit=lambda *_: None)  # type: ignore[arg-type]
    group = {"metadata": {"name": "j-2"}, "status": {"conditions": [{"type": "PodGroupScheduled", "status": "False"}]}}
    asyncio.run(r.reader.use_backend("auto"))
    assert r.reader.gang_object_seen("ns", "j", {"metadata": {"name": "j-2"}}) is False  # nothing said yet
    assert r.reader.gang_object_seen("ns", "j", group) is True
    assert r.reader.gang_object_seen("ns", "j", dict(group)) is False
    seen = r.memory(("ns", "j")).gang_seen
    assert WORKLOAD_API.verdict(job(), seen) == workload_api.Gang((False, ""))
    assert WORKLOAD_API.verdict(job(workers={"replicas": 3}), seen) == workload_api.Gang(None)  # another size's


@pytest.mark.parametrize(("mode", "constrained"), [("Required", True), ("Preferred", False)])
def test_a_required_placement_becomes_the_groups_topology_constraint(mode: str, constrained: bool) -> None:
    placement = {"topologyKey": "topology.kubernetes.io/rack", "mode": mode}
    p = plan(under_api(job(placement=placement), [], workload_api.Gang()), NOW)
    wl, group = p.scheduling_objects
    assert ("schedulingConstraints" in group["spec"]) is constrained
    assert ("schedulingConstraints" in wl["spec"]["podGroupTemplates"][0]) is constrained
