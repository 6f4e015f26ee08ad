"""Table tests of pod phase, restart decisions, back-off and the status document."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from ringleader_devcluster.node.podstatus import (
    ContainerRecord,
    PodView,
    State,
    Termination,
    build_status,
    merge_conditions,
    pod_phase,
    restart_delay,
    should_restart,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ended(code: int, name: str = "c", init: bool = False, restarts: int = 0) -> ContainerRecord:
    t = Termination(
        exit_code=code,
        reason="Completed" if code == 0 else "Error",
        message="",
        started_at=T0,
        finished_at=T0 + timedelta(seconds=1),
    )
    return ContainerRecord(name=name, image="img", init=init, restart_count=restarts).terminated(t)


def running(name: str = "c") -> ContainerRecord:
    return ContainerRecord(name=name, image="img").running(T0)


def waiting(name: str = "c", restarts: int = 0, init: bool = False) -> ContainerRecord:
    return ContainerRecord(name=name, image="img", restart_count=restarts, init=init)


@pytest.mark.parametrize(
    ("policy", "code", "want"),
    [
        ("Always", 0, True),
        ("Always", 1, True),
        ("OnFailure", 0, False),
        ("OnFailure", 137, True),
        ("Never", 1, False),
        ("Never", 0, False),
    ],
)
def test_should_restart(policy: str, code: int, want: bool) -> None:
    assert should_restart(policy, code) is want


@pytest.mark.parametrize(("restarts", "want"), [(0, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (6, 300.0), (20, 300.0)])
def test_restart_delay_like_the_kubelet(restarts: int, want: float) -> None:
    assert restart_delay(restarts, base=10, cap=300) == want


@pytest.mark.parametrize(
    ("policy", "init", "containers", "want"),
    [
        ("Never", [], [waiting()], "Pending"),
        ("Never", [], [running()], "Running"),
        ("Never", [], [ended(0)], "Succeeded"),
        ("Never", [], [ended(3)], "Failed"),
        ("Never", [], [ended(0, "a"), ended(1, "b")], "Failed"),
        ("Never", [], [ended(0, "a"), running("b")], "Running"),
        ("OnFailure", [], [ended(1)], "Running"),  # about to restart
        ("OnFailure", [], [ended(0)], "Succeeded"),
        ("Always", [], [ended(0)], "Running"),
        ("Always", [], [waiting(restarts=2)], "Running"),  # CrashLoopBackOff
        ("Never", [waiting(init=True)], [waiting()], "Pending"),
        ("Never", [ended(1, init=True)], [waiting()], "Failed"),
        ("OnFailure", [ended(1, init=True)], [waiting()], "Pending"),
        ("Never", [ended(0, init=True)], [running()], "Running"),
    ],
    ids=[
        "waiting",
        "running",
        "succeeded",
        "failed",
        "one-failed",
        "one-running",
        "onfailure-retry",
        "onfailure-done",
        "always-exit0",
        "crashloop",
        "init-pending",
        "init-failed-never",
        "init-failed-retry",
        "init-done",
    ],
)
def test_pod_phase(policy: str, init: list[ContainerRecord], containers: list[ContainerRecord], want: str) -> None:
    assert pod_phase(policy, init, containers) == want


def test_waiting_after_a_run_moves_the_termination_to_last_state() -> None:
    rec = ended(7).waiting("CrashLoopBackOff", "back-off 10s")
    assert rec.state == State.WAITING and rec.last is not None and rec.last.exit_code == 7
    assert rec.termination is None and not rec.ready


def test_build_status_running_pod() -> None:
    view = PodView(phase="Running", pod_ip="198.18.1.2", host_ip="198.18.0.1", start_time=T0, sandbox_ready=True)
    rec = running()
    rec = ContainerRecord(**{**rec.__dict__, "ready": True})
    status = build_status(view, [], [rec], [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "x"}], T0)
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert conds == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    assert status["podIP"] == "198.18.1.2" and status["podIPs"] == [{"ip": "198.18.1.2"}]
    cs = status["containerStatuses"][0]
    assert cs["state"] == {"running": {"startedAt": "2026-01-01T00:00:00Z"}} and cs["ready"] and cs["started"]


def test_build_status_failed_pod_reports_exit_code_and_not_ready() -> None:
    view = PodView(phase="Failed", pod_ip="198.18.1.2", host_ip="198.18.0.1", start_time=T0, sandbox_ready=False)
    status = build_status(view, [], [ended(3)], [], T0)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "PodCompleted")
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert (term["exitCode"], term["reason"]) == (3, "Error")


def test_merge_conditions_keeps_transition_time_unless_status_flips() -> None:
    old = [
        {"type": "Ready", "status": "False", "lastTransitionTime": "old"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "sched"},
    ]
    same = merge_conditions(old, [{"type": "Ready", "status": "False", "lastTransitionTime": "new"}])
    flipped = merge_conditions(old, [{"type": "Ready", "status": "True", "lastTransitionTime": "new"}])
    assert {c["type"]: c["lastTransitionTime"] for c in same} == {"Ready": "old", "PodScheduled": "sched"}
    assert {c["type"]: c["lastTransitionTime"] for c in flipped} == {"Ready": "new", "PodScheduled": "sched"}
