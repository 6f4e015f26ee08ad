"""Each rank's round, table-style: what the restart policy does with the state its pod is in."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import RankStatus, Role
from ringleader_operator.evidence import Said
from ringleader_operator.failures import Failure, Kind
from ringleader_operator.policies.restarts import count_failure, reconcile_ranks
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.round_state import Round

from ..builders import NOW, TEMPLATE, after, job, names, pod, round_of

W1 = "j-worker-1"


def one_rank(policy: str = "OnFailure", rank: dict[str, Any] | None = None, **spec: Any) -> Any:
    status = {"ranks": {"worker-0": {"podSeen": True}, "worker-1": rank or {}}}
    return job(status=status, workers={"replicas": 2, "restartPolicy": policy, "template": TEMPLATE}, **spec)


RUNNING0 = pod(Role.WORKER, 0, "Running")


@pytest.mark.parametrize(
    ("policy", "rank", "w1", "now", "want"),
    [
        # (restartPolicy, status.ranks[worker-1], worker-1's pod, now) -> (created, deleted, forced, requeue, phase)
        ("OnFailure", {}, None, NOW, ([W1], [], [], None, "")),  # no pod yet: made
        ("OnFailure", {"podSeen": True}, pod(Role.WORKER, 1, "Running"), NOW, ([], [], [], None, "")),
        ("OnFailure", {}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [W1], [], 2, "")),  # restarted
        ("Never", {}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [], [], None, "Failed")),
        ("OnFailure", {"restarts": 1}, pod(Role.WORKER, 1, "Failed", exit_code=1), NOW, ([], [W1], [], None, "")),
        ("OnFailure", {"restarts": 1, "restartAfter": after(2)}, None, NOW, ([], [], [], 2, "")),  # backing off
        ("OnFailure", {"restarts": 1, "restartAfter": after(2)}, None, after(2), ([W1], [], [], None, "")),
        ("OnFailure", {"podSeen": True}, None, NOW, ([], [], [], 2, "")),  # vanished unseen: counted
        ("Never", {"podSeen": True}, pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW), after(10),
         ([], [], [], 2, "")),  # deleted by someone else: infrastructure; stuck for 10 s of its 30
        ("OnFailure", {}, pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW), after(30),
         ([], [], [W1], None, "")),  # stuck on a lost node past its grace: removed for good
        # Its image not pulled after the kubelet's retry: counted (infrastructure) and made again, even under Never.
        ("Never", {"podSeen": True}, pod(Role.WORKER, 1, "Pending", waiting="ImagePullBackOff"), NOW,
         ([], [W1], [], 2, "")),
        ("OnFailure", {"podSeen": True}, pod(Role.WORKER, 1, "Pending", waiting="ErrImagePull"), NOW,
         ([], [], [], None, "")),  # the first pull failed: the kubelet tries again
    ],
    ids=["create", "running", "failed-restarts", "never-fails", "old-attempt", "backoff", "backoff-over",
         "vanished", "deleted-by-others", "stuck", "image-not-pulled", "first-pull-failed"],
)  # fmt: skip
def test_reconcile_ranks(
    policy: str, rank: dict[str, Any], w1: dict[str, Any] | None, now: str, want: tuple[Any, ...]
) -> None:
    r = round_of(one_rank(policy, rank), [RUNNING0, *([w1] if w1 else [])], now=now)
    reconcile_ranks(r)
    got = (names(r.plan.create_pods), r.plan.delete_pods, r.plan.force_delete_pods, r.plan.requeue_after)
    assert got == want[:4]
    assert (r.status.phase or "") == want[4]


def test_a_rank_whose_image_cannot_be_pulled_is_named_classed_and_counted() -> None:
    r = round_of(one_rank(), [RUNNING0, pod(Role.WORKER, 1, "Pending", waiting="ImagePullBackOff")])
    reconcile_ranks(r)
    event = r.plan.events[-1]
    assert event.reason == "RankNotStarted", event
    assert event.message.startswith(
        "worker 1 (pod j-worker-1) could not start its container (ImagePullBackOff: Back-off pulling image "
        '"registry/missing:1": not found), class Infrastructure; restarting it in 1 s'
    ), event.message
    assert r.status.failures["Infrastructure"].in_window == 1 and "UserCode" not in r.status.failures
    last = r.status.last_failure
    assert last is not None and (last.failure_class, last.rank) == ("Infrastructure", "worker-1")
    # A rule on the kubelet's reason fails the job at once instead.
    rules = [{"action": "FailJob", "onReasons": ["ImagePullBackOff"]}]
    j = job(status={"ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}}},
            workers={"replicas": 2, "template": TEMPLATE, "failureRules": rules})  # fmt: skip
    r = round_of(j, [RUNNING0, pod(Role.WORKER, 1, "Pending", waiting="ImagePullBackOff")])
    reconcile_ranks(r)
    assert r.failed and r.status.phase == "Failed"


def test_a_parameter_server_that_exits_under_always_is_restarted() -> None:
    ps: dict[str, Any] = {"strategy": "parameter-server", "parameterServers": {"replicas": 1, "restartPolicy": "Always",
                                                                "template": TEMPLATE}}  # fmt: skip
    r = round_of(job(**ps), [RUNNING0, pod(Role.WORKER, 1, "Running"), pod(Role.PS, 0, "Succeeded")])
    reconcile_ranks(r)
    assert r.plan.delete_pods == ["j-ps-0"] and r.restarts[Role.PS] == 1


def said(exception: str, message: str) -> Said:
    return Said(exception, message, ("train.py:190 in train",))


VALUE_ERROR = Failure(Kind.EXIT, 1, said=said("ValueError", "bad shape"))
RECENT, HOURS_AGO = "2025-12-31T23:30:00Z", "2025-12-31T21:00:00Z"


@pytest.mark.parametrize(
    ("policy", "failures", "failure", "want"),
    [
        # (runPolicy, status.failures so far, the failure) -> (restarted, event reason, a phrase of its message)
        ({}, {}, Failure(Kind.EXIT, 1),
         (True, "RankRestarting", "class UserCode: exit code 1; restarting it in 4 s (restart 1 of this rank; "
                                  "UserCode 1 of backoffLimit 3)")),
        ({}, {"UserCode": {"inWindow": 3}}, Failure(Kind.EXIT, 1),
         (False, "BackoffLimitExceeded", "class UserCode: exit code 1; backoffLimit 3 reached")),
        # The code's budget spent, a node's trouble is still retried: it has its own.
        ({}, {"UserCode": {"inWindow": 3}}, Failure(Kind.EVICTED), (True, "RankEvicted",
                                                                    "Infrastructure 1 of 20 in 3600 s")),
        ({}, {"Infrastructure": {"inWindow": 20, "windowStart": RECENT}}, Failure(Kind.NODE_LOST),
         (False, "FailureBudgetExceeded", "21 Infrastructure failures in 3600 s, failureBudgets.infrastructure.limit "
                                           "20")),
        ({}, {"Infrastructure": {"inWindow": 20, "windowStart": HOURS_AGO}}, Failure(Kind.NODE_LOST),
         (True, "NodeLost", "Infrastructure 1 of 20 in 3600 s")),  # its window has passed: counted anew
        ({"failureBudgets": {"infrastructure": {"limit": 0}}}, {}, Failure(Kind.NODE_LOST),
         (False, "FailureBudgetExceeded", "failureBudgets.infrastructure.limit 0")),
        ({"backoffLimit": 0}, {}, Failure(Kind.EXIT, 137, "OOMKilled", reason="OOMKilled"),
         (True, "RankRestarting", "class Resources: OOMKilled: out of memory at the container's limit")),
        ({}, {"Resources": {"inWindow": 3}}, Failure(Kind.EXIT, 137, "OOMKilled", reason="OOMKilled"),
         (False, "FailureBudgetExceeded", "4 Resources failures, failureBudgets.resources.limit 3")),
        # The same exception a third time in a row is not retried, though backoffLimit would allow it.
        ({"backoffLimit": 10}, {"UserCode": {"inWindow": 2, "lastError": "ValueError: bad shape", "sameErrors": 2}},
         VALUE_ERROR, (False, "FailureBudgetExceeded", "class UserCode: ValueError: bad shape (train.py:190 in train); "
                                                       "the same error 3 times in a row")),
        ({"backoffLimit": 10}, {"UserCode": {"inWindow": 2, "lastError": "ValueError: other", "sameErrors": 2}},
         VALUE_ERROR, (True, "RankRestarting", "UserCode 3 of backoffLimit 10")),
    ],
    ids=["code", "code-spent", "infra-own-budget", "infra-spent", "infra-window-passed", "infra-limit-0",
         "resources", "resources-spent", "same-error", "other-error"],
)  # fmt: skip
def test_count_failure(
    policy: dict[str, Any], failures: dict[str, Any], failure: Failure, want: tuple[bool, str, str]
) -> None:
    restarted, reason, says = want
    status = {"failures": failures}
    r = round_of(job(status=status, runPolicy={"restartBackoff": {"baseSeconds": 4}, **policy}))
    assert count_failure(r, Role.WORKER, 1, W1, failure) is restarted
    rank = r.status.ranks.get("worker-1", RankStatus())
    event = r.plan.events[-1]
    assert event.reason == reason and event.message.startswith(f"worker 1 (pod {W1})"), event
    assert says in event.message, event.message
    kind = next(k for k in ("UserCode", "Infrastructure", "Resources") if f", class {k}" in event.message)
    assert r.status.failures[kind].total == (failures.get(kind) or {}).get("total", 0) + 1
    last = r.status.last_failure
    assert last is not None and (last.failure_class, last.rank, last.pod) == (kind, "worker-1", W1)
    if restarted:
        # Back-off 4 s for a rank's first restart, plus the second `now`'s truncation may have cost.
        assert rank.restarts == 1 and rank.restart_after == after(5) and r.plan.requeue_after == 5
        assert r.restarting == [(reason, event.message)]
    else:
        assert r.failed and rank.restarts == 0


INCIDENT = {"inWindow": 1, "windowStart": "2025-12-31T23:59:50Z", "incidentStart": "2025-12-31T23:59:50Z",
            "incidentFailures": 1}  # fmt: skip
SAME_ERROR = {**INCIDENT, "lastError": "ValueError: bad shape", "sameErrors": 2}


@pytest.mark.parametrize(
    ("counted", "replaced", "failure", "want"),
    [
        # (status.failures[its class] so far, worker-1 last replaced, the failure) ->
        #   (inWindow, total, incidentFailures, a phrase of the message)
        (INCIDENT, None, Failure(Kind.NODE_LOST, at="2025-12-31T23:59:55Z"),
         (1, 1, 2, "Infrastructure 1 of 20 in 3600 s, failure 2 of one incident")),  # 5 s after: the same node
        (INCIDENT, None, Failure(Kind.NODE_LOST, at="2025-12-31T23:59:45Z"),
         (1, 1, 2, "failure 2 of one incident")),  # ended 5 s before the incident's first, seen later
        (INCIDENT, None, Failure(Kind.NODE_LOST, at="2026-01-01T00:00:20Z"),
         (2, 1, 1, "Infrastructure 2 of 20 in 3600 s)")),  # 30 s after: a new incident
        (INCIDENT, "2025-12-31T23:59:52Z", Failure(Kind.NODE_LOST, at="2025-12-31T23:59:58Z"),
         (2, 1, 1, "Infrastructure 2 of 20")),  # its rank failed in the incident already: a crash loop counts
        (INCIDENT, "2025-12-31T23:58:00Z", Failure(Kind.NODE_LOST, at="2025-12-31T23:59:58Z"),
         (1, 1, 2, "failure 2 of one incident")),  # replaced before the incident began: joins it
        # Every rank raising the same error at one step is one incident: not the same error twice more.
        ({**SAME_ERROR, "inWindow": 2}, None, VALUE_ERROR, (2, 1, 2, "UserCode 2 of backoffLimit 3, failure 2")),
        ({**SAME_ERROR, "inWindow": 2, "incidentStart": "2025-12-31T23:58:00Z"}, None, VALUE_ERROR,
         (None, None, None, "the same error 3 times in a row")),  # a third incident of it: not retried
    ],
    ids=["joins", "joins-earlier", "new-incident", "rank-again", "replaced-before", "same-error-joins",
         "same-error-third-incident"],
)  # fmt: skip
def test_failures_of_one_incident_count_once(
    counted: dict[str, Any], replaced: str | None, failure: Failure, want: tuple[Any, ...]
) -> None:
    """Budgets count incidents: the failures of ranks that ended within 30 s of an incident's first count once
    (a node lost with all its ranks), unless a rank fails again (a crash loop is counted every time)."""
    kind = "UserCode" if failure.kind == Kind.EXIT else "Infrastructure"
    if failure.kind == Kind.EXIT:
        failure = Failure(Kind.EXIT, 1, said=failure.said, at="2025-12-31T23:59:53Z")
    rank = {"podSeen": True, **({"lastReplaced": replaced} if replaced else {})}
    r = round_of(job(status={"failures": {kind: counted}, "ranks": {"worker-1": rank}}))
    restarted = count_failure(r, Role.WORKER, 1, W1, failure)
    in_window, total, in_incident, says = want
    assert says in r.plan.events[-1].message, r.plan.events[-1].message
    if in_window is None:
        assert not restarted and r.failed
        return
    after = r.status.failures[kind]
    assert restarted and (after.in_window, after.total, after.incident_failures) == (in_window, total, in_incident)


@pytest.mark.parametrize(
    ("last", "at", "named"),
    [
        (None, "2025-12-31T23:59:00Z", "worker-1"),
        ("2025-12-31T23:58:50Z", "2025-12-31T23:59:00Z", "worker-0"),  # 10 s later: the same incident
        ("2025-12-31T23:59:10Z", "2025-12-31T23:59:00Z", "worker-1"),  # it ended first, seen later
        ("2025-12-31T23:58:00Z", "2025-12-31T23:59:00Z", "worker-1"),  # a minute later: a new incident
        ("2026-01-01T00:10:00Z", "2025-12-31T23:59:00Z", "worker-0"),  # long before the one named: an old one
    ],
    ids=["first", "same-incident", "earlier", "new-incident", "older"],
)  # fmt: skip
def test_the_first_failure_of_an_incident_is_named(last: str | None, at: str, named: str) -> None:
    status: dict[str, Any] = {}
    if last is not None:
        status["lastFailure"] = {"class": "Infrastructure", "rank": "worker-0", "pod": "j-worker-0", "time": last}
    r = round_of(job(status=status))
    count_failure(r, Role.WORKER, 1, W1, Failure(Kind.NODE_LOST, node="n2", at=at))
    assert r.status.last_failure is not None and r.status.last_failure.rank == named
    if named == "worker-1":
        assert (r.status.last_failure.node, r.status.last_failure.time) == ("n2", at)


CHECKPOINTED: dict[str, Any] = {"checkpoint": {"intervalSteps": 100}}
EVICTED = "EvictionByEvictionAPI"


def going(
    phase: str = "Running", exit_code: int | None = None, attempt: int = 0, disruption: str = EVICTED
) -> dict[str, Any]:
    """Worker 1 evicted (its grace runs to after(30)), as the watch shows it: still running, or ended."""
    return pod(Role.WORKER, 1, phase, exit_code=exit_code, deleting=True, deadline=after(30), disruption=disruption,
               attempt=attempt)  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "w1", "gone", "now", "want"),
    [
        # (job spec, worker-1's pod, its last state once deleted, now) -> (restarts, stops, requeue, event reason)
        ({}, going(), None, NOW, (1, 0, 2, "RankEvicted")),  # no checkpoint: nothing to wait for, counted at once
        (CHECKPOINTED, going(), None, NOW, (0, 0, 30, None)),  # it may be saving: wait for its end or its grace
        (CHECKPOINTED, going("Failed", 202), None, NOW, (0, 1, 60, "RankStopped")),  # saved, stopped (60: stuck?)
        (CHECKPOINTED, going("Failed", 143), None, NOW, (1, 0, 2, "RankEvicted")),  # ended without a save
        (CHECKPOINTED, going(), None, after(30), (1, 0, 2, "RankEvicted")),  # still running past its grace
        (CHECKPOINTED, going(disruption="DeletionByTaintManager"), None, NOW, (1, 0, 2, "NodeLost")),  # no save
        (CHECKPOINTED, None, going("Failed", 202), NOW, (0, 1, None, "RankStopped")),  # gone; its last state
        (CHECKPOINTED, None, going("Failed", 202, attempt=-1), NOW, (1, 0, 2, "PodDeleted")),  # an older pod's
        (CHECKPOINTED, None, None, NOW, (1, 0, 2, "PodDeleted")),  # gone, nothing known of its end
        (CHECKPOINTED, pod(Role.WORKER, 1, "Failed", exit_code=202), None, NOW, (0, 1, None, "RankStopped")),
    ],
    ids=["unchecked", "saving", "stopped", "killed", "past-grace", "node-lost", "gone-stopped", "gone-older",
         "vanished", "stopped-in-place"],
)  # fmt: skip
def test_a_rank_stopped_on_request_is_recreated_and_not_counted(
    spec: dict[str, Any], w1: dict[str, Any] | None, gone: dict[str, Any] | None, now: str, want: tuple[Any, ...]
) -> None:
    j = one_rank(rank={"podSeen": True}, **spec)
    r = Round.open(j, [RUNNING0, *([w1] if w1 else [])], now, [gone] if gone else None)
    r.index_ranks([(Role.WORKER, 0), (Role.WORKER, 1)])
    reconcile_ranks(r)
    rank = r.status.ranks["worker-1"]
    requeue = None if r.plan.requeue_after is None else round(r.plan.requeue_after)
    reason = r.plan.events[-1].reason if r.plan.events else None
    assert (rank.restarts, rank.stops, requeue, reason) == want
    assert r.restarts[Role.WORKER] == want[0]  # counted restarts
    if want[1]:
        assert rank.attempt == 1 and not rank.pod_seen and rank.restart_after is None
        assert "not counted against any failure budget" in r.plan.events[-1].message


def test_after_a_stop_the_replacement_is_the_next_attempt_and_the_stopped_pod_is_not_counted_again() -> None:
    j = one_rank(rank={"stops": 1}, **CHECKPOINTED)
    r = round_of(j, [RUNNING0, pod(Role.WORKER, 1, "Failed", exit_code=202, attempt=0)])
    reconcile_ranks(r)
    assert r.plan.delete_pods == [W1] and not r.plan.events  # the stopped pod of attempt 0: cleared, uncounted
    r = round_of(j, [RUNNING0])
    reconcile_ranks(r)
    assert [p["metadata"]["annotations"]["ringleader.dev/attempt"] for p in r.plan.create_pods] == ["1"]


def test_a_failure_rule_restarting_the_gang_recreates_every_rank_and_counts_once() -> None:
    gang = {"action": "RestartGang", "onExitCodes": {"operator": "In", "values": [201]}}
    workers = {"replicas": 3, "template": TEMPLATE, "failureRules": [gang]}
    status = {"ranks": {f"worker-{i}": {"podSeen": True} for i in range(3)}}
    pods = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=201),
            pod(Role.WORKER, 2, "Running")]  # fmt: skip
    r = round_of(job(status=status, workers=workers), pods)
    reconcile_ranks(r)
    assert sorted(r.plan.delete_pods) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    ranks = r.status.ranks
    assert [(ranks[f"worker-{i}"].restarts, ranks[f"worker-{i}"].uncounted) for i in range(3)] == [(0, 1), (1, 0),
                                                                                                   (0, 1)]  # fmt: skip
    assert r.restarts[Role.WORKER] == 1
    assert (
        "spec.workers.failureRules[0] (RestartGang) matched; restarting it, and every other rank with it"
        in (r.restarting[0][1])
    )


def test_an_ignored_failure_recreates_the_rank_after_a_back_off_and_counts_nothing() -> None:
    ignore = {"action": "Ignore", "onReasons": ["Evicted"]}
    status = {"ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}}}
    j = job(status=status, workers={"replicas": 2, "template": TEMPLATE, "failureRules": [ignore]})
    r = round_of(j, [RUNNING0, pod(Role.WORKER, 1, "Failed", reason="Evicted")])
    reconcile_ranks(r)
    rank = r.status.ranks["worker-1"]
    assert (rank.restarts, rank.uncounted, rank.attempt, r.restarts[Role.WORKER]) == (0, 1, 1, 0)
    assert r.plan.delete_pods == [W1] and r.plan.requeue_after == 2  # the back-off of a first recreation


def _failed_with_output(output: str) -> dict[str, Any]:
    failed = pod(Role.WORKER, 1, "Failed", exit_code=1)
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = output
    return failed


@pytest.mark.parametrize("policy", ["OnFailure", "Never"])
def test_a_failed_ranks_last_lines_are_kept_in_an_event(policy: str) -> None:
    """Its termination message (the kubelet's FallbackToLogsOnError: the end of its log) goes into a RankOutput
    event before the pod is deleted, whether the rank is restarted or the job fails."""
    r = round_of(one_rank(policy), [RUNNING0, _failed_with_output("step 10\nTraceback (most recent call last):\n"
                                                                  "ValueError: bad lr\n")])  # fmt: skip
    reconcile_ranks(r)
    outputs = [e for e in r.plan.events if e.reason == "RankOutput"]
    assert [(e.type, e.message) for e in outputs] == [("Warning", (
        "worker 1 (pod j-worker-1) attempt 0 ended; its last lines:\n"
        "step 10\nTraceback (most recent call last):\nValueError: bad lr"
    ))]  # fmt: skip


def test_a_long_output_is_cut_to_whole_lines_that_fit_an_event() -> None:
    lines = [f"line {i:04d} " + "x" * 40 for i in range(200)]
    r = round_of(one_rank(), [RUNNING0, _failed_with_output("\n".join(lines))])
    reconcile_ranks(r)
    (event,) = [e for e in r.plan.events if e.reason == "RankOutput"]
    _, *kept = event.message.split("\n")
    assert len(event.message) <= 1000
    assert kept == lines[-len(kept) :] and len(kept) > 10  # whole lines, the newest


def test_no_output_no_event() -> None:
    r = round_of(one_rank(), [RUNNING0, pod(Role.WORKER, 1, "Failed", exit_code=1)])
    reconcile_ranks(r)
    assert [e for e in r.plan.events if e.reason == "RankOutput"] == []


ESCALATION = {"escalation": {"rankRestarts": 2, "gangRestarts": 1, "windowSeconds": 600}}


@pytest.mark.parametrize(
    ("so_far", "want"),
    [
        # (status.escalation so far) -> (phase, pods deleted, the message's phrase)
        (None, ("Restarting", ["j-worker-1"], "restarting it in 1 s")),
        ({"inWindow": 1, "windowStart": "2025-12-31T23:55:00Z"}, ("Restarting", ["j-worker-1"], "restarting it in")),
        ({"inWindow": 2, "windowStart": "2025-12-31T23:55:00Z"},
         ("Restarting", ["j-worker-0", "j-worker-1"], "and every other rank with it, in 1 s (failure 3 in 600 s, "
                                                      "past runPolicy.escalation.rankRestarts 2; restart 1")),
        ({"inWindow": 3, "windowStart": "2025-12-31T23:55:00Z"},
         ("Failed", ["j-worker-0"], "failure 4 in 600 s, past runPolicy.escalation's 3 restarts (rank and gang)")),
        ({"inWindow": 3, "windowStart": "2025-12-31T23:00:00Z"}, ("Restarting", ["j-worker-1"], "restarting it in")),
        # Within 30 s of the incident that took the count to 2 (another rank's): the same incident, the rank alone.
        ({"inWindow": 2, "windowStart": "2025-12-31T23:55:00Z", "incidentStart": "2025-12-31T23:59:50Z"},
         ("Restarting", ["j-worker-1"], "restarting it in 1 s (restart 1 of this rank")),
    ],
    ids=["first", "second", "gang", "fail", "window-passed", "same-incident"],
)  # fmt: skip
def test_escalation_restarts_the_rank_then_the_gang_then_fails_the_job(
    so_far: dict[str, Any] | None, want: tuple[str, list[str], str]
) -> None:
    status: dict[str, Any] = {"escalation": so_far} if so_far else {}
    failed = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Failed", exit_code=1)]
    j = job(status={**status, "ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}}},
            runPolicy={"backoffLimit": 10, **ESCALATION})  # fmt: skip
    p = plan(Reading(j, failed, True), NOW)
    phase, deleted, says = want
    message = next(c.message for c in p.status.conditions if c.type.value in ("Restarting", "Failed") and
                   c.status == "True")  # fmt: skip
    assert (p.status.phase, sorted(p.delete_pods)) == (phase, deleted), message
    assert says in message, message
    if phase == "Failed":
        assert next(c.reason for c in p.status.conditions if c.type.value == "Failed") == "EscalationExhausted"
    assert p.status.escalation is not None and p.status.escalation.total == 1
