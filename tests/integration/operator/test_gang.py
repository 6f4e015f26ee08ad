"""Gang admission on the dev cluster (one process node with 8 fake nvidia.com/gpu): a job never holds part of
its room while the rest cannot be placed, a job too big for the cluster never runs a pod and says why, two jobs
that fit alone but not together run one after the other, and a gang scheduler named by the pods gets its
PodGroup instead."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.integration.operator.conftest import PodLog
from tests.support.cluster import COUNTS_GPUS, wait_for
from tests.support.jobs import condition, create, get, pods_of, training_job, wait_condition

pytestmark = [pytest.mark.usefixtures("operator"), COUNTS_GPUS]

GPUS_PER_NODE = 8  # the dev cluster's process node (tests/conftest.py)


def gpu_job(name: str, workers: int, gpus: int, script: str, **spec: Any) -> dict[str, Any]:
    body = training_job(name, script, workers=workers, **spec)
    body["spec"]["workers"]["gpus"] = gpus
    body["spec"]["workers"]["restartPolicy"] = "Never"
    return body


def test_a_job_larger_than_the_cluster_never_runs_a_pod_and_says_why(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, pod_log: PodLog
) -> None:
    body = gpu_job("huge", 2, GPUS_PER_NODE, "print('never')", runPolicy={"schedulingTimeoutSeconds": 20})
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "huge", "Admitted", timeout=30, status="False")
    admitted = condition(job, "Admitted") or {}
    assert admitted["reason"] == "Unschedulable"
    assert admitted["message"] == f"needs {2 * GPUS_PER_NODE} nvidia.com/gpu, {GPUS_PER_NODE} allocatable"
    assert job["status"]["phase"] == "Pending"
    # The round writes its status before it creates the pods: both exist a moment later, not at once.
    pods = wait_for("both pods", lambda: ps if len(ps := pods_of(core, namespace, "huge")) == 2 else None, timeout=15)
    assert all(p.spec.scheduling_gates and not p.spec.node_name for p in pods)
    warnings = core.list_namespaced_event(namespace, field_selector="involvedObject.name=huge").items
    assert any(e.reason == "Unschedulable" and "needs 16 nvidia.com/gpu" in e.message for e in warnings)

    job = wait_condition(custom, namespace, "huge", "Failed", timeout=60)
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "Unschedulable"
    assert "schedulingTimeoutSeconds (20 s): needs 16 nvidia.com/gpu, 8 allocatable" in failed["message"]
    wait_for("its pods removed", lambda: not pods_of(core, namespace, "huge"), timeout=30)
    assert pod_log.seen and pod_log.bound == {} and pod_log.unschedulable == []  # seen, never bound


def test_two_jobs_that_fit_alone_but_not_together_run_one_after_the_other(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, pod_log: PodLog
) -> None:
    script = "import time; time.sleep(8)"
    create(custom, namespace, gpu_job("first", 2, 3, script))
    create(custom, namespace, gpu_job("second", 2, 3, script))
    done = {n: wait_condition(custom, namespace, n, "Succeeded", timeout=120) for n in ("first", "second")}

    # The one admitted first ran alone; the other waited for its room and said so.
    order = sorted(done, key=lambda n: min(t for p, t in pod_log.bound.items() if p.startswith(f"{n}-")))
    earlier, later = order
    waited = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={later}").items
    assert any(e.reason == "WaitingForCapacity" and "needs 6 nvidia.com/gpu, 2 free" in e.message for e in waited), [
        (e.reason, e.message) for e in waited
    ]
    admitted = condition(done[later], "Admitted") or {}
    assert (admitted["status"], admitted["reason"]) == ("True", "GangAdmitted")
    first_ended = max(t for p, t in pod_log.ended.items() if p.startswith(f"{earlier}-"))
    later_bound = min(t for p, t in pod_log.bound.items() if p.startswith(f"{later}-"))
    assert later_bound >= first_ended, "the second job's pods were placed while the first job still held its GPUs"
    assert len(pod_log.bound) == 4
    assert pod_log.unschedulable == [] and not pod_log.partial("first") and not pod_log.partial("second")


PODGROUP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.volcano.sh"},
    "spec": {
        "group": "scheduling.volcano.sh",
        "scope": "Namespaced",
        "names": {"kind": "PodGroup", "plural": "podgroups", "singular": "podgroup"},
        "versions": [
            {
                "name": "v1beta1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


def test_a_gang_scheduler_named_by_the_pods_gets_its_pod_group(
    api: client.ApiClient, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    # Volcano itself is not run here: its PodGroup API stands in, to see what the operator hands it.
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(PODGROUP_CRD)
    try:
        wait_for("the PodGroup API served", lambda: _served(custom, namespace), timeout=30)
        body = gpu_job("vol", 3, 2, "print('hi')")
        body["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "research"}
        body["spec"]["workers"]["template"]["spec"]["schedulerName"] = "volcano"
        create(custom, namespace, body)
        group = wait_for("the PodGroup", lambda: _pod_group(custom, namespace, "vol"), timeout=30)
        assert group["spec"]["minMember"] == 3 and group["spec"]["queue"] == "research"
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == "6"
        assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
        pods = wait_for("3 pods", lambda: ps if len(ps := pods_of(core, namespace, "vol")) == 3 else None)
        for p in pods:
            assert p.metadata.annotations["scheduling.k8s.io/group-name"] == "vol"
            assert not p.spec.scheduling_gates and p.spec.scheduler_name == "volcano"
            assert not p.spec.node_name  # no Volcano runs: nobody places them, and Ringleader does not either
        assert condition(get(custom, namespace, "vol"), "Admitted") is None
    finally:
        ext.delete_custom_resource_definition(PODGROUP_CRD["metadata"]["name"])


def test_a_gang_scheduler_that_is_not_installed_fails_the_job_saying_so(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = gpu_job("cosched", 2, 1, "print('hi')")
    body["spec"]["workers"]["template"]["spec"]["schedulerName"] = "scheduler-plugins-scheduler"
    create(custom, namespace, body)
    job = wait_condition(custom, namespace, "cosched", "Failed", timeout=30)
    failed = condition(job, "Failed") or {}
    assert failed["reason"] == "InvalidSpec"
    assert "needs PodGroups (scheduling.x-k8s.io/v1alpha1), which this cluster does not serve" in failed["message"]
    assert pods_of(core, namespace, "cosched") == []


def _served(custom: client.CustomObjectsApi, ns: str) -> bool:
    try:
        custom.list_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", ns, "podgroups")
    except client.ApiException:
        return False
    return True


def _pod_group(custom: client.CustomObjectsApi, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return dict(custom.get_namespaced_custom_object("scheduling.volcano.sh", "v1beta1", ns, "podgroups", name))
    except client.ApiException:
        return None
