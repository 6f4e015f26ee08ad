"""Stalls and stragglers on the dev cluster. A worker hung by the trainer's fault flag makes the job Stalled
(runPolicy.progressDeadlineSeconds), naming that worker and its node, within the deadline and one scrape; the
operator replaces it (not counted against backoffLimit), its peers recover in place, and the job succeeds. A
worker stopped by SIGSTOP (its page no longer answers) is named too. What is not a stall is left alone: a script
that serves no progress page (Stalled Unknown, ProgressUnavailable) and a start-up longer than the deadline both
succeed untouched. A worker slowed by `--straggler` is named in the Straggler condition
(runPolicy.stragglerThreshold) and, under stragglerPolicy Replace, recreated once preferring another node, and
the job succeeds."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_operator.observed import parse_time

from tests.support.cluster import wait_for
from tests.support.jobs import (
    condition,
    create,
    digits_job,
    get,
    rank_processes,
    rank_status,
    trainer_events,
    training_job,
    wait_condition,
)

pytestmark = pytest.mark.usefixtures("operator")

DEADLINE = 30  # seconds (start-up has its own deadline, 600 s by default)


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
    # The ranks' pages carry torch's flight recorder's numbers: worker 1 never entered the others' collective.
    assert "torch's flight recorder says it never entered collective" in stalled["message"], stalled

    job = wait_condition(custom, namespace, "stall", "Succeeded", timeout=300)
    status = job["status"]
    assert status["stalls"] == 1 and status["lastStallStep"] == 50
    rank = rank_status(job)["worker-1"]
    assert (rank["stalls"], rank["restarts"], rank["lastReason"]) == (1, 0, "RankStalled")
    assert status["replicaStatuses"]["worker"]["restarts"] == 0  # a stall is not counted against backoffLimit
    assert (condition(job, "Stalled") or {}).get("status") == "False"
    # Workers 0 and 2 lost worker 1 and healed its replacement in place; the replacement (attempt 1) did not hang.
    for pod in ("stall-worker-0", "stall-worker-2"):
        assert trainer_events(core, namespace, pod, "heal"), pod
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
    # The replacement continued from the survivors' state at the hung step: no step lost, none recomputed.
    assert goodput["restartingSeconds"] > 0 and goodput["stepsLost"] == 0 and goodput["recomputingSeconds"] == 0
    assert 0 < goodput["ratio"] < 1


def test_a_stopped_rank_is_named_within_the_deadline_and_replaced(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    """SIGSTOP on worker 1's processes once the job trains: its page takes the connection and sends nothing, which
    names it (a refused or unreachable page would not); it is replaced and the job succeeds."""
    deadline = 20
    body = digits_job("stopped", 3, 500, tmp_path / "ckpt", runPolicy={"progressDeadlineSeconds": deadline})
    create(custom, namespace, body)

    def training() -> bool:
        return (((get(custom, namespace, "stopped").get("status") or {}).get("progress") or {}).get("step") or 0) >= 100

    wait_for("stopped's step 100", training, timeout=240)
    pids = rank_processes(namespace, "stopped", "worker", 1)
    assert pids, "worker 1's processes"
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    stopped_at = time.time()
    job = wait_condition(custom, namespace, "stopped", "Stalled", timeout=deadline + 60)
    print(f"SIGSTOP to Stalled: {time.time() - stopped_at:.1f} s (deadline {deadline} s)")
    message = (condition(job, "Stalled") or {})["message"]
    assert "worker 1 (pod stopped-worker-1 on node process-node) did not answer for its metrics page" in message
    assert "no whole page within" in message, message
    job = wait_condition(custom, namespace, "stopped", "Succeeded", timeout=300)
    rank = rank_status(job)["worker-1"]
    assert (rank["stalls"], rank["restarts"]) == (1, 0) and job["status"]["stalls"] == 1


def test_neither_a_script_without_a_page_nor_a_long_start_up_is_a_stall(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, tmp_path: Path
) -> None:
    """progressDeadlineSeconds 10: a script that serves no metrics page runs 60 s, and a trainer waits 20 s before
    its first step with its page served (at step 0). Neither is Stalled or has a rank replaced; both succeed.
    The script's job says why its deadline is not acted on (Stalled Unknown, ProgressUnavailable) while it runs.
    The script runs well past the deadline: the operator says so about 16 s after creating the job on a quiet
    machine (the deadline counts from the first scrape, up to 5 s after the turn to Running), and a script that
    ran 25 s ended first, unsaid, on a loaded one."""
    policy = {"progressDeadlineSeconds": 10}
    create(custom, namespace, training_job("pageless", "import time; time.sleep(60)", workers=2, runPolicy=policy))
    slow = digits_job("slow-start", 2, 60, tmp_path / "ckpt", runPolicy=policy)
    slow["spec"]["workers"]["template"]["spec"]["containers"][0]["command"] += ["--start-delay", "20"]
    create(custom, namespace, slow)

    unknown = wait_condition(custom, namespace, "pageless", "Stalled", timeout=180, status="Unknown")
    stalled = condition(unknown, "Stalled") or {}
    assert stalled["reason"] == "ProgressUnavailable"
    assert "worker 0's step could not be read" in stalled["message"], stalled
    for name in ("pageless", "slow-start"):
        job = wait_condition(custom, namespace, name, "Succeeded", timeout=300)
        assert (job["status"].get("stalls") or 0) == 0, job["status"]
        ranks = rank_status(job)
        replaced = ("stalls", "restarts", "stops", "uncounted", "straggles")
        assert not any(r[k] for r in ranks.values() for k in replaced), ranks
        assert (condition(job, "Stalled") or {}).get("status", "False") == "False"  # success ends any doubt
        events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        assert not [e for e in events if e.reason == "ProgressDeadlineExceeded"], name
    assert trainer_events(core, namespace, "slow-start-worker-0", "done")


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
