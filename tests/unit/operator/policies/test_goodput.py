"""status.goodput: the time since the last change of phase counted into that phase's part, the parts adding up
to the time from creation; stalls and lost steps carved out of the Running time."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Goodput, JobPhase, TrainingJob
from ringleader_operator.failures import Failure, Kind
from ringleader_operator.policies.goodput import account, note_lost_work
from ringleader_operator.round_state import Round

from ..builders import after, training_job

CREATED = after(0)


def job(status: dict[str, Any], checkpoint: bool = True) -> TrainingJob:
    spec: dict[str, Any] = {"checkpoint": {"intervalSteps": 100}} if checkpoint else {}
    j = training_job(status=status, **spec)
    j.metadata["creationTimestamp"] = CREATED
    return j


def step(j: TrainingJob, at: int, phase: JobPhase | None, lost: Failure | None = None, stalled: float = 0) -> Any:
    """One round at `at` seconds after creation that leaves the job in `phase` (replacing a rank for `lost`):
    the job's next status, as a dict."""
    r = Round.open(j, [], after(at))
    r.status.phase = phase
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        r.status.completion_time = r.now
    if lost is not None:
        note_lost_work(r, lost)
    r.stalled_seconds = stalled
    account(r)
    return r.status.model_dump(by_alias=True)


def test_a_job_with_one_failure_adds_up_to_its_wall_time() -> None:
    s = step(job({}), 0, JobPhase.PENDING)  # created: nothing counted yet
    assert s["goodput"]["accountedAt"] == CREATED and s["goodput"]["queuedSeconds"] == 0
    s = step(job(s), 10, JobPhase.RUNNING)  # 10 s queued
    s = step(job(s), 40, JobPhase.RUNNING)  # no change of phase: nothing counted, nothing to write
    assert s["goodput"]["accountedAt"] == after(10)
    # At 70 s a rank fails: worker 0 was at step 120, its newest checkpoint at 100, 0.5 s a step: 20 steps lost.
    s["progress"] = {"step": 120, "lastCheckpointStep": 100, "stepSeconds": 0.5}
    s = step(job(s), 70, JobPhase.RESTARTING, lost=Failure(Kind.EXIT, 1))
    assert s["goodput"]["stepsLost"] == 20 and s["goodput"]["recomputeOwedSeconds"] == 10
    s = step(job(s), 80, JobPhase.RUNNING)  # 10 s restarting
    s = step(job(s), 130, JobPhase.SUCCEEDED)  # 50 s running: the first 10 recomputing
    g = Goodput.model_validate(s["goodput"])
    parts = (g.queued_seconds, g.productive_seconds, g.restarting_seconds, g.recomputing_seconds, g.stalled_seconds,
             g.suspended_seconds)  # fmt: skip
    assert parts == (10, 60 + 40, 10, 10, 0, 0)
    assert sum(parts) == 130 and g.accounted_at == s["completionTime"] == after(130)
    assert (g.ratio, g.recompute_owed_seconds) == (round(100 / 130, 4), 0)
    assert step(job(s), 200, JobPhase.SUCCEEDED)["goodput"] == s["goodput"]  # ended: counted no more


def test_a_stall_a_suspend_and_a_clean_stop() -> None:
    s = step(job({}), 0, JobPhase.PENDING)
    s = step(job(s), 5, JobPhase.RUNNING)
    s["progress"] = {"step": 300, "lastCheckpointStep": 200, "stepSeconds": 0.1}
    # At 95 s a stall found after 30 s without progress: its rank replaced, 100 steps (10 s) lost.
    s = step(job(s), 95, JobPhase.RESTARTING, lost=Failure(Kind.STALLED), stalled=30)
    g = s["goodput"]
    assert (g["productiveSeconds"], g["stalledSeconds"], g["stepsLost"], g["recomputeOwedSeconds"]) == (60, 30, 100, 10)
    s = step(job(s), 100, JobPhase.RUNNING)
    # Suspended at 150 s (a clean stop: nothing lost), resumed at 250 s.
    s = step(job(s), 150, JobPhase.SUSPENDED, lost=Failure(Kind.STOPPED, 202))
    s = step(job(s), 250, JobPhase.PENDING)
    s = step(job(s), 260, JobPhase.RUNNING)
    s = step(job(s), 300, JobPhase.FAILED)
    g = Goodput.model_validate(s["goodput"])
    assert (g.queued_seconds, g.productive_seconds, g.restarting_seconds, g.recomputing_seconds, g.stalled_seconds,
            g.suspended_seconds, g.steps_lost) == (15, 60 + 40 + 40, 5, 10, 30, 100, 100)  # fmt: skip


def test_steps_are_lost_once_per_recovery_and_not_by_a_straggler_that_saved() -> None:
    running = {"phase": "Running", "progress": {"step": 50, "lastCheckpointStep": 40, "stepSeconds": 1.0},
               "goodput": {"accountedAt": after(10)}}  # fmt: skip
    r = Round.open(job(running), [], after(20))
    for failure in (Failure(Kind.EXIT, 1), Failure(Kind.NODE_LOST)):  # two ranks in one round: 10 steps, once
        note_lost_work(r, failure)
    assert r.lost_steps == 10
    r = Round.open(job(running), [], after(20))
    note_lost_work(r, Failure(Kind.STRAGGLED))  # it stopped with its checkpoint
    assert r.lost_steps == 0
    r = Round.open(job(running, checkpoint=False), [], after(20))
    note_lost_work(r, Failure(Kind.STRAGGLED))  # no checkpoint: every step is lost
    assert r.lost_steps == 50
    restarting = {**running, "phase": "Restarting"}
    r = Round.open(job(restarting), [], after(20))
    note_lost_work(r, Failure(Kind.EXIT, 1))  # lost during a recovery: nothing more
    assert r.lost_steps == 0


def test_a_job_from_before_goodput_starts_counting_at_its_next_change() -> None:
    s = step(job({"phase": "Running"}), 100, JobPhase.RUNNING)
    assert s["goodput"]["productiveSeconds"] == 100 and s["goodput"]["accountedAt"] == after(100)


def test_the_operator_exports_each_jobs_goodput_and_drops_it_with_the_job() -> None:
    from prometheus_client import REGISTRY
    from ringleader_operator.plan_writer import export_goodput

    g = Goodput(queued_seconds=10, productive_seconds=100, restarting_seconds=10, recomputing_seconds=10, ratio=0.77)
    export_goodput("ns", "gp", g)
    lost = {c: REGISTRY.get_sample_value("ringleader_job_lost_seconds", {"namespace": "ns", "job": "gp", "cause": c})
            for c in ("queued", "restarting", "recomputing", "stalled", "suspended")}  # fmt: skip
    assert lost == {"queued": 10, "restarting": 10, "recomputing": 10, "stalled": 0, "suspended": 0}
    assert REGISTRY.get_sample_value("ringleader_job_goodput_ratio", {"namespace": "ns", "job": "gp"}) == 0.77
    export_goodput("ns", "gp", None)
    assert REGISTRY.get_sample_value("ringleader_job_goodput_ratio", {"namespace": "ns", "job": "gp"}) is None
    labels = {"namespace": "ns", "job": "gp", "cause": "queued"}
    assert REGISTRY.get_sample_value("ringleader_job_lost_seconds", labels) is None


T0, T1 = "2026-01-01T00:00:00.000Z", "2026-01-01T00:01:10.500Z"  # worker 0's continuations: its start, then later


@pytest.mark.parametrize(
    ("continued", "lost", "owed"),
    [
        (({"resumedStep": 120, "resumedAt": T1}), 0, 0),  # healed from a live peer at the step it was at
        (({"resumedStep": 121, "resumedAt": T1}), 0, 0),  # read a step later: it continued past it
        (({"resumedStep": 100, "resumedAt": T1}), 20, 10),  # resumed from the checkpoint at 100: 20 steps again
        (({"resumedStep": 0, "resumedAt": T0}), None, None),  # not yet continued: still pending
    ],
    ids=["healed", "healed-read-later", "from-the-checkpoint", "pending"],
)
def test_steps_lost_are_what_worker_0_says_it_continued_from(
    continued: dict[str, Any], lost: int | None, owed: int | None
) -> None:
    s = step(job({}), 0, JobPhase.PENDING)
    s = step(job(s), 10, JobPhase.RUNNING)
    s["progress"] = {"step": 120, "lastCheckpointStep": 100, "stepSeconds": 0.5, "resumedStep": 0, "resumedAt": T0}
    s = step(job(s), 70, JobPhase.RESTARTING, lost=Failure(Kind.EXIT, 1))
    g = s["goodput"]
    assert g["stepsLost"] == 0 and g["pendingLoss"] == {"step": 120, "atMost": 20, "resumedAt": T0}
    s = step(job(s), 75, JobPhase.RUNNING)  # the replacement runs; worker 0's page not read since
    assert s["goodput"]["pendingLoss"] is not None
    s["progress"] |= continued
    s = step(job(s), 80, JobPhase.RUNNING)
    g = s["goodput"]
    if lost is None:
        assert g["pendingLoss"] is not None and g["stepsLost"] == 0
    else:
        assert (g["pendingLoss"], g["stepsLost"], g["recomputeOwedSeconds"]) == (None, lost, owed)


def test_a_job_that_ends_before_worker_0_says_where_it_continued_counts_the_most_it_can_be() -> None:
    s = step(job({}), 0, JobPhase.PENDING)
    s = step(job(s), 10, JobPhase.RUNNING)
    s["progress"] = {"step": 120, "lastCheckpointStep": 100, "stepSeconds": 0.5, "resumedStep": 0, "resumedAt": T0}
    s = step(job(s), 70, JobPhase.RESTARTING, lost=Failure(Kind.EXIT, 1))
    s = step(job(s), 72, JobPhase.SUCCEEDED)
    assert (s["goodput"]["pendingLoss"], s["goodput"]["stepsLost"]) == (None, 20)
