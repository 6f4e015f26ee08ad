"""Reconcile decisions, table-style: restart policy x exit code, and whole-job transitions."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.api import RestartPolicy, Role, TrainingJob
from ringleader_operator.builders import rank_labels
from ringleader_operator.conditions import Reason
from ringleader_operator.reconcile import Decision, decide_restart, plan

NOW = "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("policy", "code", "restarts", "limit", "want"),
    [
        (RestartPolicy.NEVER, 1, 0, 3, (Decision.FAIL, Reason.FAILED)),
        (RestartPolicy.NEVER, 137, 0, 3, (Decision.FAIL, Reason.FAILED)),
        (RestartPolicy.ON_FAILURE, 1, 0, 3, (Decision.RESTART, None)),
        (RestartPolicy.ON_FAILURE, 1, 3, 3, (Decision.FAIL, Reason.BACKOFF_LIMIT)),
        (RestartPolicy.ALWAYS, 2, 2, 3, (Decision.RESTART, None)),
        (RestartPolicy.EXIT_CODE, 137, 0, 3, (Decision.RESTART, None)),  # OOM kill / SIGKILL
        (RestartPolicy.EXIT_CODE, 143, 0, 3, (Decision.RESTART, None)),  # SIGTERM
        (RestartPolicy.EXIT_CODE, 1, 0, 3, (Decision.FAIL, Reason.FAILED)),  # the program's own error
        (RestartPolicy.EXIT_CODE, 127, 0, 3, (Decision.FAIL, Reason.FAILED)),
        (RestartPolicy.EXIT_CODE, None, 0, 3, (Decision.RESTART, None)),  # evicted / lost: infrastructure
        (RestartPolicy.EXIT_CODE, 137, 3, 3, (Decision.FAIL, Reason.BACKOFF_LIMIT)),  # an OOM loop ends
    ],
)
def test_decide_restart(
    policy: RestartPolicy, code: int | None, restarts: int, limit: int, want: tuple[Decision, Reason | None]
) -> None:
    assert decide_restart(policy, code, restarts, limit) == want


TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "t", "command": ["python", "t.py"]}]}}


def job(status: dict[str, Any] | None = None, **spec: Any) -> TrainingJob:
    body: dict[str, Any] = {"workers": {"replicas": 2, "template": TEMPLATE}, **spec}
    return TrainingJob.model_validate(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u", "generation": 1},
            "spec": body,
            "status": status or {},
        }
    )


def pod(
    role: Role, index: int, phase: str, exit_code: int | None = None, deleting: bool = False, ready: bool = True
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": str(ready and phase == "Running")}],
    }
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "trainer", "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}
        ]
    meta: dict[str, Any] = {"name": f"j-{role.value}-{index}", "labels": rank_labels("j", role, index)}
    if deleting:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "status": status}


def conds(p: Any) -> dict[str, str]:
    return {c.type.value: c.status for c in p.status.conditions}


def test_new_job_creates_service_and_every_rank() -> None:
    p = plan(job(), [], service_exists=False, now=NOW)
    assert p.create_service
    assert [x["metadata"]["name"] for x in p.create_pods] == ["j-worker-0", "j-worker-1"]
    assert p.status.phase == "Pending" and conds(p) == {"Created": "True"}
    assert p.status.start_time == NOW and p.status.workers == "0/2"
    assert p.events == [("Normal", "JobCreated", "TrainingJob j is created")]


def test_is_idempotent_for_the_same_observation() -> None:
    first = plan(job(), [], service_exists=False, now=NOW)
    again = plan(job(status=first.status.model_dump(by_alias=True)), [], service_exists=True, now=NOW)
    assert [x["metadata"]["name"] for x in again.create_pods] == ["j-worker-0", "j-worker-1"]
    assert not again.create_service and again.events == []


def test_all_running_sets_running_and_ready_counts() -> None:
    p = plan(job(), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True, NOW)
    assert p.status.phase == "Running" and conds(p)["Running"] == "True"
    assert p.create_pods == [] and p.delete_pods == []
    assert p.status.replica_statuses["worker"].ready == 2 and p.status.workers == "2/2"


def test_all_workers_succeeded_completes_and_cleans_running_parameter_servers() -> None:
    ps: dict[str, Any] = {"strategy": "parameter-server", "parameterServers": {"replicas": 1, "template": TEMPLATE}}
    pods = [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, "Succeeded"), pod(Role.PS, 0, "Running")]
    p = plan(job(**ps), pods, True, NOW)
    assert p.status.phase == "Succeeded" and conds(p)["Succeeded"] == "True"
    assert p.status.completion_time == NOW
    assert p.delete_pods == ["j-ps-0"]  # cleanPodPolicy Running (default)
    assert p.status.replica_statuses["worker"].succeeded == 2


def test_never_policy_fails_the_job_naming_rank_and_exit_code() -> None:
    spec = {"workers": {"replicas": 2, "restartPolicy": "Never", "template": TEMPLATE}}
    p = plan(job(**spec), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=3)], True, NOW)
    assert p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "RankFailed" and failed.message == "worker 1 (pod j-worker-1) failed with exit code 3"
    assert p.delete_pods == ["j-worker-0"]  # the still-running rank is cleaned up
    assert ("Warning", "RankFailed", failed.message) in p.events


def test_on_failure_restarts_the_rank_and_counts_it() -> None:
    p = plan(job(), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=1)], True, NOW)
    assert p.delete_pods == ["j-worker-1"] and p.create_pods == []
    assert p.status.phase == "Restarting" and conds(p)["Restarting"] == "True"
    assert p.status.replica_statuses["worker"].restarts == 1
    # Next round: the old pod is terminating: its name is still taken, so nothing is created yet.
    nxt = plan(
        job(status=p.status.model_dump(by_alias=True)),
        [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=1, deleting=True)],
        True,
        NOW,
    )
    assert nxt.create_pods == [] and nxt.status.replica_statuses["worker"].restarts == 1
    # Then it is gone: the rank is recreated under the same name.
    gone = plan(job(status=nxt.status.model_dump(by_alias=True)), [pod(Role.WORKER, 0, "Running")], True, NOW)
    assert [x["metadata"]["name"] for x in gone.create_pods] == ["j-worker-1"]


def test_backoff_limit_ends_restarts() -> None:
    status = {"replicaStatuses": {"worker": {"restarts": 3}}}
    p = plan(
        job(status=status), [pod(Role.WORKER, 0, "Failed", exit_code=137), pod(Role.WORKER, 1, "Running")], True, NOW
    )
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "BackoffLimitExceeded" and "backoffLimit 3 reached" in failed.message


def test_invalid_template_fails_with_invalid_spec_and_creates_nothing() -> None:
    j = job(workers={"replicas": 1, "template": {"spec": {"containers": []}}})
    p = plan(j, [], False, NOW)
    assert p.create_pods == [] and not p.create_service and p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "InvalidSpec" and "spec.workers.template.spec.containers" in failed.message


def test_extra_ranks_are_deleted_and_unlabelled_pods_ignored() -> None:
    stray = {"metadata": {"name": "other", "labels": {"ringleader.dev/job-name": "j"}}, "status": {"phase": "Running"}}
    pods = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running"), pod(Role.WORKER, 2, "Running"), stray]
    assert plan(job(), pods, True, NOW).delete_pods == ["j-worker-2"]


def test_finished_job_stays_finished() -> None:
    done = plan(job(), [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, "Succeeded")], True, NOW).status
    later = plan(
        job(status=done.model_dump(by_alias=True)),
        [pod(Role.WORKER, 0, "Failed", exit_code=1)],
        True,
        "2026-01-02T00:00:00Z",
    )
    assert later.status.phase == "Succeeded" and later.create_pods == [] and later.events == []


def test_suspend_deletes_pods_and_resume_recreates() -> None:
    suspended = plan(job(runPolicy={"suspend": True}), [pod(Role.WORKER, 0, "Running")], True, NOW)
    assert suspended.delete_pods == ["j-worker-0"] and suspended.status.phase == "Suspended"
    resumed = plan(job(status=suspended.status.model_dump(by_alias=True)), [], True, NOW)
    assert len(resumed.create_pods) == 2 and conds(resumed)["Suspended"] == "False"
