"""Why a rank's pod stopped, and what the restart policy makes of it. Pure.

A failure is one of: the program exited non-zero (`EXIT`), the kubelet or the eviction API evicted the pod
(`EVICTED`), the pod's node was lost (`NODE_LOST`: the taint manager or pod GC deleted it, or the node agent
restarted), the pod was deleted or disappeared for another reason (`DELETED`), or a parameter server with
restartPolicy Always exited cleanly (`EXITED`). Only `EXIT` is the program's doing; the others are
infrastructure and are retried under every restart policy, bounded by runPolicy.backoffLimit like any restart.
One ending is no failure: the trainer asked to stop (SIGTERM: an eviction, a drain, a deletion) that wrote its
checkpoint at the step it stopped at and exited STOPPED_EXIT_CODE (`STOPPED`) is recreated, never counted:
nothing was lost, so an eviction loop costs time, not work.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .api import RestartPolicy
from .conditions import Reason

# The trainer's ExitCode.STOPPED (docs/exit-codes.md; tests/unit/test_trainer_contracts.py holds both sides).
STOPPED_EXIT_CODE = 202


class Kind(StrEnum):
    EXIT = "exit"
    STOPPED = "stopped"
    EVICTED = "evicted"
    NODE_LOST = "node-lost"
    DELETED = "deleted"
    EXITED = "exited"
    STALLED = "stalled"  # replaced by the operator: it stopped first in a stall (never classified from a pod)
    STRAGGLED = "straggled"  # replaced by the operator: a straggler (never classified from a pod)


# Reasons Kubernetes gives a pod's DisruptionTarget condition, and pod.status.reason values a kubelet (or our
# process node) sets on a pod it failed without running the program to its end.
_DISRUPTIONS = {
    "EvictionByEvictionAPI": Kind.EVICTED,
    "PreemptionByScheduler": Kind.EVICTED,
    "TerminationByKubelet": Kind.EVICTED,
    "DeletionByTaintManager": Kind.NODE_LOST,
    "DeletionByPodGC": Kind.NODE_LOST,
}
_POD_REASONS = {
    "Evicted": Kind.EVICTED,
    "Preempting": Kind.EVICTED,
    "NodeLost": Kind.NODE_LOST,
    "NodeRestarted": Kind.NODE_LOST,
    "NodeShutdown": Kind.NODE_LOST,
}

RESTART_REASONS = {
    Kind.EXIT: Reason.RESTARTING,
    Kind.EVICTED: Reason.EVICTED,
    Kind.NODE_LOST: Reason.NODE_LOST,
    Kind.DELETED: Reason.POD_DELETED,
    Kind.EXITED: Reason.RESTARTING,
    Kind.STOPPED: Reason.STOPPED,
    Kind.STALLED: Reason.RANK_STALLED,
    Kind.STRAGGLED: Reason.RANK_STRAGGLED,
}


@dataclass(frozen=True)
class Failure:
    kind: Kind
    exit_code: int | None = None
    detail: str = ""  # Kubernetes' own word for it: a disruption or pod reason, a terminated state's reason

    def describe(self) -> str:
        """`failed with exit code 137 (OOMKilled)`, `was evicted (EvictionByEvictionAPI)`, ..."""
        # "Error" is what every non-zero exit is called; only a telling word (OOMKilled, Evicted) is worth adding.
        suffix = f" ({self.detail})" if self.detail and self.detail != "Error" else ""
        if self.kind == Kind.EXIT:
            return f"failed with exit code {self.exit_code}{suffix}"
        return {
            Kind.STOPPED: f"stopped on request with its checkpoint saved (exit code {self.exit_code})",
            Kind.EVICTED: "was evicted",
            Kind.NODE_LOST: "was lost with its node",
            Kind.DELETED: "was deleted",
            Kind.EXITED: "exited",
            Kind.STALLED: "stopped first in a stall",
            Kind.STRAGGLED: "straggled",
        }[self.kind] + suffix


def classify(exit_code: int | None, pod_reason: str, disruption: str) -> Failure:
    """The failure of a pod that stopped (phase Failed, or deleted by someone other than the operator).
    `exit_code` is the trainer container's non-zero exit code, if it has one; `pod_reason` is
    pod.status.reason; `disruption` is the reason of its DisruptionTarget condition, if any. A clean stop is
    one whatever made the pod go (its disruption or reason is kept as the detail)."""
    if exit_code == STOPPED_EXIT_CODE:
        return Failure(Kind.STOPPED, exit_code, disruption or pod_reason)
    if disruption in _DISRUPTIONS:
        return Failure(_DISRUPTIONS[disruption], exit_code, disruption)
    if pod_reason in _POD_REASONS:
        return Failure(_POD_REASONS[pod_reason], exit_code, pod_reason)
    if exit_code is not None:
        return Failure(Kind.EXIT, exit_code, pod_reason)
    # Failed with neither an exit code nor a known reason (admission rejected, image never ran, ...): the
    # program did not fail, so this is the infrastructure's.
    return Failure(Kind.EVICTED if pod_reason else Kind.DELETED, None, pod_reason or disruption)


class Decision(StrEnum):
    RESTART = "Restart"
    FAIL = "Fail"


def is_program_error(policy: RestartPolicy, failure: Failure) -> bool:
    """Whether the policy treats this failure as the program's own, which fails the job at once."""
    if failure.kind != Kind.EXIT:
        return False
    if policy == RestartPolicy.NEVER:
        return True
    return policy == RestartPolicy.EXIT_CODE and not (failure.exit_code is not None and failure.exit_code >= 128)


def decide_restart(
    policy: RestartPolicy, failure: Failure, restarts: int, backoff_limit: int
) -> tuple[Decision, Reason | None]:
    """What to do with a rank whose pod stopped, and the job's failure reason if it fails. `restarts` counts
    the job's restarts so far (every restart counts, infrastructure ones too: an eviction loop ends)."""
    if is_program_error(policy, failure):
        return Decision.FAIL, Reason.FAILED
    if restarts >= backoff_limit:
        return Decision.FAIL, Reason.BACKOFF_LIMIT
    return Decision.RESTART, None


def backoff_seconds(rank_restarts: int, base: float, cap: float) -> float:
    """Wait before a rank's `rank_restarts`-th restart (1 for the first): base, 2 base, 4 base, ... up to cap."""
    if rank_restarts <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(rank_restarts - 1, 62))
