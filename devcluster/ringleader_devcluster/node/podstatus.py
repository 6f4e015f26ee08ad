"""Pure pod-status computation: what the kubelet would report for a pod's containers.

The runtime keeps one `ContainerRecord` per container (what is running, how the last run ended, how often it
restarted); `pod_phase`, `should_restart` and `build_status` turn those records into the Pod's `status` the
way the kubelet does, so `kubectl get pods`, controllers and the scheduler see true state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class State(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    TERMINATED = "terminated"


@dataclass(frozen=True)
class Termination:
    exit_code: int
    reason: str  # Completed | Error | OOMKilled | StartError | ...
    message: str
    started_at: datetime | None
    finished_at: datetime
    signal: int | None = None


@dataclass(frozen=True)
class ContainerRecord:
    """What one container is doing now. `last` is the previous run's termination (for lastState)."""

    name: str
    image: str
    state: State = State.WAITING
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    started_at: datetime | None = None
    termination: Termination | None = None
    last: Termination | None = None
    restart_count: int = 0
    ready: bool = False
    init: bool = False

    def running(self, now: datetime) -> ContainerRecord:
        return replace(self, state=State.RUNNING, started_at=now, termination=None, waiting_reason="")

    def terminated(self, t: Termination) -> ContainerRecord:
        return replace(self, state=State.TERMINATED, termination=t, ready=False)

    def waiting(self, reason: str, message: str = "") -> ContainerRecord:
        """Waiting after a run moves that run's termination into lastState, as the kubelet does."""
        last = self.termination if self.termination is not None else self.last
        return replace(
            self,
            state=State.WAITING,
            waiting_reason=reason,
            waiting_message=message,
            termination=None,
            last=last,
            ready=False,
        )


def exit_reason(exit_code: int) -> str:
    """The kubelet's reason for a terminated container. Processes have no cgroup of their own here, so a
    kernel OOM kill shows as SIGKILL (137) with reason Error rather than OOMKilled."""
    return "Completed" if exit_code == 0 else "Error"


def should_restart(restart_policy: str, exit_code: int) -> bool:
    """Whether a regular container that just exited is started again under the pod's restartPolicy."""
    if restart_policy == "Always":
        return True
    if restart_policy == "OnFailure":
        return exit_code != 0
    return False


def restart_delay(restart_count: int, base: float, cap: float) -> float:
    """CrashLoopBackOff delay before restart number `restart_count + 1`, as the kubelet's back-off: the
    first restart is immediate, then base, 2*base, 4*base ... up to cap."""
    if restart_count <= 0:
        return 0.0
    return float(min(cap, base * (2 ** (restart_count - 1))))


def pod_phase(restart_policy: str, init: Sequence[ContainerRecord], containers: Sequence[ContainerRecord]) -> str:
    """Kubernetes pod phase from container states.

    Pending: an init container has not completed, or a regular container never started.
    Running: some container runs, or will be restarted. Succeeded: all regular containers terminated with 0
    and none will restart. Failed: all terminated, at least one non-zero, and none will restart.
    """
    for c in init:
        ended = c.state == State.TERMINATED and c.termination is not None
        if ended and c.termination is not None and c.termination.exit_code == 0:
            continue
        # A failed init container is retried unless the pod never restarts anything.
        return "Failed" if ended and restart_policy == "Never" else "Pending"
    if any(c.state == State.RUNNING for c in containers):
        return "Running"
    if all(c.state == State.TERMINATED for c in containers):
        codes = [c.termination.exit_code for c in containers if c.termination is not None]
        if any(should_restart(restart_policy, code) for code in codes):
            return "Running"
        return "Succeeded" if all(code == 0 for code in codes) else "Failed"
    # Some waiting: a waiting container that has run before is restarting (Running); never ran: Pending.
    if any(c.restart_count > 0 or c.last is not None or c.state == State.TERMINATED for c in containers):
        return "Running"
    return "Pending"


def _ts(t: datetime | None) -> str | None:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


# The kubelet's terminationMessagePolicy FallbackToLogsOnError: a failed container with no message of its own gets
# the end of its log, at most this many lines and bytes.
TAIL_LINES, TAIL_BYTES = 80, 2048


def log_tail_message(log: bytes) -> str:
    """The message the kubelet gives a container that failed with nothing in its termination message file: its
    log's last TAIL_LINES lines, of which the last TAIL_BYTES bytes."""
    lines = log.splitlines(keepends=True)[-TAIL_LINES:]
    return b"".join(lines)[-TAIL_BYTES:].decode(errors="replace")


def _termination_json(t: Termination) -> dict[str, Any]:
    out: dict[str, Any] = {
        "exitCode": t.exit_code,
        "reason": t.reason,
        "startedAt": _ts(t.started_at),
        "finishedAt": _ts(t.finished_at),
    }
    if t.message:
        out["message"] = t.message
    if t.signal is not None:
        out["signal"] = t.signal
    return out


def container_status(c: ContainerRecord) -> dict[str, Any]:
    """One entry of status.containerStatuses / initContainerStatuses."""
    state: dict[str, Any]
    if c.state == State.RUNNING:
        state = {"running": {"startedAt": _ts(c.started_at)}}
    elif c.state == State.TERMINATED and c.termination is not None:
        state = {"terminated": _termination_json(c.termination)}
    else:
        waiting: dict[str, Any] = {"reason": c.waiting_reason or "ContainerCreating"}
        if c.waiting_message:
            waiting["message"] = c.waiting_message
        state = {"waiting": waiting}
    return {
        "name": c.name,
        "image": c.image,
        "imageID": "",
        "containerID": "",
        "ready": c.ready,
        "started": c.state == State.RUNNING,
        "restartCount": c.restart_count,
        "state": state,
        "lastState": {"terminated": _termination_json(c.last)} if c.last else {},
    }


@dataclass(frozen=True)
class PodView:
    """Everything status depends on besides the containers: addresses and pod-level conditions."""

    phase: str
    pod_ip: str
    host_ip: str
    start_time: datetime
    sandbox_ready: bool
    reason: str = ""
    message: str = ""


def _condition(kind: str, ok: bool, now: datetime, reason: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": kind,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": _ts(now),
    }
    if reason and not ok:
        cond["reason"] = reason
    return cond


def merge_conditions(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep lastTransitionTime of conditions whose status did not flip; keep conditions we do not own
    (PodScheduled from the scheduler, DisruptionTarget from the controller-manager)."""
    by_type = {c["type"]: c for c in old}
    out = []
    for c in new:
        prev = by_type.pop(c["type"], None)
        if prev is not None and prev.get("status") == c["status"]:
            out.append({**c, "lastTransitionTime": prev.get("lastTransitionTime", c["lastTransitionTime"])})
        else:
            out.append(c)
    out.extend(by_type.values())
    return sorted(out, key=lambda c: c["type"])


def build_status(
    view: PodView,
    init: Sequence[ContainerRecord],
    containers: Sequence[ContainerRecord],
    old_conditions: Sequence[dict[str, Any]],
    now: datetime,
) -> dict[str, Any]:
    """The Pod's full `status` as the kubelet would write it."""
    terminal = view.phase in ("Succeeded", "Failed")
    inits_done = all(c.state == State.TERMINATED and c.termination and c.termination.exit_code == 0 for c in init)
    containers_ready = not terminal and all(c.ready for c in containers)
    reason = "PodCompleted" if terminal else ("ContainersNotReady" if not containers_ready else "")
    conditions = merge_conditions(
        old_conditions,
        [
            _condition("PodReadyToStartContainers", view.sandbox_ready and not terminal, now),
            _condition("Initialized", inits_done or terminal, now, "ContainersNotInitialized"),
            _condition("ContainersReady", containers_ready, now, reason),
            _condition("Ready", containers_ready, now, reason),
        ],
    )
    status: dict[str, Any] = {
        "phase": view.phase,
        "conditions": conditions,
        "hostIP": view.host_ip,
        "hostIPs": [{"ip": view.host_ip}] if view.host_ip else None,
        "podIP": view.pod_ip or None,
        "podIPs": [{"ip": view.pod_ip}] if view.pod_ip else None,
        "startTime": _ts(view.start_time),
        "qosClass": None,
        "containerStatuses": [container_status(c) for c in containers],
        "initContainerStatuses": [container_status(c) for c in init] if init else None,
        "reason": view.reason or None,
        "message": view.message or None,
    }
    return {k: v for k, v in status.items() if v is not None}
