"""TrainingJobs queued by a real Kueue (its manager from the Go module proxy, in the dev cluster): the operator
makes each job's Workload, runs the pods only while Kueue admits it, on the flavor's nodes, gives the quota back
when the job ends, and stops a preempted job, which Kueue queues again and which resumes from its checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster.layout import Layout

from tests.support import kueue as kueue_support
from tests.support.cluster import wait_for
from tests.support.jobs import (
    condition,
    create,
    digits_job,
    get,
    live_pods,
    pods_of,
    trainer_events,
    training_job,
    wait_condition,
)

pytestmark = pytest.mark.usefixtures("operator")

KUEUE = kueue_support.API
FLAVOR = "process-nodes"  # its node labels put the pods on the process node
QUOTA_CPU = 2  # two workers of one CPU each: one job at a time
WORKER_CPU = "1"


@pytest.fixture(scope="module")
def kueue(layout: Layout, custom: client.CustomObjectsApi) -> None:
    """Kueue's manager running, with a ResourceFlavor for the process node and two WorkloadPriorityClasses."""
    kueue_support.start(layout)
    flavor = {"metadata": {"name": FLAVOR}, "spec": {"nodeLabels": {"ringleader.dev/process-node": "true"}}}
    apply_cluster_object(custom, "resourceflavors", {"kind": "ResourceFlavor", **flavor})
    for name, value in (("low", 100), ("high", 1000)):
        apply_cluster_object(
            custom,
            "workloadpriorityclasses",
            {"kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value},
        )


def apply_cluster_object(custom: client.CustomObjectsApi, plural: str, body: dict[str, Any]) -> None:
    body = {"apiVersion": "/".join(KUEUE), **body}
    try:
        custom.create_cluster_custom_object(*KUEUE, plural, body)
    except client.ApiException as e:
        if e.status != 409:
            raise


@pytest.fixture
def queue(kueue: None, custom: client.CustomObjectsApi, namespace: str) -> Iterator[str]:
    """A ClusterQueue of QUOTA_CPU CPUs (lower priorities preempted within it) and the namespace's LocalQueue
    pointing at it; returns the LocalQueue's name."""
    cluster_queue = f"cq-{uuid.uuid4().hex[:8]}"
    spec = {
        "namespaceSelector": {},
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [
            {
                "coveredResources": ["cpu"],
                "flavors": [{"name": FLAVOR, "resources": [{"name": "cpu", "nominalQuota": str(QUOTA_CPU)}]}],
            }
        ],
    }
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", {"apiVersion": "/".join(KUEUE), "kind": "ClusterQueue",
                                  "metadata": {"name": cluster_queue}, "spec": spec}
    )  # fmt: skip
    local = {"apiVersion": "/".join(KUEUE), "kind": "LocalQueue", "metadata": {"name": "training"},
             "spec": {"clusterQueue": cluster_queue}}  # fmt: skip
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local)
    yield "training"
    custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)


def queued(body: dict[str, Any], queue: str, priority: str | None = None) -> dict[str, Any]:
    """`body` in `queue`, each worker asking for WORKER_CPU and placed by the flavor (no node selector of its own)."""
    labels = {"kueue.x-k8s.io/queue-name": queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    body["metadata"]["labels"] = labels
    spec = body["spec"]["workers"]["template"]["spec"]
    del spec["nodeSelector"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": WORKER_CPU}}
    return body


def workload_of(custom: client.CustomObjectsApi, ns: str, job: str) -> dict[str, Any]:
    (workload,) = custom.list_namespaced_custom_object(
        *KUEUE, ns, "workloads", label_selector=f"ringleader.dev/job-name={job}"
    )["items"]
    return dict(workload)


def phase(custom: client.CustomObjectsApi, ns: str, job: str) -> str:
    return str((get(custom, ns, job).get("status") or {}).get("phase"))


def wl_condition(workload: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in workload["status"].get("conditions") or [] if c["type"] == kind), {})


def saved_step(core: client.CoreV1Api, ns: str, pod: str) -> int:
    """The newest step the pod's trainer logged a checkpoint of (0 while it has no pod or none)."""
    try:
        return max((e["step"] for e in trainer_events(core, ns, pod, "checkpoint")), default=0)
    except client.ApiException:
        return 0


def test_two_jobs_over_quota_run_one_after_the_other(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, queue: str
) -> None:
    create(custom, namespace, queued(training_job("first", "import time; time.sleep(8)"), queue))
    wait_for("first running", lambda: phase(custom, namespace, "first") == "Running", timeout=60)
    create(custom, namespace, queued(training_job("second", "import time; time.sleep(2)"), queue))

    def waiting() -> dict[str, Any] | None:
        job = get(custom, namespace, "second")
        c = condition(job, "Suspended") or {}
        return job if c.get("reason") == "Queued" and "insufficient" in c.get("message", "") else None

    job = wait_for("second queued for want of quota", waiting, timeout=30)
    assert job["status"]["phase"] == "Queued" and pods_of(core, namespace, "second") == []
    first = workload_of(custom, namespace, "first")
    assert [(s["name"], s["count"]) for s in first["spec"]["podSets"]] == [("worker", 2)]
    assert first["metadata"]["ownerReferences"][0]["name"] == "first"
    # The pods run where the flavor Kueue assigned says.
    assert {p.spec.node_selector.get("ringleader.dev/process-node") for p in pods_of(core, namespace, "first")} == {
        "true"
    }

    done = wait_condition(custom, namespace, "first", "Succeeded", timeout=90)
    wait_condition(custom, namespace, "second", "Succeeded", timeout=90)
    finished = wl_condition(workload_of(custom, namespace, "first"), "Finished")
    assert (finished.get("status"), finished.get("reason")) == ("True", "Succeeded")  # its quota given back
    started = min(p.metadata.creation_timestamp for p in pods_of(core, namespace, "second"))
    assert started.isoformat().replace("+00:00", "Z") >= done["status"]["completionTime"]
    assert (condition(get(custom, namespace, "second"), "Suspended") or {}).get("reason") == "QueueAdmitted"


def test_a_higher_priority_job_preempts_a_lower_one_which_resumes_from_its_checkpoint(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, queue: str, tmp_path: Path
) -> None:
    directory = tmp_path / "ckpt"
    create(custom, namespace, queued(digits_job("low", 2, 160, directory), queue, "low"))
    wait_for("low checkpointed past step 60", lambda: saved_step(core, namespace, "low-worker-0") >= 60, timeout=180)
    create(custom, namespace, queued(training_job("high", "import time; time.sleep(3)"), queue, "high"))

    def evicted() -> dict[str, Any] | None:
        job = get(custom, namespace, "low")
        c = condition(job, "Suspended") or {}
        return job if c.get("reason") == "QueueEvicted" and not live_pods(core, namespace, "low") else None

    job = wait_for("low evicted by Kueue, its pods gone", evicted, timeout=90)
    assert job["status"]["phase"] == "Queued" and "Preempted" in (condition(job, "Suspended") or {})["message"]
    wait_condition(custom, namespace, "high", "Succeeded", timeout=90)
    requeued = wl_condition(workload_of(custom, namespace, "low"), "Requeued")
    assert (requeued.get("status"), requeued.get("reason")) == ("True", "Preempted")

    job = wait_condition(custom, namespace, "low", "Succeeded", timeout=300)
    (resumed,) = trainer_events(core, namespace, "low-worker-0", "resume")
    assert resumed["step"] >= 60  # from the checkpoint it saved, not from the start
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0  # a preemption is no failure
    assert job["status"]["progress"]["step"] == 160


def test_a_job_managed_by_another_controller_is_left_alone_and_the_field_is_immutable(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    body = training_job("elsewhere", "pass")
    body["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    create(custom, namespace, body)
    create(custom, namespace, training_job("ours", "pass"))  # a job of ours, created after it, runs
    wait_condition(custom, namespace, "ours", "Succeeded", timeout=60)
    assert pods_of(core, namespace, "elsewhere") == [] and "status" not in get(custom, namespace, "elsewhere")
    with pytest.raises(client.ApiException) as refused:
        custom.patch_namespaced_custom_object(
            "ringleader.dev", "v1alpha1", namespace, "trainingjobs", "elsewhere", {"spec": {"managedBy": None}}
        )
    assert refused.value.status == 422 and "spec.managedBy is immutable" in refused.value.body
