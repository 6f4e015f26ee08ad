"""Stalls and stragglers on the dev cluster. A worker hung by the trainer's fault flag makes the job Stalled
(runPolicy.progressDeadlineSeconds), naming that worker and its node, within the deadline and one scrape; the
operator replaces it (not counted against backoffLimit), its peers recover in place, and the job succeeds. A
worker slowed by `--straggler` is named in the Straggler condition (runPolicy.stragglerThreshold) and, under
stragglerPolicy Replace, recreated once preferring another node, and the job succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from ringleader_operator.observed import parse_time

from tests.support.jobs import condition, create, digits_job, rank_status, trainer_events, wait_condition

pytestmark = pytest.mark.usefixtures("operator")

DEADLINE = 30  # seconds: start-up (three pods importing torch on two cores) must fit in it


def test_a_hung_rank_stalls_the_job_is_named_and_replaced_and_the_job_succeeds(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    body = digits_job("stall", 3, 120, tmp_path / "ckpt", runPolicy={"progressDeadlineSeconds": DEADLINE})
    command = body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"]
    command += ["--hang-at-step", "50:1", "--timeout", "60"]
    create(custom, namespace, body)

    job = wait_condition(custom, namespace, "stall", "Stalled", timeout=240)
    stalled = condition(job, "Stalled") or {}
    node = core.read_namespaced_pod("stall-worker-1", namespace).spec.node_name
    assert stalled["reason"] == "ProgressDeadlineExceeded"
    assert f"worker 1 (pod stall-worker-1 on node {node}) stopped first: at step 50" in stalled["message"], stalled

    job = wait_condition(custom, namespace, "stall", "Succeeded", timeout=300)
    status = job["status"]
    assert status["stalls"] == 1 and status["lastStallStep"] == 50
    rank = rank_status(job)["worker-1"]
    assert (rank["stalls"], rank["restarts"], rank["lastReason"]) == (1, 0, "RankStalled")
    assert status["replicaStatuses"]["worker"]["restarts"] == 0  # a stall is not counted against backoffLimit
    assert (condition(job, "Stalled") or {}).get("status") == "False"
    # Workers 0 and 2 lost worker 1 and recovered in place; the replacement (attempt 1) did not hang.
    for pod in ("stall-worker-0", "stall-worker-2"):
        assert trainer_events(core, namespace, pod, "recover"), pod
    assert not trainer_events(core, namespace, "stall-worker-1", "hang")
    warnings = core.list_namespaced_event(namespace, field_selector="involvedObject.name=stall").items
    assert any(e.reason == "ProgressDeadlineExceeded" and e.type == "Warning" for e in warnings)
    # Where the time went: the parts add up to the job's wall time, the stall's deadline among them.
    goodput = status["goodput"]
    parts = [goodput[f"{k}Seconds"] for k in ("queued", "productive", "restarting", "recomputing", "stalled",
                                              "suspended")]  # fmt: skip
    wall = parse_time(status["completionTime"]) - parse_time(job["metadata"]["creationTimestamp"])
    assert abs(sum(parts) - wall.total_seconds()) <= 1, (parts, wall)
    assert DEADLINE <= goodput["stalledSeconds"] <= DEADLINE + 6  # found at the first scrape past the deadline
    assert goodput["restartingSeconds"] > 0 and goodput["stepsLost"] > 0
    assert 0 < goodput["ratio"] < 1


def test_a_straggler_is_named_replaced_once_preferring_another_node_and_the_job_succeeds(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    policy = {"stragglerThreshold": 3, "stragglerWindowSeconds": 10, "stragglerPolicy": "Replace"}
    body = digits_job("slow", 3, 160, tmp_path / "ckpt", runPolicy=policy)
    command = body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"]
    command[command.index("--straggler") + 1] = "2:0.2"  # worker 2 sleeps 200 ms a step, not worker 0 50 ms
    create(custom, namespace, body)

    job = wait_condition(custom, namespace, "slow", "Straggler", timeout=240)
    message = (condition(job, "Straggler") or {})["message"]
    assert message.startswith("worker 2 (pod slow-worker-2 on node process-node) works"), message
    job = wait_condition(custom, namespace, "slow", "Succeeded", timeout=300)
    rank = rank_status(job)["worker-2"]
    assert (rank["straggles"], rank["restarts"], rank["avoidNode"]) == (1, 0, "process-node")
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0
    # The replacement preferred another node; the cluster has none, so it ran on the same one (preferred only).
    pod = core.read_namespaced_pod("slow-worker-2", namespace)
    preferred = pod.spec.affinity.node_affinity.preferred_during_scheduling_ignored_during_execution
    assert preferred[0].preference.match_expressions[0].values == ["process-node"]
    assert pod.metadata.annotations["ringleader.dev/attempt"] == "1"
    assert trainer_events(core, namespace, "slow-worker-0", "recover")  # its peers recovered in place
