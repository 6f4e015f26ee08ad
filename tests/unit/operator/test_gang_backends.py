"""Gang backends (gang_backends/): the operator's own gate table-style (release together, wait saying why, fail
past the timeout), the PodGroup schedulers' objects and marks, and which backend a job gets."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator import admission
from ringleader_operator.admission import Cluster
from ringleader_operator.gang_backends import CLUSTER_BACKENDS, OWN_GATE, SCHEDULERS, choose
from ringleader_operator.gang_backends.kai import KAI
from ringleader_operator.gang_backends.workload_api import WORKLOAD_API
from ringleader_operator.round_state import Round

from .builders import NOW, TEMPLATE, after, gated, gpu_node, job, pod, round_of

PAIR = [gated(pod(Role.WORKER, 0, "Pending")), gated(pod(Role.WORKER, 1, "Pending"))]
WAITING_SINCE_NOW = {"conditions": [{"type": "Admitted", "status": "False", "reason": "Unschedulable",
                                     "message": "needs 6 nvidia.com/gpu, 4 allocatable",
                                     "lastTransitionTime": NOW}]}  # fmt: skip


def admit_gang(r: Round, cluster: Cluster | None) -> None:
    """The round's admission step as `reconcile.plan` takes it, the pods it creates marked already."""
    choose(r.job).admit(r, cluster, None)


def planned(index: int) -> dict[str, Any]:
    """Worker `index`'s pod as the restarts policy plans to create it: gated, 3 GPUs."""
    return gated(pod(Role.WORKER, index, "Pending"))


@pytest.mark.parametrize(
    ("pods", "creating", "gpus", "status", "timeout", "now", "want"),
    [
        # -> (released, created without the gate, waiting for room, requeue after, failed, events)
        (PAIR[:1], [], 8, {}, None, NOW, ([], [], False, None, False, [])),  # worker 1 waits out a back-off
        (PAIR[:1], [1], 8, {}, None, NOW, (["j-worker-0"], [1], False, None, False, ["GangAdmitted"])),
        ([], [0, 1], 8, {}, None, NOW, ([], [0, 1], False, None, False, ["GangAdmitted"])),  # created released
        ([], [0, 1], 4, {}, None, NOW, ([], [], True, 5, False, ["Unschedulable"])),  # created gated, waiting
        ([], [0, 1], None, {}, None, NOW, ([], [], False, None, False, [])),  # no look at the cluster: gated
        (PAIR, [], None, {}, None, NOW, ([], [], False, None, False, [])),  # no look at the cluster: nothing released
        (PAIR, [], 8, {}, None, NOW, (["j-worker-0", "j-worker-1"], [], False, None, False, ["GangAdmitted"])),
        (PAIR, [], 4, {}, None, NOW, ([], [], True, 5, False, ["Unschedulable"])),
        (PAIR, [], 4, WAITING_SINCE_NOW, None, after(5), ([], [], True, 5, False, [])),  # same verdict: no new event
        (PAIR, [], 4, WAITING_SINCE_NOW, 30, after(28), ([], [], True, 2, False, [])),  # the timeout comes first
        (PAIR, [], 4, WAITING_SINCE_NOW, 30, after(30), ([], [], True, None, True, ["Unschedulable"])),
    ],
    ids=["a-rank-in-back-off", "created-with-the-rest", "all-created-now", "created-does-not-fit",
         "created-unweighed", "no-cluster", "fits", "never-fits", "still-waiting", "nearly-timed-out", "timed-out"],
)  # fmt: skip
def test_admit_gang(
    pods: list[dict[str, Any]], creating: list[int], gpus: int | None, status: dict[str, Any], timeout: int | None,
    now: str, want: tuple[Any, ...],
) -> None:  # fmt: skip
    r = round_of(job(status=status, runPolicy={"schedulingTimeoutSeconds": timeout}), pods, now=now)
    r.plan.create_pods = [planned(i) for i in creating]  # what the restarts policy planned
    admit_gang(r, None if gpus is None else Cluster([gpu_node(gpus)], []))
    ungated = [i for i, x in zip(creating, r.plan.create_pods, strict=True) if not admission.gated(x)]
    got = (r.plan.ungate_pods, ungated, r.plan.waiting_for_room, r.plan.requeue_after, r.failed,
           [e.reason for e in r.plan.events])  # fmt: skip
    assert got == want


def test_lifting_the_gate_keeps_other_gates() -> None:
    x = planned(0)
    x["spec"]["schedulingGates"].insert(0, {"name": "example.com/quota"})
    admission.lift_gate(x)
    assert x["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    y = planned(1)
    admission.lift_gate(y)
    assert "schedulingGates" not in y["spec"]


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
    assert r.plan.scheduling_objects == []  # nothing is being created
    r.plan.create_pods.append({"metadata": {"name": "j-worker-0"}})
    admit_gang(r, None)
    (group,) = r.plan.scheduling_objects
    assert group["spec"]["minMember"] == 2


def rack_node(name: str, rack: str, gpus: int) -> dict[str, Any]:
    n = gpu_node(gpus)
    n["metadata"] = {"name": name, "labels": {"topology.kubernetes.io/rack": rack}}
    return n


RACKS = Cluster([rack_node("a1", "a", 3), rack_node("b1", "b", 4), rack_node("b2", "b", 4)], [])


@pytest.mark.parametrize(
    ("mode", "pins", "where"),
    [
        ("Required", {"j-worker-0": "b", "j-worker-1": "b"}, "in 1 topology.kubernetes.io/rack domain (b)"),
        ("Preferred", {"j-worker-0": "b", "j-worker-1": "b"}, "in 1 topology.kubernetes.io/rack domain (b)"),
    ],
)
def test_a_placed_gang_is_pinned_to_its_domains(mode: str, pins: dict[str, str], where: str) -> None:
    placement = {"topologyKey": "topology.kubernetes.io/rack", "mode": mode}
    r = round_of(job(placement=placement), PAIR[:1])  # worker 0 gated already, worker 1 created now
    r.plan.create_pods = [planned(1)]
    admit_gang(r, RACKS)
    assert r.plan.ungate_pods == ["j-worker-0"]
    assert r.plan.pin_pods == {"j-worker-0": {"topology.kubernetes.io/rack": pins["j-worker-0"]}}
    (created,) = r.plan.create_pods
    assert created["spec"]["nodeSelector"]["topology.kubernetes.io/rack"] == pins["j-worker-1"]
    assert not admission.gated(created)
    assert where in next(c.message for c in r.status.conditions if c.type.value == "Admitted")


def test_a_gang_too_big_for_any_one_domain_waits_under_required_and_spreads_under_preferred() -> None:
    four = [gated(pod(Role.WORKER, i, "Pending")) for i in range(3)]
    spec = {"workers": {"replicas": 3, "template": TEMPLATE}}
    required = round_of(job(placement={"topologyKey": "topology.kubernetes.io/rack"}, **spec), four)
    admit_gang(required, RACKS)
    assert required.plan.ungate_pods == [] and required.plan.waiting_for_room
    assert "does not fit in any one domain" in next(c.message for c in required.status.conditions)
    preferred = round_of(job(placement={"topologyKey": "topology.kubernetes.io/rack", "mode": "Preferred"}, **spec),
                         four)  # fmt: skip
    admit_gang(preferred, RACKS)
    assert len(preferred.plan.ungate_pods) == 3
    assert {v["topology.kubernetes.io/rack"] for v in preferred.plan.pin_pods.values()} == {"a", "b"}


def template(scheduler: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "t", "image": "t"}], "schedulerName": scheduler}}


@pytest.mark.parametrize(
    ("scheduler", "default", "want"),
    [
        ("", OWN_GATE, "gates"),
        ("", WORKLOAD_API, "workload-api"),  # the operator's choice where the pods name no gang scheduler
        ("volcano", WORKLOAD_API, "volcano"),  # the pods' own scheduler wins
        ("scheduler-plugins-scheduler", OWN_GATE, "scheduler-plugins-scheduler"),
        ("kai-scheduler", OWN_GATE, "kai-scheduler"),
        ("my-scheduler", OWN_GATE, "gates"),  # a scheduler that places pods one by one: the gate still admits
    ],
)
def test_a_job_gets_the_scheduler_its_pods_name_else_the_operators_backend(
    scheduler: str, default: Any, want: str
) -> None:
    assert choose(job(workers={"replicas": 2, "template": template(scheduler)}), default).name == want


def test_every_backend_has_its_own_name_and_only_the_own_gate_sizes_jobs() -> None:
    backends = [*CLUSTER_BACKENDS.values(), *SCHEDULERS.values()]
    assert len({b.name for b in backends}) == len(backends)
    assert [b.name for b in backends if b.sizes_jobs] == ["gates"]


def test_kai_gets_its_pod_group_with_the_queue_and_pods_that_the_pod_grouper_leaves_alone() -> None:
    j = job(workers={"replicas": 2, "template": template("kai-scheduler")}, runPolicy={"priorityClassName": "train"})
    j.metadata["labels"] = {"kai.scheduler/queue": "team-a"}
    r = round_of(j)
    pod0: dict[str, Any] = {"metadata": {"name": "j-worker-0"}, "spec": {}}
    KAI.mark(pod0, j)
    assert pod0["metadata"]["annotations"] == {"pod-group-name": "j", "kai.scheduler/skip-podgrouper": "true"}
    assert "schedulingGates" not in pod0["spec"]
    r.plan.create_pods.append(pod0)
    admit_gang(r, None)
    (group,) = r.plan.scheduling_objects
    assert (group["apiVersion"], group["kind"], group["metadata"]["name"]) == (
        "scheduling.run.ai/v2alpha2",
        "PodGroup",
        "j",
    )
    assert {k: group["spec"][k] for k in ("minMember", "queue", "priorityClassName")} == {
        "minMember": 2, "queue": "team-a", "priorityClassName": "train"
    }  # fmt: skip
