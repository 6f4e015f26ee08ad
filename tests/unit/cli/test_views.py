"""What the CLI shows, pure: watch's line, list's table and describe's screen (the ranks worth naming first, a bounded
number of them), on recorded job states and made-up statuses."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from ringleader import views
from ringleader.jobstate import JobState, age, duration
from ringleader_api import TrainingJob

STATES = Path(__file__).parent / "states"
NOW = datetime(2026, 11, 26, 6, 0, tzinfo=UTC)


def job(status: dict[str, Any], workers: int = 2) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "j"}, "spec": {"workers": {"replicas": workers}},
                                       "status": status})  # fmt: skip


def shown(renderable: Any, width: int = 160) -> str:
    console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_the_watch_line_says_what_is_known() -> None:
    assert views.progress_line(job({})) == ""
    running = job({"phase": "Running", "workers": "2/2", "progress": {
        "step": 120, "totalSteps": 200, "percent": 60.0, "loss": 0.031234, "samplesPerSecond": 1520.4,
        "etaSeconds": 95}, "replicaStatuses": {"worker": {"restarts": 2}}})  # fmt: skip
    assert (
        views.progress_line(running) == "step 120/200 (60%) loss 0.03123 1520 samples/s ETA 1m35s ready 2/2 restarts 2"
    )
    assert views.status_line(running).startswith("[Running] step 120/200")
    failed = job(
        {
            "phase": "Failed",
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "RankFailed",
                    "message": "worker 1 failed with exit code 3",
                }
            ],
        }
    )
    assert views.status_line(failed) == "[Failed]: worker 1 failed with exit code 3"


def test_durations_and_ages() -> None:
    assert [duration(s) for s in (0, 59, 61, 3600, 3725)] == ["0s", "59s", "1m01s", "1h00m", "1h02m"]
    assert age("2026-11-26T05:58:30Z", NOW) == "1m30s"
    assert age("2026-11-24T04:00:00Z", NOW) == "2d02h"
    assert age(None, NOW) == age("garbage", NOW) == ""


def test_describe_of_a_recorded_job_names_its_ranks_conditions_and_events() -> None:
    state = JobState.load(STATES / "backoff-limit.json")
    text = shown(views.describe(state, NOW))
    assert "backoff-limit  Failed" in text
    assert "BackoffLimitExceeded" in text
    rank = next(line for line in text.splitlines() if line.startswith("worker-0 "))
    assert "RankRestarting (exit 1)" in rank  # why it was last replaced
    assert "Events" in text and "RankRestarting" in text


def test_describe_names_the_ranks_worth_naming_first_and_no_more_than_twenty() -> None:
    """A 1000-rank job whose worker 700 failed and whose worker 3 was restarted: both are shown, 18 others."""
    pods = [{"metadata": {"name": f"big-worker-{i}", "labels": {"ringleader.dev/replica-type": "worker",
                                                                 "ringleader.dev/replica-index": str(i)}},
             "spec": {"nodeName": "n"}, "status": {"phase": "Failed" if i == 700 else "Running"}}
            for i in range(1000)]  # fmt: skip
    restarted = {"worker-3": {"restarts": 1, "lastReason": "RankRestarting"}}
    raw = {"metadata": {"name": "big"}, "spec": {"workers": {"replicas": 1000}},
           "status": {"phase": "Running", "ranks": restarted}}  # fmt: skip
    text = shown(views.ranks_table(JobState(raw, pods), TrainingJob.model_validate(raw)))
    rows = [line.split()[0] for line in text.splitlines() if line.startswith("worker-")]
    assert len(rows) == views.MAX_RANK_ROWS
    assert "worker-700" in rows and "worker-3" in rows
    assert rows == sorted(rows, key=lambda r: int(r.split("-")[1]))  # shown in rank order
    assert "980 more ranks not shown" in text


def test_list_shows_each_job() -> None:
    jobs = [JobState.load(STATES / f"{n}.json").job for n in ("succeeded", "straggler")]
    text = shown(views.jobs_table([TrainingJob.model_validate(j) for j in jobs], NOW))
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "STRATEGY", "PHASE", "WORKERS", "PROGRESS", "AGE"]
    assert lines[1].split()[:3] == ["straggler", "allreduce", "Running"]
    assert lines[2].split()[:3] == ["succeeded", "allreduce", "Succeeded"]
