"""torchrun in every worker pod, as Kubeflow's users start their scripts: with no options it forms the job's whole
world from the operator's PET_* variables (docs/env-contract.md), and an option that would split the world is
refused before any pod is made. Each rank's log says what world it joined, so a job of N worlds of one (which
would also end Succeeded) fails these tests."""

from __future__ import annotations

import re
from typing import Any

import pytest
from kubernetes import client

from tests.support.cluster import logs
from tests.support.jobs import condition, create, pods_of, training_job, wait_condition

pytestmark = pytest.mark.usefixtures("operator")

# A script of our own in the shape of the training-operator's CPU demo: all-reduce a tensor of ones.
SCRIPT = """\
import datetime, os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
t = torch.ones(1)
dist.all_reduce(t)
print(f"rank {dist.get_rank()} world_size {dist.get_world_size()} sum {int(t.item())} "
      f"node {os.environ['GROUP_RANK']}", flush=True)
dist.barrier()
dist.destroy_process_group()
time.sleep(0.1)  # gloo's worker thread frees the last tensors before shutdown (docs/trainer.md, Exiting)
"""
LINE = re.compile(r"rank (\d+) world_size (\d+) sum (\d+) node (\d+)")


def torchrun_job(name: str, namespace: str, core: client.CoreV1Api, *options: str, procs: int = 1) -> dict[str, Any]:
    """A 2-worker job (of `procs` ranks per pod) whose trainer container runs `torchrun [options]
    /scripts/ones.py` from a ConfigMap."""
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"ones.py": SCRIPT})
    )
    body = training_job(name, "", workers=2)
    body["spec"]["workers"]["procsPerPod"] = procs
    pod = body["spec"]["workers"]["template"]["spec"]
    pod["containers"][0]["command"] = ["torchrun", *options, "/scripts/ones.py"]
    pod["containers"][0]["volumeMounts"] = [{"name": "script", "mountPath": "/scripts", "readOnly": True}]
    pod["volumes"] = [{"name": "script", "configMap": {"name": name}}]
    return body


# torchrun with no options over one and over two processes a pod (procsPerPod) runs with the Kubeflow examples
# (tests/e2e/test_examples_chart.py, converted PyTorchJobs); here its own --nproc-per-node.
@pytest.mark.parametrize(
    ("options", "procs", "per_pod"),
    [(("--nproc-per-node", "2"), 1, 2)],
    ids=["2-per-pod"],
)
def test_torchrun_forms_the_jobs_whole_world(
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    namespace: str,
    options: tuple[str, ...],
    procs: int,
    per_pod: int,
) -> None:
    create(custom, namespace, torchrun_job("tr", namespace, core, *options, procs=procs))
    wait_condition(custom, namespace, "tr", "Succeeded", timeout=180)
    world = 2 * per_pod
    seen: dict[int, int] = {}
    for pod in range(2):
        lines = LINE.findall(logs(core, namespace, f"tr-worker-{pod}", container="trainer"))
        assert len(lines) == per_pod, lines
        for rank, size, total, node in lines:
            assert (int(size), int(total), int(node)) == (world, world, pod)
            seen[int(rank)] = pod
    # torchrun numbers ranks node by node: pod 0 holds ranks 0..K-1, pod 1 the next K.
    assert seen == {r: r // per_pod for r in range(world)}


def test_torchrun_standalone_in_a_two_worker_job_is_refused(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    create(custom, namespace, torchrun_job("split", namespace, core, "--standalone"))
    job = wait_condition(custom, namespace, "split", "Failed")
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec"
    assert "containers[0].command: torchrun's --standalone forms a world of one node" in failed["message"]
    assert pods_of(core, namespace, "split") == []
