"""Elastic resize on the dev cluster: `kubectl scale tj/<name> --replicas=N` re-forms an allreduce job at the
new world size from its latest checkpoint, keeps training to Succeeded with the accuracy bar met, and a size
outside [minReplicas, maxReplicas], or any size for a job that is not elastic, is refused by the API server. A
local-SGD job that does not fit starts smaller and grows when room comes back (auto-elastic admission)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster.layout import Layout
from ringleader_trainer.checkpoints import store as ckpt

from tests.support.cluster import COUNTS_GPUS, kubectl, logs, wait_for
from tests.support.jobs import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    create,
    digits_job,
    get,
    live_pods,
    rank_status,
    training_job,
    wait_condition,
)

pytestmark = [pytest.mark.usefixtures("operator"), COUNTS_GPUS]


def steps_of_world(directory: Path, workers: int) -> list[int]:
    """Complete checkpoint steps written by a world of `workers` workers."""
    return [s for s, world in ckpt.complete_in_own_world(directory, (0, 0)) if world == (workers, 0)]


def world_running(core: client.CoreV1Api, ns: str, name: str, workers: int) -> bool:
    pods = live_pods(core, ns, name)
    return len(pods) == workers and all(
        p.status.phase == "Running" and p.metadata.annotations.get("ringleader.dev/workers") == str(workers)
        for p in pods
    )


# The trainer issue's accuracy bars: allreduce trains like one process; local SGD averages every few steps. The
# kubectl scale test runs allreduce; the auto-elastic one local SGD (the trainer's resize of each strategy once).
@pytest.mark.parametrize(("strategy", "bar"), [("allreduce", 0.97)])
def test_scale_4_to_2_to_3_keeps_training_to_succeeded(
    layout: Layout, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str,
    tmp_path: Path, strategy: str, bar: float,
) -> None:  # fmt: skip
    directory = tmp_path / "ckpt"
    body = digits_job("el", 4, 400, directory, strategy=strategy)
    body["spec"]["workers"] |= {"minReplicas": 2, "maxReplicas": 4, "restartPolicy": "ExitCode"}
    create(custom, namespace, body)

    def scale(n: int, check: bool = True) -> Any:
        return kubectl(layout, kubeconfig, "-n", namespace, "scale", "tj/el", f"--replicas={n}", check=check)

    wait_for("a checkpoint of 4 workers", lambda: steps_of_world(directory, 4), timeout=180)
    out = scale(5, check=False)
    assert out.returncode != 0 and "spec.workers.replicas must be at most spec.workers.maxReplicas" in out.stderr
    scale(2)
    wait_for("2 workers running", lambda: world_running(core, namespace, "el", 2), timeout=120)
    # The round that creates a world's pods writes status before they exist; the next round (on their events)
    # counts them.
    wait_for("status.replicas 2", lambda: get(custom, namespace, "el")["status"]["replicas"] == 2, timeout=10)
    wait_for("a checkpoint of 2 workers", lambda: steps_of_world(directory, 2), timeout=120)
    resumed_at_2 = _resumes(core, namespace)[-1]
    assert resumed_at_2 >= max(steps_of_world(directory, 4)) - 20 and resumed_at_2 > 0  # from a 4-worker step

    saved_by_2 = max(steps_of_world(directory, 2))
    scale(3)
    job = wait_condition(custom, namespace, "el", "Succeeded", timeout=300)
    assert steps_of_world(directory, 3), "the 3-worker world wrote no checkpoint"
    assert _resumes(core, namespace)[-1] >= saved_by_2  # from a 2-worker step
    done = [json.loads(x) for x in logs(core, namespace, "el-worker-0", container="trainer").splitlines()
            if '"event": "done"' in x]  # fmt: skip
    assert done and done[-1]["test_accuracy"] >= bar, done
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0, job["status"]["ranks"]  # no failure
    assert sorted(rank_status(job)) == ["worker-0", "worker-1", "worker-2"]
    resized = [e.message for e in core.list_namespaced_event(namespace, field_selector="involvedObject.name=el").items
               if e.reason == "Resized"]  # fmt: skip
    assert any("workers 4 -> 2" in m for m in resized) and any("workers 2 -> 3" in m for m in resized), resized
    assert (condition(job, "Succeeded") or {}).get("status") == "True"


def test_an_elastic_job_starts_smaller_on_a_busy_node_grows_when_the_room_comes_back_and_succeeds(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    """Auto-elastic admission with the trainer: 6 of the process node's 8 GPUs are taken, so a local-SGD job asking
    for 4 workers of 1 GPU (minReplicas 2) trains with 2 at once; when the busy job ends it grows to 4, resuming
    from the 2-worker world's checkpoint, and trains to Succeeded with the accuracy bar met, no failure counted."""
    busy = training_job("busy", "import time; time.sleep(600)", workers=1)
    busy["spec"]["workers"]["gpus"] = 6
    create(custom, namespace, busy)
    wait_for("the busy job running", lambda: world_running(core, namespace, "busy", 1), timeout=60)
    directory = tmp_path / "ckpt"
    body = digits_job("el", 4, 400, directory, strategy="local-sgd")
    body["spec"]["workers"] |= {"minReplicas": 2, "gpus": 1, "restartPolicy": "ExitCode"}
    body["spec"]["runPolicy"] = {"elasticGrowAfterSeconds": 5}
    create(custom, namespace, body)

    wait_for("a checkpoint of 2 workers", lambda: steps_of_world(directory, 2), timeout=180)
    elastic = get(custom, namespace, "el")["status"]["elastic"]
    assert (elastic["workers"], elastic["reason"]) == (2, "StartedSmaller"), elastic
    assert "4 do not fit (needs 4 nvidia.com/gpu, 2 free)" in elastic["message"]
    saved_by_2 = max(steps_of_world(directory, 2))
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "busy")

    job = wait_condition(custom, namespace, "el", "Succeeded", timeout=300)
    assert (job["status"]["elastic"]["workers"], job["status"]["elastic"]["reason"]) == (4, "Grown")
    assert steps_of_world(directory, 4), "the 4-worker world wrote no checkpoint"
    assert _resumes(core, namespace)[-1] >= saved_by_2  # from a 2-worker step
    done = [json.loads(x) for x in logs(core, namespace, "el-worker-0", container="trainer").splitlines()
            if '"event": "done"' in x]  # fmt: skip
    assert done and done[-1]["test_accuracy"] >= 0.96, done
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0, job["status"]["ranks"]


def _resumes(core: client.CoreV1Api, ns: str) -> list[int]:
    """The steps worker 0 resumed at, oldest first (its current pod's log)."""
    lines = logs(core, ns, "el-worker-0", container="trainer").splitlines()
    return [json.loads(x)["step"] for x in lines if '"event": "resume"' in x]


def test_a_job_that_is_not_elastic_cannot_be_scaled(
    layout: Layout, kubeconfig: Path, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create(custom, namespace, training_job("fixed", "import time; time.sleep(30)"))
    out = kubectl(layout, kubeconfig, "-n", namespace, "scale", "tj/fixed", "--replicas=3", check=False)
    assert out.returncode != 0
    assert "spec.workers.replicas is immutable unless the job is elastic" in out.stderr
    ps = training_job("ps", "import time; time.sleep(30)", strategy="parameter-server")
    ps["spec"]["workers"]["maxReplicas"] = 4
    with pytest.raises(client.ApiException, match="not parameter-server"):
        create(custom, namespace, ps)
