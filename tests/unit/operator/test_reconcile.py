"""Reconcile decisions, table-style: restart policy x exit code, and whole-job transitions."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_operator.api import RestartPolicy, Role, TrainingJob
from ringleader_operator.builders import rank_labels
from ringleader_operator.conditions import Reason
from ringleader_operator.failures import Decision, Failure, Kind, backoff_seconds, classify, decide_restart
from ringleader_operator.reconcile import earlier_job_leftovers, plan

NOW = "2026-01-01T00:00:00Z"


E, EV, NL, DEL = Kind.EXIT, Kind.EVICTED, Kind.NODE_LOST, Kind.DELETED


@pytest.mark.parametrize(
    ("exit_code", "pod_reason", "disruption", "kind"),
    [
        (1, "Error", "", E),
        (137, "OOMKilled", "", E),
        (143, "Error", "EvictionByEvictionAPI", EV),  # SIGTERMed by an eviction: the eviction's doing
        (None, "Evicted", "", EV),  # the kubelet evicted it under node pressure
        (None, "", "PreemptionByScheduler", EV),
        (None, "", "TerminationByKubelet", EV),
        (None, "", "DeletionByTaintManager", NL),  # its node became unreachable
        (None, "", "DeletionByPodGC", NL),  # its node object was deleted
        (None, "NodeRestarted", "", NL),  # the process node restarted under it
        (None, "NodeLost", "", NL),
        (None, "UnexpectedAdmissionError", "", EV),  # failed without running: not the program's fault
        (None, "", "", DEL),
    ],
)
def test_classify(exit_code: int | None, pod_reason: str, disruption: str, kind: Kind) -> None:
    assert classify(exit_code, pod_reason, disruption).kind == kind


RESTART, FAIL = (Decision.RESTART, None), (Decision.FAIL, Reason.FAILED)
LIMIT = (Decision.FAIL, Reason.BACKOFF_LIMIT)
P = RestartPolicy


@pytest.mark.parametrize(
    ("policy", "failure", "restarts", "limit", "want"),
    [
        (P.NEVER, Failure(E, 1), 0, 3, FAIL),
        (P.NEVER, Failure(E, 137), 0, 3, FAIL),
        (P.NEVER, Failure(EV), 0, 3, RESTART),  # an eviction is no failure of the program
        (P.NEVER, Failure(NL), 0, 3, RESTART),
        (P.NEVER, Failure(NL), 3, 3, LIMIT),
        (P.ON_FAILURE, Failure(E, 1), 0, 3, RESTART),
        (P.ON_FAILURE, Failure(E, 1), 3, 3, LIMIT),
        (P.ON_FAILURE, Failure(DEL), 0, 3, RESTART),
        (P.ALWAYS, Failure(E, 2), 2, 3, RESTART),
        (P.ALWAYS, Failure(Kind.EXITED), 0, 3, RESTART),
        (P.EXIT_CODE, Failure(E, 137), 0, 3, RESTART),  # OOM kill / SIGKILL
        (P.EXIT_CODE, Failure(E, 143), 0, 3, RESTART),  # SIGTERM
        (P.EXIT_CODE, Failure(E, 200), 0, 3, RESTART),  # the trainer's rendezvous timeout
        (P.EXIT_CODE, Failure(E, 201), 0, 3, RESTART),  # the trainer lost a peer
        (P.EXIT_CODE, Failure(E, 1), 0, 3, FAIL),  # the program's own error
        (P.EXIT_CODE, Failure(E, 3), 0, 3, FAIL),  # the trainer's bad configuration
        (P.EXIT_CODE, Failure(E, 127), 0, 3, FAIL),
        (P.EXIT_CODE, Failure(EV), 0, 3, RESTART),  # evicted / lost: infrastructure
        (P.EXIT_CODE, Failure(E, 137), 3, 3, LIMIT),  # an OOM loop ends
        (P.EXIT_CODE, Failure(E, 1), 3, 3, FAIL),  # a user error says so, even past the limit
    ],
)
def test_decide_restart(
    policy: RestartPolicy, failure: Failure, restarts: int, limit: int, want: tuple[Decision, Reason | None]
) -> None:
    assert decide_restart(policy, failure, restarts, limit) == want


@pytest.mark.parametrize(
    ("rank_restarts", "base", "cap", "want"),
    [(0, 1, 60, 0), (1, 1, 60, 1), (2, 1, 60, 2), (3, 1, 60, 4), (7, 1, 60, 60), (500, 1, 60, 60), (3, 0, 60, 0),
     (2, 10, 15, 15)],
)  # fmt: skip
def test_backoff_seconds(rank_restarts: int, base: float, cap: float, want: float) -> None:
    assert backoff_seconds(rank_restarts, base, cap) == want


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
    role: Role,
    index: int,
    phase: str,
    exit_code: int | None = None,
    deleting: bool = False,
    ready: bool = True,
    attempt: int | None = 0,
    reason: str = "",
    disruption: str = "",
    deadline: str = NOW,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": str(ready and phase == "Running")}],
    }
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "trainer", "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}}}
        ]
    if reason:
        status["reason"] = reason
    if disruption:
        status["conditions"].append({"type": "DisruptionTarget", "status": "True", "reason": disruption})
    meta: dict[str, Any] = {"name": f"j-{role.value}-{index}", "labels": rank_labels("j", role, index)}
    if attempt is not None:
        meta["annotations"] = {"ringleader.dev/attempt": str(attempt)}
    if deleting:
        meta["deletionTimestamp"] = deadline
    return {"metadata": meta, "status": status}


def after(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}Z"


def again(p: Any, pods: list[dict[str, Any]], *, now: str = NOW, **spec: Any) -> Any:
    """The next round: the job as the last plan left its status."""
    return plan(job(status=p.status.model_dump(by_alias=True), **spec), pods, True, now)


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


def test_on_failure_restarts_the_rank_after_its_backoff_and_counts_it_once() -> None:
    w0 = pod(Role.WORKER, 0, "Running")
    p = plan(job(), [w0, pod(Role.WORKER, 1, "Failed", exit_code=1)], True, NOW)
    assert p.delete_pods == ["j-worker-1"] and p.create_pods == []
    assert p.status.phase == "Restarting" and conds(p)["Restarting"] == "True"
    restarting = next(c for c in p.status.conditions if c.type.value == "Restarting")
    assert restarting.reason == "RankRestarting"
    assert restarting.message == (
        "worker 1 (pod j-worker-1) failed with exit code 1; restarting it in 1 s "
        "(restart 1 of this rank, 1 of backoffLimit 3)"
    )
    assert p.events[1:] == [("Warning", "RankRestarting", restarting.message)]  # after JobCreated
    assert p.status.replica_statuses["worker"].restarts == 1
    rank = p.status.ranks["worker-1"]
    assert (rank.restarts, rank.last_exit_code, rank.restart_after) == (1, 1, after(2))  # 1 s, seen within a second
    assert p.requeue_after == 2
    # The operator stopped after writing the count and before deleting: the next round deletes, counts nothing.
    same = again(p, [w0, pod(Role.WORKER, 1, "Failed", exit_code=1)])
    assert same.delete_pods == ["j-worker-1"] and same.status.replica_statuses["worker"].restarts == 1
    assert same.events == []
    # The old pod is terminating: its name is still taken, so nothing is created yet.
    nxt = again(same, [w0, pod(Role.WORKER, 1, "Failed", exit_code=1, deleting=True)])
    assert nxt.create_pods == [] and nxt.status.replica_statuses["worker"].restarts == 1
    # Gone, but the back-off has not ended: wait.
    early = again(nxt, [w0])
    assert early.create_pods == [] and early.requeue_after == 2 and early.status.phase == "Restarting"
    # Then the rank is recreated under the same name, for its next attempt; once it runs, the job is Running.
    gone = again(early, [w0], now=after(2))
    assert [x["metadata"]["name"] for x in gone.create_pods] == ["j-worker-1"]
    assert gone.create_pods[0]["metadata"]["annotations"]["ringleader.dev/attempt"] == "1"
    running = again(gone, [w0, pod(Role.WORKER, 1, "Running", attempt=1)], now=after(3))
    assert running.status.phase == "Running" and conds(running) == {
        "Created": "True",
        "Running": "True",
        "Restarting": "False",
    }
    assert running.status.ranks["worker-1"].pod_seen and running.status.replica_statuses["worker"].restarts == 1


def test_backoff_doubles_for_the_same_rank() -> None:
    status = {"ranks": {"worker-1": {"restarts": 2, "podSeen": True}}, "replicaStatuses": {"worker": {"restarts": 2}}}
    p = plan(job(status=status), [pod(Role.WORKER, 1, "Failed", exit_code=137, attempt=2)], True, NOW)
    assert p.status.ranks["worker-1"].restart_after == after(5) and p.requeue_after == 5
    capped = job(status=status, runPolicy={"restartBackoff": {"baseSeconds": 10, "capSeconds": 15}})
    p = plan(capped, [pod(Role.WORKER, 1, "Failed", exit_code=137, attempt=2)], True, NOW)
    assert p.status.ranks["worker-1"].restart_after == after(16)


@pytest.mark.parametrize(
    ("disruption", "reason", "words"),
    [
        ("EvictionByEvictionAPI", "RankEvicted", "was evicted (EvictionByEvictionAPI)"),
        ("DeletionByTaintManager", "NodeLost", "was lost with its node (DeletionByTaintManager)"),
        ("", "PodDeleted", "was deleted"),
    ],
)
def test_a_pod_deleted_by_others_is_an_infrastructure_restart_even_under_never(
    disruption: str, reason: str, words: str
) -> None:
    spec: dict[str, Any] = {"workers": {"replicas": 2, "restartPolicy": "Never", "template": TEMPLATE}}
    running = plan(job(**spec), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True, NOW)
    w0 = pod(Role.WORKER, 0, "Running")
    evicted = pod(Role.WORKER, 1, "Running", deleting=True, disruption=disruption, deadline=after(30))
    p = again(running, [w0, evicted], **spec)
    assert p.status.phase == "Restarting" and p.delete_pods == [] and p.force_delete_pods == []
    assert p.events == [("Warning", reason, f"worker 1 (pod j-worker-1) {words}; restarting it in 1 s "
                                            "(restart 1 of this rank, 1 of backoffLimit 3)")]  # fmt: skip
    assert again(p, [w0, evicted], **spec).status.replica_statuses["worker"].restarts == 1  # counted once


def test_a_pod_stuck_terminating_on_a_lost_node_is_removed_after_its_grace() -> None:
    w0 = pod(Role.WORKER, 0, "Running")
    status = {"ranks": {"worker-1": {"restarts": 1}}, "replicaStatuses": {"worker": {"restarts": 1}}}
    stuck = pod(Role.WORKER, 1, "Running", deleting=True, disruption="DeletionByTaintManager", deadline=NOW)
    waiting = plan(job(status=status), [w0, stuck], True, after(29))
    assert waiting.force_delete_pods == [] and waiting.requeue_after == 1
    assert plan(job(status=status), [w0, stuck], True, after(30)).force_delete_pods == ["j-worker-1"]


def test_a_pod_that_vanished_unseen_by_the_operator_counts_as_deleted() -> None:
    running = plan(job(), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True, NOW)
    p = again(running, [pod(Role.WORKER, 0, "Running")])
    assert p.status.ranks["worker-1"].last_reason == "PodDeleted" and p.create_pods == []
    assert "worker 1 (pod j-worker-1) was deleted (pod disappeared)" in p.status.ranks["worker-1"].last_message


def test_a_pod_of_an_old_attempt_is_deleted_without_counting() -> None:
    status = {"ranks": {"worker-1": {"restarts": 2}}}
    p = plan(job(status=status), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running", attempt=1)], True, NOW)
    assert p.delete_pods == ["j-worker-1"] and p.status.ranks["worker-1"].restarts == 2
    assert not [e for e in p.events if e[0] == "Warning"]


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
    # Pods the operator deleted itself are no failures, however long they take to go.
    resumed = again(suspended, [pod(Role.WORKER, 0, "Running", deleting=True, deadline=after(30))])
    assert resumed.events == [] and resumed.status.ranks["worker-0"].restarts == 0
    assert [x["metadata"]["name"] for x in resumed.create_pods] == ["j-worker-1"]
    assert len(again(resumed, []).create_pods) == 2 and conds(resumed)["Suspended"] == "False"


def _owned(name: str, kind: str, uid: str | None) -> dict[str, Any]:
    owners = [] if uid is None else [{"kind": kind, "name": "j", "uid": uid, "controller": True}]
    return {"metadata": {"name": name, "ownerReferences": owners}}


@pytest.mark.parametrize(
    ("objects", "leftovers"),
    [
        ([_owned("j-worker-0", "TrainingJob", "new"), _owned("j", "TrainingJob", "new")], []),
        ([_owned("j-worker-0", "TrainingJob", "old"), _owned("j-worker-1", "TrainingJob", "new")], ["j-worker-0"]),
        ([_owned("j", "TrainingJob", "old")], ["j"]),  # the earlier job's Service
        ([_owned("j-worker-0", "ReplicaSet", "other"), _owned("j-worker-1", "TrainingJob", None)], []),  # not a job's
    ],
    ids=["ours", "an-earlier-pod", "an-earlier-service", "not-a-jobs"],
)
def test_objects_an_earlier_job_of_the_same_name_left_are_waited_for(
    objects: list[dict[str, Any]], leftovers: list[str]
) -> None:
    assert earlier_job_leftovers("new", objects) == leftovers
