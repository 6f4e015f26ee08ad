"""Kueue's job contract, the pure side (kueue.py): the Workload a queued job needs, what a Workload's status means
for the job, where admitted pods go, and the status writes that are the job controller's part."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator import kueue
from ringleader_operator.builders import build_pod

from tests.unit.operator.builders import TEMPLATE, training_job

GPU_TEMPLATE = {
    "spec": {
        "nodeSelector": {"pool": "a100"},
        "containers": [
            {"name": "trainer", "image": "t", "command": ["python"], "resources": {"requests": {"cpu": "4"}}},
            {"name": "sidecar", "image": "s", "env": [{"name": "X", "value": "1"}]},
        ],
    }
}


def queued_job(labels: dict[str, str] | None = None, **spec: Any) -> Any:
    job = training_job(**spec)
    job.metadata["labels"] = {kueue.QUEUE_LABEL: "team-a", **(labels or {})}
    return job


def workload(conditions: list[tuple[str, str, str, str]], admission: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Workload with these (type, status, reason, message) conditions."""
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m, "lastTransitionTime": "2026-01-01T00:00:00Z"}
            for t, s, r, m in conditions
        ]
    }
    if admission is not None:
        status["admission"] = admission
    return {
        "metadata": {"name": "trainingjob-j-abcde", "generation": 2},
        "spec": {"queueName": "team-a"},
        "status": status,
    }


def test_the_queue_is_the_label_and_a_job_without_it_is_not_queued() -> None:
    assert kueue.queue_name(queued_job()) == "team-a"
    assert kueue.queue_name(training_job()) is None


def test_workload_names_are_kueues_shape_and_differ_for_a_new_job_of_the_same_name() -> None:
    one, other = kueue.workload_name(training_job(uid="a")), kueue.workload_name(training_job(uid="b"))
    assert one.startswith("trainingjob-j-") and len(one) == len("trainingjob-j-") + 5
    assert one != other and one == kueue.workload_name(training_job(uid="a"))


def test_the_workload_has_a_pod_set_per_role_with_what_kueue_reads_and_nothing_of_the_ranks() -> None:
    job = queued_job(
        template=GPU_TEMPLATE,
        workers={"replicas": 3, "gpus": 2},
        strategy="parameter-server",
        parameterServers={"replicas": 2, "template": GPU_TEMPLATE},
    )
    wl = kueue.build_workload(job, None, None)
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    assert wl["metadata"]["ownerReferences"][0]["controller"] is True
    assert wl["metadata"]["labels"] == {"ringleader.dev/job-name": "j", kueue.JOB_UID_LABEL: "u"}
    assert wl["spec"]["queueName"] == "team-a" and "priority" not in wl["spec"] and "active" not in wl["spec"]
    sets = {s["name"]: s for s in wl["spec"]["podSets"]}
    assert {n: s["count"] for n, s in sets.items()} == {"worker": 3, "ps": 2}
    worker = sets["worker"]["template"]["spec"]
    trainer, sidecar = worker["containers"]
    assert trainer == {"name": "trainer", "image": "t", "resources": {"requests": {"cpu": "4"}, "limits": {
        "nvidia.com/gpu": 2}}}  # fmt: skip
    assert sidecar == {"name": "sidecar", "image": "s"}  # no env, mounts, ports
    assert worker["nodeSelector"] == {"pool": "a100"} and worker["restartPolicy"] == "Never"
    assert not {"schedulingGates", "volumes", "hostname", "subdomain"} & set(worker)
    assert any(t["key"] == "node.kubernetes.io/unreachable" for t in worker["tolerations"])


@pytest.mark.parametrize(
    ("labels", "run_policy", "expected"),
    [
        ({}, {}, None),
        ({kueue.PRIORITY_LABEL: "urgent"}, {}, ("WorkloadPriorityClass", "urgent")),
        ({}, {"priorityClassName": "batch"}, ("PriorityClass", "batch")),
        ({kueue.PRIORITY_LABEL: "urgent"}, {"priorityClassName": "batch"}, ("WorkloadPriorityClass", "urgent")),
    ],
)
def test_priority_comes_from_the_workload_priority_class_label_before_the_pods_priority_class(
    labels: dict[str, str], run_policy: dict[str, Any], expected: tuple[str, str] | None
) -> None:
    job = queued_job(labels, runPolicy=run_policy)
    assert kueue.priority_class(job) == expected
    if expected is not None:
        ref = kueue.build_workload(job, 7, expected)["spec"]
        group = "kueue.x-k8s.io" if expected[0] == "WorkloadPriorityClass" else "scheduling.k8s.io"
        assert ref["priorityClassRef"] == {"group": group, "kind": expected[0], "name": expected[1]}
        assert ref["priority"] == 7


def test_a_suspended_job_has_an_inactive_workload() -> None:
    job = queued_job(runPolicy={"suspend": True})
    assert kueue.build_workload(job, None, None)["spec"]["active"] is False
    assert not kueue.wants_active(job) and kueue.wants_active(queued_job())


@pytest.mark.parametrize(
    ("change", "still"),
    [
        ({}, True),
        ({"workers": {"replicas": 3}}, False),
        ({"template": GPU_TEMPLATE}, False),  # other requests
        ({"queue": "team-b"}, False),
        ({"runPolicy": {"backoffLimit": 9}}, True),  # nothing Kueue weighs
    ],
)
def test_a_workload_matches_the_job_while_its_pod_sets_and_queue_are_the_same(
    change: dict[str, Any], still: bool
) -> None:
    wl = kueue.build_workload(queued_job(), None, None)
    queue = change.pop("queue", None)
    job = queued_job(**change)
    if queue:
        job.metadata["labels"][kueue.QUEUE_LABEL] = queue
    assert kueue.matches(wl, job) is still


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [
        {"name": "worker", "flavors": {"cpu": "spot", "nvidia.com/gpu": "a100"}, "count": 2},
        {"name": "ps", "flavors": {"cpu": "spot"}, "count": 1},
    ],
}


@pytest.mark.parametrize(
    ("conditions", "admission", "admitted", "evicted", "says"),
    [
        ([], None, False, None, "waiting in Kueue's queue team-a (Workload trainingjob-j-abcde): not yet looked at"),
        (
            [("QuotaReserved", "False", "Pending", "couldn't assign flavors: insufficient quota for cpu")],
            None, False, None, "insufficient quota for cpu",
        ),
        (
            [("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", "")],
            ADMISSION, True, None, "admitted by Kueue's ClusterQueue cq",
        ),
        (
            [("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
             ("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority Workload")],
            ADMISSION, False, ("Preempted", "Preempted to accommodate a higher priority Workload"),
            "evicted by Kueue (Preempted)",
        ),
        (
            [("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "False", "UnsatisfiedChecks", "")],
            ADMISSION, False, None, "waiting in Kueue's queue",  # quota reserved, admission checks pending
        ),
    ],
)  # fmt: skip
def test_what_a_workload_means_for_the_job(
    conditions: list[tuple[str, str, str, str]],
    admission: dict[str, Any] | None,
    admitted: bool,
    evicted: tuple[str, str] | None,
    says: str,
) -> None:
    state = kueue.read(workload(conditions, admission))
    assert (state.admitted, state.evicted) == (admitted, evicted)
    assert says in state.message


def test_kueues_long_messages_are_clipped() -> None:
    state = kueue.read(workload([("QuotaReserved", "False", "Pending", "x" * 5000)]))
    assert len(state.message) < kueue.MESSAGE_MAX + 100 and state.message.endswith("...")


def test_admitted_pods_go_to_their_flavors_nodes_and_tolerate_their_taints() -> None:
    wl = workload([("Admitted", "True", "Admitted", "")], ADMISSION)
    assert kueue.assigned_flavors(wl) == {"worker": ["a100", "spot"], "ps": ["spot"]}
    taint = {"key": "spot", "operator": "Exists", "effect": "NoSchedule"}
    flavors = {
        "spot": {"spec": {"nodeLabels": {"lifecycle": "spot", "pool": "cpu"}, "tolerations": [taint]}},
        "a100": {"spec": {"nodeLabels": {"gpu": "a100"}, "tolerations": [taint]}},
    }
    state = kueue.place(kueue.read(wl), wl, flavors)
    job = training_job(
        template=GPU_TEMPLATE, strategy="parameter-server", parameterServers={"replicas": 1, "template": TEMPLATE}
    )
    worker = build_pod(job, Role.WORKER, 0)
    kueue.apply_placement(worker, Role.WORKER, state)
    # The template's own selector wins over a flavor's label of the same key.
    assert worker["spec"]["nodeSelector"] == {"lifecycle": "spot", "pool": "a100", "gpu": "a100"}
    assert worker["spec"]["tolerations"].count(taint) == 1
    ps = build_pod(job, Role.PS, 0)
    kueue.apply_placement(ps, Role.PS, state)
    assert ps["spec"]["nodeSelector"] == {"lifecycle": "spot", "pool": "cpu"}
    unplaced = build_pod(job, Role.WORKER, 1)
    before = dict(unplaced["spec"])
    kueue.apply_placement(unplaced, Role.WORKER, kueue.read(wl))  # no placement read yet: unchanged
    assert unplaced["spec"] == before


@pytest.mark.parametrize(
    ("reason", "requeued"),
    [("Preempted", "True"), ("NodeFailures", "True"), ("Deactivated", "False"), ("ClusterQueueStopped", "False")],
)
def test_an_evicted_workload_gives_its_reservation_back_and_is_requeued_after_a_preemption(
    reason: str, requeued: str
) -> None:
    wl = workload(
        [("QuotaReserved", "True", "QuotaReserved", ""), ("Admitted", "True", "Admitted", ""),
         ("Evicted", "True", reason, "why")],
        ADMISSION,
    )  # fmt: skip
    assert kueue.has_reservation(wl)
    status = kueue.requeue_status(wl, "2026-01-02T00:00:00Z")
    assert status["admission"] is None
    by_type = {c["type"]: c for c in status["conditions"]}
    assert (by_type["Requeued"]["status"], by_type["Requeued"]["reason"]) == (requeued, reason)
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert (by_type["Admitted"]["status"], by_type["Admitted"]["reason"]) == ("False", "NoReservation")
    assert by_type["Evicted"]["status"] == "True"  # Kueue's own, left as it is
    assert by_type["Admitted"]["lastTransitionTime"] == "2026-01-02T00:00:00Z"
    assert by_type["Admitted"]["observedGeneration"] == 2
    assert not kueue.has_reservation({**wl, "status": status})


def test_a_condition_that_keeps_its_status_keeps_its_transition_time() -> None:
    wl = workload([("QuotaReserved", "False", "Pending", "old"), ("Evicted", "True", "Preempted", "m")])
    (reserved,) = [c for c in kueue.requeue_status(wl, "2026-01-02T00:00:00Z")["conditions"] if c["type"] ==
                   "QuotaReserved"]  # fmt: skip
    assert reserved["lastTransitionTime"] == "2026-01-01T00:00:00Z" and reserved["message"] == "m"


@pytest.mark.parametrize(("succeeded", "reason"), [(True, "Succeeded"), (False, "Failed")])
def test_a_finished_job_finishes_its_workload(succeeded: bool, reason: str) -> None:
    wl = workload([("Admitted", "True", "Admitted", "")], ADMISSION)
    assert not kueue.finished(wl)
    status = kueue.finished_status(wl, succeeded, "all ranks done", "2026-01-02T00:00:00Z")
    done = {**wl, "status": {**wl["status"], **status}}
    assert kueue.finished(done)
    (finished,) = [c for c in status["conditions"] if c["type"] == "Finished"]
    assert (finished["reason"], finished["message"]) == (reason, "all ranks done")
