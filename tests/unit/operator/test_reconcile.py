"""Reconcile decisions, table-style: restart policy x exit code, and whole-job transitions."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.kueue import QueueState
from ringleader_operator.observed import earlier_job_leftovers, foreign_pods_message, own_ranks
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan

from .builders import NOW, TEMPLATE, after, again, conds, job, pod


def test_new_job_creates_service_and_every_rank() -> None:
    p = plan(Reading(job(), [], False), NOW)
    assert p.create_service
    assert [x["metadata"]["name"] for x in p.create_pods] == ["j-worker-0", "j-worker-1"]
    assert p.status.phase == "Pending" and conds(p) == {"Created": "True"}
    assert p.status.start_time == NOW and p.status.workers == "0/2"
    assert p.events == [("Normal", "JobCreated", "TrainingJob j is created")]


def test_is_idempotent_for_the_same_observation() -> None:
    first = plan(Reading(job(), [], False), NOW)
    again = plan(Reading(job(status=first.status.model_dump(by_alias=True)), [], True), NOW)
    assert [x["metadata"]["name"] for x in again.create_pods] == ["j-worker-0", "j-worker-1"]
    assert not again.create_service and again.events == []


def test_all_running_sets_running_and_ready_counts() -> None:
    p = plan(Reading(job(), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True), NOW)
    assert p.status.phase == "Running" and conds(p)["Running"] == "True"
    assert p.create_pods == [] and p.delete_pods == []
    assert p.status.replica_statuses["worker"].ready == 2 and p.status.workers == "2/2"


def test_all_workers_succeeded_completes_and_cleans_running_parameter_servers() -> None:
    ps: dict[str, Any] = {"strategy": "parameter-server", "parameterServers": {"replicas": 1, "template": TEMPLATE}}
    pods = [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, "Succeeded"), pod(Role.PS, 0, "Running")]
    p = plan(Reading(job(**ps), pods, True), NOW)
    assert p.status.phase == "Succeeded" and conds(p)["Succeeded"] == "True"
    assert p.status.completion_time == NOW
    assert p.delete_pods == ["j-ps-0"]  # cleanPodPolicy Running (default)
    assert p.status.replica_statuses["worker"].succeeded == 2


@pytest.mark.parametrize("short", [True, False], ids=["with-a-coordinator", "without"])
def test_the_rounds_that_create_pods_naming_the_coordinator_make_it_and_the_round_a_job_ends_in_ends_it(
    short: bool,
) -> None:
    workers = {"replicas": 2, "minReplicas": 1} if short else {}
    started = plan(Reading(job(workers=workers), [], True), NOW)
    assert started.create_pods and started.ensure_coordinator is short and not started.end_coordinator
    running = again(started, [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], workers=workers)
    assert not running.create_pods and not running.ensure_coordinator  # nothing to create: nothing asked
    done = [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, "Succeeded")]
    ended = again(started, done, workers=workers)
    assert ended.status.phase == "Succeeded" and ended.end_coordinator is short
    assert not again(ended, done, workers=workers).end_coordinator  # once: the next round finds it ended


@pytest.mark.parametrize("ends", ["Succeeded", "Failed"])
def test_the_round_that_ends_a_kueue_job_asks_for_the_next_at_once(ends: str) -> None:
    """The round after the end marks Kueue's Workload Finished (its quota goes to the next job); no event may
    come for a job whose pods all ended. Asked only by the round that ends a job Kueue queues."""
    workers = {"replicas": 2, "template": TEMPLATE, "restartPolicy": "Never"}
    pods = [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, ends, exit_code=1 if ends == "Failed" else None)]
    admitted = QueueState(True, "admitted by Kueue's ClusterQueue q")
    p = plan(Reading(job(workers=workers), pods, True, queued=admitted), NOW)
    assert p.status.phase == ends and p.requeue_after == 0
    assert plan(Reading(job(workers=workers), pods, True), NOW).requeue_after is None  # not queued by Kueue
    ended = job(status=p.status.model_dump(by_alias=True), workers=workers)
    assert plan(Reading(ended, pods, True, queued=admitted), NOW).requeue_after is None  # ended before: nothing asked


def test_never_policy_fails_the_job_naming_rank_and_exit_code() -> None:
    spec = {"workers": {"replicas": 2, "restartPolicy": "Never", "template": TEMPLATE}}
    p = plan(
        Reading(job(**spec), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=3)], True), NOW
    )
    assert p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "RankFailed"
    assert failed.message == "worker 1 (pod j-worker-1) failed with exit code 3, class UserCode: exit code 3"
    assert p.delete_pods == ["j-worker-0"]  # the still-running rank is cleaned up
    assert ("Warning", "RankFailed", failed.message) in p.events


def test_on_failure_restarts_the_rank_after_its_backoff_and_counts_it_once() -> None:
    w0 = pod(Role.WORKER, 0, "Running")
    p = plan(Reading(job(), [w0, pod(Role.WORKER, 1, "Failed", exit_code=1)], True), NOW)
    assert p.delete_pods == ["j-worker-1"] and p.create_pods == []
    assert p.status.phase == "Restarting" and conds(p)["Restarting"] == "True"
    restarting = next(c for c in p.status.conditions if c.type.value == "Restarting")
    assert restarting.reason == "RankRestarting"
    assert restarting.message == (
        "worker 1 (pod j-worker-1) failed with exit code 1, class UserCode: exit code 1; restarting it in 1 s "
        "(restart 1 of this rank; UserCode 1 of backoffLimit 3)"
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
    p = plan(Reading(job(status=status), [pod(Role.WORKER, 1, "Failed", exit_code=137, attempt=2)], True), NOW)
    assert p.status.ranks["worker-1"].restart_after == after(5) and p.requeue_after == 5
    capped = job(status=status, runPolicy={"restartBackoff": {"baseSeconds": 10, "capSeconds": 15}})
    p = plan(Reading(capped, [pod(Role.WORKER, 1, "Failed", exit_code=137, attempt=2)], True), NOW)
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
    running = plan(Reading(job(**spec), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True), NOW)
    w0 = pod(Role.WORKER, 0, "Running")
    evicted = pod(Role.WORKER, 1, "Running", deleting=True, disruption=disruption, deadline=after(30))
    p = again(running, [w0, evicted], **spec)
    assert p.status.phase == "Restarting" and p.delete_pods == [] and p.force_delete_pods == []
    assert p.events == [("Warning", reason, f"worker 1 (pod j-worker-1) {words}, class Infrastructure; restarting "
                                            "it in 1 s (restart 1 of this rank; Infrastructure 1 of 20 in 3600 "
                                            "s)")]  # fmt: skip
    assert again(p, [w0, evicted], **spec).status.replica_statuses["worker"].restarts == 1  # counted once


def test_a_pod_stuck_terminating_on_a_lost_node_is_removed_after_its_grace() -> None:
    w0 = pod(Role.WORKER, 0, "Running")
    status = {"ranks": {"worker-1": {"restarts": 1}}, "replicaStatuses": {"worker": {"restarts": 1}}}
    stuck = pod(Role.WORKER, 1, "Running", deleting=True, disruption="DeletionByTaintManager", deadline=NOW)
    waiting = plan(Reading(job(status=status), [w0, stuck], True), after(29))
    assert waiting.force_delete_pods == [] and waiting.requeue_after == 1
    assert plan(Reading(job(status=status), [w0, stuck], True), after(30)).force_delete_pods == ["j-worker-1"]


def test_a_pod_that_vanished_unseen_by_the_operator_counts_as_deleted() -> None:
    running = plan(Reading(job(), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")], True), NOW)
    p = again(running, [pod(Role.WORKER, 0, "Running")])
    assert p.status.ranks["worker-1"].last_reason == "PodDeleted" and p.create_pods == []
    # names no rank: groups
    assert p.status.ranks["worker-1"].last_message == "was deleted (pod disappeared), class Infrastructure"
    assert any("worker 1 (pod j-worker-1) was deleted (pod disappeared)" in e.message for e in p.events)


def test_a_pod_of_an_old_attempt_is_deleted_without_counting() -> None:
    status = {"ranks": {"worker-1": {"restarts": 2}}}
    p = plan(
        Reading(job(status=status), [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running", attempt=1)], True),
        NOW,
    )
    assert p.delete_pods == ["j-worker-1"] and p.status.ranks["worker-1"].restarts == 2
    assert not [e for e in p.events if e[0] == "Warning"]


def test_backoff_limit_ends_restarts() -> None:
    status = {"replicaStatuses": {"worker": {"restarts": 3}}, "failures": {"UserCode": {"inWindow": 3}}}
    p = plan(
        Reading(job(status=status), [pod(Role.WORKER, 0, "Failed", exit_code=1), pod(Role.WORKER, 1, "Running")], True),
        NOW,
    )
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "BackoffLimitExceeded" and "backoffLimit 3 reached" in failed.message


def test_invalid_template_fails_with_invalid_spec_and_creates_nothing() -> None:
    j = job(workers={"replicas": 1, "template": {"spec": {"containers": []}}})
    p = plan(Reading(j, [], False), NOW)
    assert p.create_pods == [] and not p.create_service and p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type.value == "Failed")
    assert failed.reason == "InvalidSpec" and "spec.workers.template.spec.containers" in failed.message


def test_extra_ranks_are_deleted_and_unlabelled_pods_ignored() -> None:
    stray = {"metadata": {"name": "other", "labels": {"ringleader.dev/job-name": "j"}}, "status": {"phase": "Running"}}
    pods = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running"), pod(Role.WORKER, 2, "Running"), stray]
    assert plan(Reading(job(), pods, True), NOW).delete_pods == ["j-worker-2"]


def test_finished_job_stays_finished() -> None:
    done = plan(Reading(job(), [pod(Role.WORKER, 0, "Succeeded"), pod(Role.WORKER, 1, "Succeeded")], True), NOW).status
    later = plan(
        Reading(job(status=done.model_dump(by_alias=True)), [pod(Role.WORKER, 0, "Failed", exit_code=1)], True),
        "2026-01-02T00:00:00Z",
    )
    assert later.status.phase == "Succeeded" and later.create_pods == [] and later.events == []


def test_suspend_deletes_pods_and_resume_recreates() -> None:
    suspended = plan(Reading(job(runPolicy={"suspend": True}), [pod(Role.WORKER, 0, "Running")], True), NOW)
    assert suspended.delete_pods == ["j-worker-0"] and suspended.status.phase == "Suspended"
    # Pods the operator deleted itself are no failures, however long they take to go.
    resumed = again(suspended, [pod(Role.WORKER, 0, "Running", deleting=True, deadline=after(30))])
    assert resumed.events == [("Normal", "JobResumed", "the job is resumed: its pods are created again")]
    assert "worker-0" not in resumed.status.ranks or resumed.status.ranks["worker-0"].restarts == 0
    assert [x["metadata"]["name"] for x in resumed.create_pods] == ["j-worker-1"]
    assert len(again(resumed, []).create_pods) == 2 and conds(resumed)["Suspended"] == "False"


def test_suspend_restarts_the_deadline_clock_on_resume() -> None:
    policy = {"suspend": True, "activeDeadlineSeconds": 60}
    started = plan(Reading(job(runPolicy={"activeDeadlineSeconds": 60}), [], True), NOW)
    suspended = again(started, [], now=after(50), runPolicy=policy)
    assert suspended.status.start_time is None and suspended.requeue_after is None
    resumed = again(suspended, [], now=after(100), runPolicy={"activeDeadlineSeconds": 60})
    assert resumed.status.start_time == after(100) and resumed.requeue_after == 60
    assert resumed.status.phase == "Pending" and len(resumed.create_pods) == 2


RUNNING_PAIR = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Succeeded")]


@pytest.mark.parametrize(
    ("clean", "seconds", "phase", "deleted", "requeue"),
    [
        ("Running", 59, "Running", [], 1),  # not yet: a round is asked for when it runs out
        ("Running", 60, "Failed", ["j-worker-0"], None),
        ("None", 61, "Failed", ["j-worker-0"], None),  # past its deadline a job holds nothing, whatever the policy
        ("All", 90, "Failed", ["j-worker-0", "j-worker-1"], None),
    ],
)
def test_active_deadline_fails_the_job_and_stops_its_pods(
    clean: str, seconds: int, phase: str, deleted: list[str], requeue: float | None
) -> None:
    policy = {"activeDeadlineSeconds": 60, "cleanPodPolicy": clean}
    started = plan(Reading(job(runPolicy=policy), [], True), NOW)
    p = again(started, RUNNING_PAIR, now=after(seconds), runPolicy=policy)
    assert p.status.phase == phase and sorted(p.delete_pods) == deleted and p.requeue_after == requeue
    if phase == "Failed":
        failed = next(c for c in p.status.conditions if c.type.value == "Failed")
        assert failed.reason == "DeadlineExceeded" and "activeDeadlineSeconds (60 s)" in failed.message
        assert p.status.completion_time == after(seconds) and p.create_pods == []


@pytest.mark.parametrize(
    ("ending", "ttl", "seconds", "delete", "requeue"),
    [
        ("Succeeded", 30, 10, False, 20),
        ("Succeeded", 30, 30, True, None),
        ("Succeeded", 0, 0, True, None),
        ("Failed", 30, 45, True, None),  # a failed job has its completion time too
        ("Succeeded", None, 3000, False, None),  # no TTL: kept
    ],
)
def test_ttl_after_finished_deletes_the_job(
    ending: str, ttl: int | None, seconds: int, delete: bool, requeue: float | None
) -> None:
    policy = {"ttlSecondsAfterFinished": ttl} if ttl is not None else {}
    other = "Running" if ending == "Failed" else ending
    pods = [pod(Role.WORKER, 0, ending, exit_code=1 if ending == "Failed" else None), pod(Role.WORKER, 1, other)]
    done = plan(
        Reading(
            job(runPolicy=policy, workers={"replicas": 2, "template": TEMPLATE, "restartPolicy": "Never"}), pods, True
        ),
        NOW,
    )
    assert done.status.phase == ending and done.status.completion_time == NOW
    # The finishing round is written first; it asks for the round that deletes the job (no pod event may come).
    assert not done.delete_job and done.requeue_after == ttl
    later = again(done, [], now=after(seconds), runPolicy=policy)
    assert later.delete_job == delete and later.requeue_after == requeue


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


def _foreign(p: dict[str, Any], **meta: Any) -> dict[str, Any]:
    """`p` with its metadata changed: a pod that carries the job's labels without being its rank."""
    return {**p, "metadata": {**p["metadata"], **meta}}


OWNER = {"kind": "TrainingJob", "name": "j", "uid": "u", "controller": True}


@pytest.mark.parametrize(
    ("changes", "rank"),
    [
        ({}, True),
        ({"ownerReferences": []}, False),  # made by hand
        ({"ownerReferences": [{**OWNER, "uid": "other"}]}, False),  # another job's (a copy of its labels)
        ({"ownerReferences": [{**OWNER, "controller": False}]}, False),  # owned, but another controller's
        ({"ownerReferences": [{**OWNER, "kind": "ReplicaSet"}]}, False),
        ({"name": "j-worker-0-copy"}, False),  # controlled by the job, but not a rank's name
        ({"labels": {"ringleader.dev/job-name": "j"}}, False),  # no rank labels
    ],
    ids=["rank", "unowned", "other-uid", "not-controller", "other-kind", "other-name", "no-rank-labels"],
)
def test_a_pod_is_a_rank_only_when_the_job_controls_it_under_the_ranks_name(
    changes: dict[str, Any], rank: bool
) -> None:
    p = _foreign(pod(Role.WORKER, 0, "Running"), **changes)
    ranks, foreign = own_ranks(job(), [p])
    assert ([r.name for r in ranks], foreign) == ((["j-worker-0"], []) if rank else ([], [p["metadata"]["name"]]))


def test_unowned_pods_marked_succeeded_do_not_finish_the_job() -> None:
    fakes = [_foreign(pod(Role.WORKER, i, "Succeeded"), ownerReferences=[]) for i in range(2)]
    p = plan(Reading(job(), fakes, True), NOW)
    assert p.status.phase != "Succeeded" and p.status.completion_time is None
    assert sorted(x["metadata"]["name"] for x in p.create_pods) == ["j-worker-0", "j-worker-1"]  # its own ranks
    assert not p.delete_pods and p.foreign_pods == ["j-worker-0", "j-worker-1"]  # never deleted: not its own
    # Beside the job's own running ranks they change nothing either.
    ours = [pod(Role.WORKER, i, "Running") for i in range(2)]
    extra = _foreign(pod(Role.WORKER, 1, "Succeeded"), name="j-worker-1-x")
    assert again(p, [*ours, extra]).status.replica_statuses["worker"].succeeded == 0


def test_the_foreign_pods_message_names_a_few_and_counts_the_rest() -> None:
    assert foreign_pods_message(["a"]).endswith("ignored: a")
    many = foreign_pods_message([f"p{i}" for i in range(12)])
    assert many.startswith("12 pods carry") and many.endswith("ignored: p0, p1, p2, p3, p4 and 7 more")
