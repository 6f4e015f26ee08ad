"""The job's outcome and phase as its ranks stand, table-style."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_api import Role
from ringleader_operator.policies.outcome import conclude, note_created

from ..builders import TEMPLATE, job, pod, round_of

PS = {"strategy": "parameter-server", "parameterServers": {"replicas": 1, "template": TEMPLATE}}
W0, W1, PS0 = ((Role.WORKER, 0), (Role.WORKER, 1), (Role.PS, 0))


def pods(**phases: str) -> list[dict[str, Any]]:
    """pods(w0="Running", ps0="Pending")"""
    keys = {"w0": W0, "w1": W1, "ps0": PS0}
    return [pod(*keys[k], phase) for k, phase in phases.items()]


@pytest.mark.parametrize(
    ("spec", "observed", "old_phase", "restarting", "want"),
    [
        # -> (phase, pods deleted, conditions set True now)
        ({}, pods(w0="Succeeded", w1="Succeeded"), "Running", False, ("Succeeded", [], ["Succeeded"])),
        (
            PS,
            pods(w0="Succeeded", w1="Succeeded", ps0="Running"),
            "Running",
            False,
            ("Succeeded", ["j-ps-0"], ["Succeeded"]),
        ),
        ({}, pods(w0="Succeeded", w1="Running"), None, False, ("Running", [], ["Running"])),  # done counts as running
        ({}, pods(w0="Running", w1="Pending"), None, False, ("Pending", [], [])),
        ({}, pods(w0="Running", w1="Pending"), "Running", False, ("Running", [], [])),  # a phase is not taken back
        ({}, pods(w0="Running", w1="Running"), "Running", True, ("Restarting", [], ["Restarting"])),
        (PS, pods(w0="Running", w1="Running"), None, False, ("Pending", [], [])),  # the shard has no pod yet
    ],
    ids=["succeeded", "succeeded-cleans-ps", "one-done", "pending", "stays-running", "restarting", "missing-ps"],
)
def test_conclude(
    spec: dict[str, Any], observed: list[dict[str, Any]], old_phase: str | None, restarting: bool,
    want: tuple[str, list[str], list[str]],
) -> None:  # fmt: skip
    r = round_of(job(status={"phase": old_phase} if old_phase else {}, **spec), observed)
    if restarting:
        r.restarting.append(("RankRestarting", "worker 1 failed"))
    conclude(r)
    true = [c.type.value for c in r.status.conditions if c.status == "True"]
    assert (r.status.phase, r.plan.delete_pods, true) == want


def test_created_is_said_once() -> None:
    r = round_of(job())
    note_created(r)
    note_created(r)
    assert [e.reason for e in r.plan.events] == ["JobCreated"]


def test_a_succeeded_job_shows_the_final_step_not_the_last_scrape() -> None:
    status = {"progress": {"step": 580, "totalSteps": 600, "stepSeconds": 0.5, "percent": 96.7, "etaSeconds": 10}}
    r = round_of(job(status=status), pods(w0="Succeeded", w1="Succeeded"))
    conclude(r)
    p = r.status.progress
    assert p is not None and (p.step, p.percent, p.eta_seconds) == (600, 100.0, 0)
    assert r.plan.writes_progress  # the round writes it: the scraper no longer reads a finished job


def test_rounds_write_progress_only_when_they_finish_it() -> None:
    from ringleader_operator.status_writes import status_json

    st = job(status={"phase": "Running", "progress": {"step": 5}}).status
    assert "progress" not in status_json(st)  # the scraper's, while the job runs
    assert status_json(st, with_progress=True)["progress"]["step"] == 5
