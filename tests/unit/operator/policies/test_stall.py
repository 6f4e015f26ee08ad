"""What a round does with a stall the scraper found (runPolicy.progressDeadlineSeconds, onStall, stallLimit)."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.reading import Reading
from ringleader_operator.reconcile import plan
from ringleader_operator.stalls import Culprit, Stall, Unavailable

from ..builders import NOW, conds, job, pod

RUNNING_SINCE = "2025-12-31T23:50:00Z"
PODS = [pod(Role.WORKER, 0, "Running"), pod(Role.WORKER, 1, "Running")]
W1 = Culprit("j-worker-1", Role.WORKER, 1, "n2", "worker 1 (pod j-worker-1 on node n2) stopped first: ...")


def running(stalls: int = 0, **status: Any) -> dict[str, Any]:
    """The status of a job Running since RUNNING_SINCE with both workers seen, `stalls` stalls so far."""
    return {
        "phase": "Running",
        "startTime": RUNNING_SINCE,
        "conditions": [{"type": "Running", "status": "True", "reason": "JobRunning",
                        "lastTransitionTime": RUNNING_SINCE}],
        "ranks": {"worker-0": {"podSeen": True}, "worker-1": {"podSeen": True}},
        "stalls": stalls,
        **status,
    }  # fmt: skip


def stall(culprit: Culprit | None = W1, running_since: str = RUNNING_SINCE) -> Stall:
    return Stall(120, 65.0, running_since, culprit, 2)


def decide(status: dict[str, Any], found: Stall | Unavailable | None, **policy: Any) -> Any:
    run_policy = {"progressDeadlineSeconds": 60, **policy}
    return plan(Reading(job(status=status, runPolicy=run_policy), PODS, True, stalled=found), NOW)


@pytest.mark.parametrize(
    ("policy", "stalls", "found", "want"),
    [
        # (runPolicy, stalls so far, the stall) -> (phase, pods killed, job's stalls, worker-1's stalls)
        ({}, 0, stall(), ("Restarting", ["j-worker-1"], 1, 1)),  # Recover: the rank named is replaced
        ({}, 0, stall(culprit=None), ("Restarting", ["j-worker-0", "j-worker-1"], 1, 1)),  # none named: every rank
        ({"onStall": "Fail"}, 0, stall(), ("Failed", [], 1, 0)),
        ({"stallLimit": 2}, 2, stall(), ("Failed", [], 3, 0)),  # a stall beyond the limit fails the job
        ({"stallLimit": 2}, 1, stall(), ("Restarting", ["j-worker-1"], 2, 1)),
        ({}, 0, stall(running_since="2025-12-31T23:59:00Z"), ("Running", [], 0, 0)),  # found before a recovery
        ({}, 0, None, ("Running", [], 0, 0)),
    ],
    ids=["recover", "recover-all", "fail", "limit", "within-limit", "old", "none"],
)  # fmt: skip
def test_a_stall(policy: dict[str, Any], stalls: int, found: Stall | None, want: tuple[Any, ...]) -> None:
    p = decide(running(stalls), found, **policy)
    got = (p.status.phase, p.kill_pods, p.status.stalls, p.status.ranks["worker-1"].stalls)
    assert got == want
    assert not p.create_pods  # the killed pods' replacements come once they are gone
    assert p.delete_pods == (["j-worker-0", "j-worker-1"] if want[0] == "Failed" else [])  # cleanPodPolicy Running
    if found is not None and want[2] > stalls:
        assert conds(p)["Stalled"] == "True"
        assert p.status.last_stall_step == 120
        stalled = [e for e in p.events if e.reason == "ProgressDeadlineExceeded"]
        assert stalled and stalled[0].type == "Warning" and stalled[0].message.startswith("no progress for 65 s")


def test_the_replacement_is_a_new_attempt_and_the_stalled_pod_is_not_counted_as_a_failure() -> None:
    p = decide(running(), stall())
    rank = p.status.ranks["worker-1"]
    assert (rank.attempt, rank.restarts, rank.last_reason) == (1, 0, "RankStalled")
    assert p.status.replica_statuses["worker"].restarts == 0
    # Next round: the stalled pod is terminating (attempt 0), then gone: the attempt-1 pod is created, nothing
    # counted on the way.
    status = p.status.model_dump(by_alias=True)
    going = [PODS[0], pod(Role.WORKER, 1, "Running", deleting=True, deadline=NOW)]
    p2 = plan(Reading(job(status=status, runPolicy={"progressDeadlineSeconds": 60}), going, True), NOW)
    assert not p2.create_pods and p2.status.ranks["worker-1"].restarts == 0
    p3 = plan(
        Reading(
            job(status=p2.status.model_dump(by_alias=True), runPolicy={"progressDeadlineSeconds": 60}), [PODS[0]], True
        ),
        NOW,
    )
    made = p3.create_pods
    assert [x["metadata"]["annotations"]["ringleader.dev/attempt"] for x in made] == ["1"]
    env = {e["name"]: e["value"] for e in made[0]["spec"]["containers"][0]["env"]}
    assert env["RINGLEADER_ATTEMPT"] == "1"
    assert p3.status.ranks["worker-1"].restarts == 0 and p3.status.stalls == 1


@pytest.mark.parametrize(
    ("step", "stalled"),
    [(119, "True"), (120, "True"), (121, "False")],
)
def test_stalled_turns_false_once_the_job_is_past_the_step_it_stalled_at(step: int, stalled: str) -> None:
    status = running(1, lastStallStep=120, progress={"step": step})
    status["conditions"].append({"type": "Stalled", "status": "True", "reason": "ProgressDeadlineExceeded"})
    p = decide(status, None)
    assert conds(p)["Stalled"] == stalled
    if stalled == "False":
        c = next(c for c in p.status.conditions if c.type == "Stalled")
        assert (c.reason, c.message) == ("ProgressResumed", "step 121 is past the stall at step 120")


UNREAD = "worker 0's step could not be read (refused), ...; runPolicy.progressDeadlineSeconds is not acted on ..."


@pytest.mark.parametrize(
    ("before", "found", "want"),
    [
        # (Stalled as read, what the scraper found) -> Stalled after the round
        (None, Unavailable(RUNNING_SINCE, UNREAD), ("Unknown", "ProgressUnavailable")),
        ("True", Unavailable(RUNNING_SINCE, UNREAD), ("True", "ProgressDeadlineExceeded")),  # the stall stays named
        (None, Unavailable("2025-12-31T23:59:00Z", UNREAD), (None, None)),  # found before a recovery: dropped
    ],
    ids=["unknown", "stalled-stays", "old"],
)  # fmt: skip
def test_progress_that_cannot_be_read_is_reported_and_never_acted_on(
    before: str | None, found: Unavailable, want: tuple[str | None, str | None]
) -> None:
    status = running(1 if before else 0, lastStallStep=120)
    if before:
        status["conditions"].append({"type": "Stalled", "status": before, "reason": "ProgressDeadlineExceeded"})
    p = decide(status, found)
    stalled = next((c for c in p.status.conditions if c.type == "Stalled"), None)
    assert ((stalled.status, stalled.reason) if stalled else (None, None)) == want
    assert (p.status.phase, p.kill_pods, p.delete_pods, p.status.stalls) == ("Running", [], [], 1 if before else 0)
    unknown = [e for e in p.events if e.reason == "ProgressUnavailable"]
    assert [e.type for e in unknown] == (["Warning"] if want[0] == "Unknown" else [])


@pytest.mark.parametrize(
    ("read_at", "stalled"),
    [("2025-12-31T23:55:00Z", "Unknown"), ("2025-12-31T23:56:01Z", "False")],
    ids=["read-before", "read-since"],
)
def test_stalled_unknown_turns_false_once_progress_is_read_again(read_at: str, stalled: str) -> None:
    status = running(progress={"step": 7, "updatedAt": read_at})
    status["conditions"].append({"type": "Stalled", "status": "Unknown", "reason": "ProgressUnavailable",
                                 "message": UNREAD, "lastTransitionTime": "2025-12-31T23:56:00Z"})  # fmt: skip
    p = decide(status, None)
    c = next(c for c in p.status.conditions if c.type == "Stalled")
    assert c.status == stalled
    if stalled == "False":
        assert (c.reason, c.message) == ("ProgressAvailable", "worker 0's progress is read again (step 7)")
