"""Every example in examples/ applied to the dev cluster runs to Succeeded: the documents as written (the PVC
example's volume pointed at the test's namespace), with the built-in trainer's step count cut to keep the
suite short (the trainer's own tests judge accuracy; here the wiring is under test: scheduling against fake
GPUs, the ConfigMap script, the claim, every strategy through the operator). The examples are this suite's run
of each strategy through the operator: for the built-in trainer each worker pod logs the end of each of its
ranks (a pod of two ranks, two) and the status counts the whole world. Every pod the operator makes of an
example is admitted where Pod Security "restricted" is enforced."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException
from ringleader_api import TrainingJob
from ringleader_devcluster.layout import REPO_ROOT, Layout
from ringleader_operator.builders import build_pod, desired_ranks

from tests.support.cluster import COUNTS_GPUS, kubectl
from tests.support.jobs import condition, get, pods_of, trainer_events, wait_condition

pytestmark = [pytest.mark.usefixtures("operator"), COUNTS_GPUS]

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
STEPS = "60"
HEAVY_STEPS = "4"  # large-mlp: a few seconds a step on CPU workers; wide-mlp: 100 MB of gradients a step
HEAVY = ("large-mlp", "wide-mlp")


def shortened(doc: dict[str, Any]) -> dict[str, Any]:
    for role in ("workers", "parameterServers"):
        template = (doc["spec"].get(role) or {}).get("template")
        if not template:
            continue
        command = template["spec"]["containers"][0].get("command") or []
        if "ringleader_trainer" in command:
            steps = HEAVY_STEPS if any(example in command for example in HEAVY) else STEPS
            if "--steps" in command:
                command[command.index("--steps") + 1] = steps
            else:
                command += ["--steps", steps]
    return doc


def prepared(path: Path, namespace: str) -> tuple[list[dict[str, Any]], str]:
    """The example's documents ready to apply in `namespace`, and its TrainingJob's name."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    suffix = uuid.uuid4().hex[:6]
    for d in docs:
        if d["kind"] == "PersistentVolume":  # cluster-scoped: a name of its own, bound to this namespace's claim
            d["metadata"]["name"] += f"-{suffix}"
            d["spec"]["claimRef"]["namespace"] = namespace
            d["spec"]["hostPath"]["path"] += f"-{suffix}"
        if d["kind"] == "PersistentVolumeClaim":
            d["spec"]["volumeName"] = next(x["metadata"]["name"] for x in docs if x["kind"] == "PersistentVolume")
        if d["kind"] == "TrainingJob":
            shortened(d)
    return docs, next(d["metadata"]["name"] for d in docs if d["kind"] == "TrainingJob")


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs_to_succeeded(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, layout: Layout, kubeconfig: Path,
    tmp_path: Path, path: Path,
) -> None:  # fmt: skip
    docs, name = prepared(path, namespace)
    manifest = tmp_path / path.name
    manifest.write_text(yaml.safe_dump_all(docs))
    kubectl(layout, kubeconfig, "apply", "-n", namespace, "-f", str(manifest))
    try:
        job = wait_condition(custom, namespace, name, "Succeeded", timeout=240)
    except AssertionError as e:
        job = get(custom, namespace, name)
        raise AssertionError(f"{e}: {condition(job, 'Failed') or job.get('status')}") from None
    assert job["status"]["replicaStatuses"]["worker"]["succeeded"] >= 1
    spec = next(d for d in docs if d["kind"] == "TrainingJob")["spec"]
    workers, procs = spec["workers"]["replicas"], spec["workers"].get("procsPerPod", 1)
    shards = (spec.get("parameterServers") or {}).get("replicas", 0)
    assert job["status"]["worldSize"] == workers * procs + shards
    if "ringleader_trainer" in spec["workers"]["template"]["spec"]["containers"][0].get("command", []):
        for pod in range(workers):  # each worker pod ran its ranks to the end: pod 1 of 2x2 holds ranks 2 and 3
            done = [e["index"] for e in trainer_events(core, namespace, f"{name}-worker-{pod}", "done")]
            assert sorted(done) == list(range(pod * procs, (pod + 1) * procs)), (pod, done)
    if "nvidia.com/gpu" in path.read_text():  # scheduled against GPUs a node advertises, one per pod
        pods = pods_of(core, namespace, name)
        assert pods and all((p.spec.containers[0].resources.limits or {}).get("nvidia.com/gpu") == "1" for p in pods)
        assert all(int(core.read_node(p.spec.node_name).status.capacity.get("nvidia.com/gpu", 0)) >= 1 for p in pods)
    for d in docs:
        if d["kind"] == "PersistentVolume":
            core.delete_persistent_volume(d["metadata"]["name"])


def quantities_as_strings(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with its resource quantities as strings: the API server takes numbers too, this client does not."""
    for c in pod["spec"]["containers"]:
        for part in ("limits", "requests"):
            values = (c.get("resources") or {}).get(part) or {}
            values.update({k: str(v) for k, v in values.items()})
    return pod


def test_every_pod_of_every_example_passes_pod_security_restricted(core: client.CoreV1Api, namespace: str) -> None:
    """The pods the operator builds from each example, as written, created (dry run) in a namespace enforcing
    Pod Security "restricted": the API server's own admission judges them."""
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    loose = {"metadata": {"name": "loose"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(ApiException) as refused:  # the namespace does enforce it
        core.create_namespaced_pod(namespace, loose, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)

    refusals, admitted = [], 0
    for path in EXAMPLES:
        doc = next(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "TrainingJob")
        job = TrainingJob.model_validate({**doc, "metadata": {**doc["metadata"], "namespace": namespace, "uid": "u"}})
        for role, index in desired_ranks(job):
            try:
                core.create_namespaced_pod(namespace, quantities_as_strings(build_pod(job, role, index)), dry_run="All")
                admitted += 1
            except ApiException as e:
                refusals.append(f"{path.name} {role.value}-{index}: {e.status} {e.body}")
    assert not refusals, "\n".join(refusals)
    assert admitted >= len(EXAMPLES)
