"""Gangs through Kubernetes' own Workload API on the dev cluster (Kubernetes 1.36, scheduling.k8s.io/v1alpha2 with
the GenericWorkload and GangScheduling gates): the operator, told to use it, gives each job a Workload and a
PodGroup and no gate of its own, and kube-scheduler binds a gang's pods all together or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import operatorprocess

from tests.integration.operator.conftest import PodLog
from tests.integration.operator.test_gang import GPUS_PER_NODE, gpu_job
from tests.support.cluster import wait_for
from tests.support.jobs import condition, create, pods_of, wait_condition

API = ("scheduling.k8s.io", "v1alpha2")

# Serial: it restarts the operator with another gang backend.
pytestmark = pytest.mark.serial


@pytest.fixture(scope="module", autouse=True)
def workload_api_operator(kubeconfig: Any) -> Iterator[None]:
    """The operator with --gang-backend workload-api for this module; the other tests' (own gates) after it."""
    operatorprocess.operator_up(gang_backend="workload-api")
    yield
    operatorprocess.operator_up(gang_backend="gates")


def test_a_gang_larger_than_the_cluster_binds_no_pod_and_the_job_says_why(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, pod_log: PodLog
) -> None:
    body = gpu_job("huge", 2, GPUS_PER_NODE, "print('never')", runPolicy={"schedulingTimeoutSeconds": 20})
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "huge", "Admitted", timeout=30, status="False")
    admitted = condition(job, "Admitted") or {}
    assert admitted["reason"] == "WaitingForCapacity" and admitted["message"].startswith("kube-scheduler: ")
    assert admitted["message"].endswith("(PodGroup huge-2)")
    group = custom.get_namespaced_custom_object(*API, namespace, "podgroups", "huge-2")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    workload = custom.get_namespaced_custom_object(*API, namespace, "workloads", "huge")
    assert workload["metadata"]["ownerReferences"][0]["name"] == "huge"
    pods = pods_of(core, namespace, "huge")
    assert len(pods) == 2
    for p in pods:
        assert not p.spec.scheduling_gates and not p.spec.node_name  # no gate of ours: kube-scheduler holds them
        assert p.spec.scheduling_group.pod_group_name == "huge-2"

    failed = condition(wait_condition(custom, namespace, "huge", "Failed", timeout=60), "Failed") or {}
    assert "schedulingTimeoutSeconds (20 s)" in failed["message"]
    wait_for("its pods removed", lambda: not pods_of(core, namespace, "huge"), timeout=30)
    assert pod_log.seen and pod_log.bound == {}  # kube-scheduler never bound one of them


def test_two_half_cluster_gangs_take_turns(custom: client.CustomObjectsApi, namespace: str, pod_log: PodLog) -> None:
    script = "import time; time.sleep(8)"
    create(custom, namespace, gpu_job("first", 2, 3, script))
    create(custom, namespace, gpu_job("second", 2, 3, script))
    done = {n: wait_condition(custom, namespace, n, "Succeeded", timeout=120) for n in ("first", "second")}
    order = sorted(done, key=lambda n: min(t for p, t in pod_log.bound.items() if p.startswith(f"{n}-")))
    earlier, later = order
    first_ended = max(t for p, t in pod_log.ended.items() if p.startswith(f"{earlier}-"))
    later_bound = min(t for p, t in pod_log.bound.items() if p.startswith(f"{later}-"))
    assert later_bound >= first_ended, "the second gang was placed while the first still held its GPUs"
    bound = {n: sorted(t for p, t in pod_log.bound.items() if p.startswith(f"{n}-")) for n in done}
    assert all(len(times) == 2 and times[1] - times[0] < 2.0 for times in bound.values()), bound  # all at once
    admitted = condition(done[later], "Admitted") or {}
    assert (admitted["status"], admitted["reason"]) == ("True", "GangAdmitted")
