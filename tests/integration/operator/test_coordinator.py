"""A job training short of a lost rank (minReplicas) gets its coordinator on the dev cluster: a Deployment the chart's
operator creates beside the ranks, from the workers' image, hosting the rendezvous store. Worker 0's trainer is
SIGKILLed mid-run: its store was not its own, so the two survivors form a group of two and train on while its pod is
replaced (without a coordinator they stood still until the replacement hosted a new store), take the replacement in
at a step boundary and heal it from their live state; the job Succeeds with no step lost, and the round it ends in
deletes the coordinator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster.processes import kill_pod_processes

from tests.support.cluster import logs, wait_for
from tests.support.jobs import condition, create, get, pods_of, trainer_events, training_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")

JOB = "co"
# Worker 1 sleeps 50 ms a step: the run outlasts the replacement's start (a pod, an interpreter, torch).
COMMAND = ["python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "800", "--log-every", "1",
           "--straggler", "1:0.05", "--timeout", "60"]  # fmt: skip


def coordinator_pods(core: client.CoreV1Api, namespace: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(namespace, label_selector=f"ringleader.dev/coordinator-of={JOB}").items)


def test_with_min_replicas_worker_0s_loss_stops_nobody_and_the_coordinator_ends_with_the_job(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    apps = client.AppsV1Api(core.api_client)
    body = training_job(JOB, "", workers=3)
    body["spec"]["workers"] |= {"minReplicas": 2, "restartPolicy": "ExitCode"}
    body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"] = COMMAND
    create(custom, namespace, body)

    def diagnosis() -> str:
        tails = []
        for p in [*pods_of(core, namespace, JOB), *coordinator_pods(core, namespace)]:
            try:
                tails.append(f"--- {p.metadata.name}\n{logs(core, namespace, p.metadata.name)[-2500:]}")
            except client.ApiException as e:  # gone meanwhile
                tails.append(f"--- {p.metadata.name}: no logs ({e.reason})")
        return f"{get(custom, namespace, JOB).get('status')}\n" + "\n".join(tails)

    def worker_step(index: int) -> int:
        lines = logs(core, namespace, f"{JOB}-worker-{index}", container="trainer").splitlines()
        steps = [json.loads(x) for x in lines if x.startswith("{") and '"loss"' in x]
        return max((int(e["step"]) for e in steps), default=0)

    try:
        wait_for(
            "the coordinator's pod running",
            lambda: any(p.status.phase == "Running" for p in coordinator_pods(core, namespace)),
            timeout=180,
        )
        wait_for("worker 0 past step 50", lambda: worker_step(0) >= 50, timeout=240)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnosis()}") from None
    victim = next(p for p in pods_of(core, namespace, JOB) if p.metadata.name == f"{JOB}-worker-0")
    assert kill_pod_processes(victim.metadata.uid, "ringleader_trainer"), "no trainer process in worker 0's pod"

    try:
        job = wait_finished(custom, namespace, JOB, "the job to finish", timeout=420)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{diagnosis()}") from None
    assert condition(job, "Succeeded"), f"{condition(job, 'Failed')}\n{diagnosis()}"
    heals = trainer_events(core, namespace, f"{JOB}-worker-1", "heal")
    # Trained short (a group of the two survivors: worker 0's loss stopped nobody), then whole again.
    assert [h["present"] for h in heals] == [2, 3] and heals[1]["step"] > heals[0]["step"], (heals, diagnosis())
    healed = trainer_events(core, namespace, f"{JOB}-worker-0", "healed")
    assert len(healed) == 1 and healed[0]["source"] in (1, 2), healed  # from a live peer, no checkpoint
    goodput = job["status"].get("goodput") or {}
    assert goodput.get("stepsLost", 0) == 0, goodput

    def coordinator_gone() -> bool:
        deployments = apps.list_namespaced_deployment(namespace).items
        return not any(d.metadata.name.startswith(f"{JOB}-coordinator-") for d in deployments)

    wait_for("the coordinator deleted with the job's end", coordinator_gone, timeout=60)
