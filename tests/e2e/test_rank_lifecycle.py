"""A rank's life in a real container: the kernel's OOM killer and the job's status, a rank killed inside its
container and replaced, `kubectl logs` and `kubectl exec` on a rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster.layout import Layout

from tests.support.cluster import kubectl, logs, wait_for
from tests.support.jobs import condition, create, pods_of

from .helpers import KILL_TRAINING_PROCESS, diagnosis, is_true, trainer_job, wait_finished

pytestmark = pytest.mark.usefixtures("operator")


def test_a_rank_over_its_memory_limit_is_oom_killed_and_a_rule_fails_the_job_at_once(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str
) -> None:
    ns = restricted_namespace
    # 64 MiB does not hold torch's import: the kernel kills the rank. Under ExitCode 137 is retried, but the
    # role's rule `OOMKilled -> FailJob` comes first: the job fails at the first kill, nothing restarted.
    body = trainer_job("oom", "allreduce", "--steps", "20", workers=1, memory="64Mi", runPolicy={"backoffLimit": 3})
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    body["spec"]["workers"]["failureRules"] = [{"action": "FailJob", "onReasons": ["OOMKilled"]}]
    create(custom, ns, body)
    job = wait_finished(custom, ns, "oom", timeout=180)
    failed = condition(job, "Failed") or {}
    assert is_true(job, "Failed") and failed.get("reason") == "FailureRule", diagnosis(core, ns, job)
    assert "exit code 137 (OOMKilled); spec.workers.failureRules[0] (FailJob) matched" in failed["message"], failed
    assert job["status"]["replicaStatuses"]["worker"]["restarts"] == 0
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=oom").items
    assert any("(OOMKilled)" in (e.message or "") and e.reason == "FailureRule" for e in events), [
        (e.reason, e.message) for e in events
    ]


def test_a_rank_killed_inside_its_container_is_replaced_and_logs_and_exec_work(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str, layout: Layout,
    kubeconfig: Path,
) -> None:  # fmt: skip
    ns = restricted_namespace
    body = trainer_job("kill", "allreduce", "--steps", "300", "--straggler", "0:0.05", workers=3)
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    create(custom, ns, body)

    def stepping() -> bool:
        try:
            out = kubectl(layout, kubeconfig, "logs", "-n", ns, "kill-worker-1", "-c", "trainer", check=False).stdout
        except AssertionError:
            return False
        return any(json.loads(line).get("step", 0) >= 40 for line in out.splitlines() if line.startswith("{"))

    wait_for("worker 1 past step 40 (kubectl logs)", stepping, timeout=120)
    victim = next(p for p in pods_of(core, ns, "kill") if p.metadata.name == "kill-worker-1")
    out = kubectl(layout, kubeconfig, "exec", "-n", ns, "kill-worker-1", "-c", "trainer", "--",
                  "python", "-c", KILL_TRAINING_PROCESS).stdout  # fmt: skip
    assert out.startswith("killed [") and out.strip() != "killed []", out
    wait_for(
        "a new pod for worker 1",
        lambda: any(p.metadata.name == "kill-worker-1" and p.metadata.uid != victim.metadata.uid
                    for p in pods_of(core, ns, "kill")),
        timeout=60,
    )  # fmt: skip
    job = wait_finished(custom, ns, "kill", timeout=300)
    assert is_true(job, "Succeeded"), diagnosis(core, ns, job)
    restarts = {role: s.get("restarts", 0) for role, s in job["status"]["replicaStatuses"].items()}
    assert sum(restarts.values()) == 1, restarts
    assert '"event": "recover"' in logs(core, ns, "kill-worker-0", "trainer")
    # the supervisor, the container's PID 1, ended as its SIGKILLed training process did: 137, retried
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=kill").items
    assert any(e.reason == "RankRestarting" and "exit code 137" in (e.message or "") for e in events), [
        (e.reason, e.message) for e in events
    ]
