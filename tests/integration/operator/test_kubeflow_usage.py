"""Kubeflow users' PyTorchJobs, moved over with `ringleader convert`: the project's own manifests and scripts
(examples/kubeflow/), started the ways the training-operator's PyTorch examples start theirs, converted and
applied to the dev cluster. Each runs to Succeeded with every rank seeing the world it should (each script also
exits non-zero on a world other than EXPECTED_WORLD_SIZE, so a job split into worlds of one fails): `torchrun` with
no options across a Master and a Worker; two pods of two processes (nprocPerNode) under `torchrun`; a plain
env:// send/recv over three workers; and the elastic echo through torchrun's c10d rendezvous, which survives the
loss of one of its pods."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from ringleader.convert import convert_documents
from ringleader_devcluster.layout import REPO_ROOT, Layout

from tests.support.cluster import kubectl, logs, wait_for
from tests.support.jobs import condition, get, rank_status, wait_condition

pytestmark = pytest.mark.usefixtures("operator")

KUBEFLOW = REPO_ROOT / "examples" / "kubeflow"
LINE = re.compile(r"rank (\d+) world_size (\d+)")


def apply_converted(
    layout: Layout, kubeconfig: Path, tmp_path: Path, namespace: str, name: str, workers: dict[str, Any] | None = None,
    **env: str,
) -> dict[str, Any]:  # fmt: skip
    """examples/kubeflow/`name` converted (with its scripts' ConfigMap, `workers` fields changed and `env` added to
    the trainer container), applied in `namespace`; returns the TrainingJob."""
    docs = [
        *yaml.safe_load_all((KUBEFLOW / "scripts.yaml").read_text()),
        *yaml.safe_load_all((KUBEFLOW / name).read_text()),
    ]
    converted = convert_documents(docs).documents
    (job,) = [dict(d) for d in converted if d["kind"] == "TrainingJob"]
    job["spec"]["workers"] |= workers or {}
    container = job["spec"]["workers"]["template"]["spec"]["containers"][0]
    container["env"] = [*(container.get("env") or []), *({"name": k, "value": v} for k, v in env.items())]
    manifest = tmp_path / name
    manifest.write_text(yaml.safe_dump_all([d for d in converted if d["kind"] != "TrainingJob"] + [job]))
    kubectl(layout, kubeconfig, "apply", "-n", namespace, "-f", str(manifest))
    return job


def ranks_seen(core: client.CoreV1Api, namespace: str, job: str, pods: int) -> dict[int, int]:
    """rank -> world size, from every worker pod's last lines."""
    seen: dict[int, int] = {}
    for i in range(pods):
        for rank, world in LINE.findall(logs(core, namespace, f"{job}-worker-{i}", container="trainer")):
            seen[int(rank)] = int(world)
    return seen


@pytest.mark.parametrize(
    ("name", "pods", "world"),
    [("allreduce-master-worker.yaml", 2, 2), ("allreduce-nproc.yaml", 2, 4), ("sendrecv-workers.yaml", 3, 3)],
    ids=["torchrun-master-worker", "torchrun-2x2", "env-sendrecv"],
)
def test_a_converted_pytorchjob_runs_with_every_rank_in_the_whole_world(
    layout: Layout, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str,
    tmp_path: Path, name: str, pods: int, world: int,
) -> None:  # fmt: skip
    job = apply_converted(layout, kubeconfig, tmp_path, namespace, name)["metadata"]["name"]
    done = wait_condition(custom, namespace, job, "Succeeded", timeout=180)
    assert done["status"]["worldSize"] == world
    assert ranks_seen(core, namespace, job, pods) == dict.fromkeys(range(world), world)


def test_the_elastic_echo_survives_the_loss_of_a_pod(
    layout: Layout, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    """2 workers meeting through torchrun's c10d rendezvous on worker 0: worker 1's pod is deleted while they echo;
    worker 0's agent restarts its process and meets the replacement, and the job still Succeeds. (maxReplicas 2
    instead of the example's 3: a round of every possible node completes at once, where one of fewer waits torch's
    30 s last call for more, twice in this test.)"""
    job = apply_converted(
        layout, kubeconfig, tmp_path, namespace, "elastic-echo.yaml", {"maxReplicas": 2}, ECHO_TIMES="15"
    )
    name = job["metadata"]["name"]
    assert job["spec"]["torchrun"] == {"rendezvous": "c10d", "maxRestarts": 10}

    def echoing() -> bool:
        try:
            text = logs(core, namespace, f"{name}-worker-0", container="trainer")
        except client.ApiException:  # not made yet, or not started
            return False
        return "world_size 2 sum 2 echo 2" in text

    wait_for("both workers echoing", echoing, timeout=120)
    core.delete_namespaced_pod(f"{name}-worker-1", namespace)
    done = wait_condition(custom, namespace, name, "Succeeded", timeout=240)
    text = logs(core, namespace, f"{name}-worker-0", container="trainer")
    assert text.count("echo 0") >= 2, text  # started over after the loss (torchrun restarted it)
    assert "world_size 2 sum 2 echo 14" in text, text  # and finished with the replacement, the world whole again
    assert (condition(done, "Succeeded") or {}).get("status") == "True"
    assert rank_status(get(custom, namespace, name))["worker-1"]["restarts"] == 1  # the operator replaced it
