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

import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from ringleader_api import (
    ExitCodeOperator,
    ExitCodes,
    FailureAction,
    FailureClass,
    FailureRule,
    Reason,
    RestartPolicy,
)

from .evidence import Said

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
    GANG = "gang"  # replaced by the operator: a peer's failure rule restarts the gang (never classified)
    NOT_STARTED = "not-started"  # its container could not start: its image cannot be pulled (START_FAILURES)


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

# Why a container waits that says it will not start by waiting (the kubelet's words): an image it failed to pull
# again after a back-off (a first ErrImagePull is given its retry), a name that is no image reference, an image
# that may not be pulled and is not on the node. The rank is counted (Infrastructure: a registry, a node's
# credentials, a network; a failureRule on the reason may fail the job instead) and recreated.
START_FAILURES = frozenset({"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})

RESTART_REASONS = {
    Kind.EXIT: Reason.RESTARTING,
    Kind.EVICTED: Reason.EVICTED,
    Kind.NODE_LOST: Reason.NODE_LOST,
    Kind.DELETED: Reason.POD_DELETED,
    Kind.EXITED: Reason.RESTARTING,
    Kind.STOPPED: Reason.STOPPED,
    Kind.STALLED: Reason.RANK_STALLED,
    Kind.STRAGGLED: Reason.RANK_STRAGGLED,
    Kind.GANG: Reason.GANG_RESTART,
    Kind.NOT_STARTED: Reason.RANK_NOT_STARTED,
}


@dataclass(frozen=True)
class Failure:
    kind: Kind
    exit_code: int | None = None
    detail: str = ""  # Kubernetes' own word for it: a disruption or pod reason, a terminated state's reason
    reason: str = ""  # pod.status.reason, else the trainer container's terminated reason (OOMKilled, Error)
    disruption: str = ""  # the reason of the pod's DisruptionTarget condition
    node: str = ""  # the node the pod ran on
    at: str | None = None  # when its trainer container ended (finishedAt), if it says
    said: Said = field(default_factory=Said)  # what its termination message says of its end (evidence.read)

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
            Kind.GANG: "restarted with its gang",
            Kind.NOT_STARTED: "could not start its container",
        }[self.kind] + suffix


def classify(exit_code: int | None, pod_reason: str, disruption: str) -> Failure:
    """The failure of a pod that stopped (phase Failed, or deleted by someone other than the operator).
    `exit_code` is the trainer container's non-zero exit code, if it has one; `pod_reason` is
    pod.status.reason; `disruption` is the reason of its DisruptionTarget condition, if any. A clean stop is
    one whatever made the pod go (its disruption or reason is kept as the detail)."""
    if exit_code == STOPPED_EXIT_CODE:
        kind, detail = Kind.STOPPED, disruption or pod_reason
    elif disruption in _DISRUPTIONS:
        kind, detail = _DISRUPTIONS[disruption], disruption
    elif pod_reason in _POD_REASONS:
        kind, detail = _POD_REASONS[pod_reason], pod_reason
    elif exit_code is not None:
        kind, detail = Kind.EXIT, pod_reason
    else:
        # Failed with neither an exit code nor a known reason (admission rejected, image never ran, ...): the
        # program did not fail, so this is the infrastructure's.
        kind, detail = (Kind.EVICTED if pod_reason else Kind.DELETED), pod_reason or disruption
    return Failure(kind, exit_code, detail, reason=pod_reason, disruption=disruption)


# Signals a program dies of by its own doing (a crash in native code, an abort); any other (SIGKILL, SIGTERM,
# SIGHUP, ...) came from outside it: a kill, a stop not waited for.
CRASH_SIGNALS = frozenset({signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGILL})
# What a GPU's failure leaves in an exception's text (the driver's and NCCL's words; a CUDA out-of-memory is not
# one: it is the job's size).
GPU_MARKERS = ("CUDA error", "NCCL error", "ncclUnhandledCudaError", "ncclSystemError", "Xid", "ECC error",
               "cudaErrorLaunchFailure", "CUBLAS_STATUS_EXECUTION_FAILED", "GPU is lost", "uncorrectable")  # fmt: skip
OOM_MARKERS = ("OutOfMemoryError", "CUDA out of memory", "MemoryError")
# Exceptions of the network and of collectives that timed out or lost a peer: torch.distributed's own, the socket's.
# A name that does not resolve (gaierror) is the cluster's DNS: a headless service's records appear a moment
# after the pods, and a DNS server that does not answer says "Temporary failure".
NETWORK_EXCEPTIONS = ("DistBackendError", "DistNetworkError", "DistStoreError", "ConnectionResetError",
                      "ConnectionRefusedError", "ConnectionAbortedError", "BrokenPipeError", "gaierror")  # fmt: skip
NETWORK_MARKERS = ("Connection reset by peer", "Connection closed by peer", "collective operation timeout",
                   "communicator was aborted", "Socket Timeout", "timed out waiting for",
                   "Temporary failure in name resolution", "Name or service not known")  # fmt: skip
# The trainer's own exit codes for what its peers or the network did (exitcodes.py): RENDEZVOUS_TIMEOUT, PEER_LOST.
NETWORK_EXIT_CODES = {200: "the rendezvous timed out", 201: "a collective failed or timed out (a peer lost)"}


def failure_class(failure: Failure) -> tuple[FailureClass, str]:
    """The class of a failure and its evidence (one line). Whatever Kubernetes did to the pod (an eviction, its
    node lost, a deletion) is the infrastructure's; of a program's exit, the kernel's OOM kill, then what its
    termination message says (a GPU's error, running out of memory, a network's or a collective's failure), then
    its exit code (the trainer's codes for lost peers, an exception of its own, a signal from outside, a crash)."""
    said = failure.said
    if failure.kind != Kind.EXIT:
        evidence = failure.describe() + (f"; it said {said.describe()}" if said.exception else "")
        return FailureClass.INFRASTRUCTURE, evidence
    if failure.reason == "OOMKilled":
        return FailureClass.RESOURCES, "OOMKilled: out of memory at the container's limit"
    return _by_what_it_said(said) or _by_exit_code(failure.exit_code, said.describe())


def _by_what_it_said(said: Said) -> tuple[FailureClass, str] | None:
    """The class the exception's words tell, None when they tell none."""
    text, error = f"{said.exception} {said.message}", said.describe()
    if any(marker in text for marker in GPU_MARKERS):
        return FailureClass.INFRASTRUCTURE, f"a GPU error: {error}"
    if any(marker in text for marker in OOM_MARKERS):
        return FailureClass.RESOURCES, f"out of memory: {error}"
    if said.exception.rsplit(".", 1)[-1] in NETWORK_EXCEPTIONS or any(m in text for m in NETWORK_MARKERS):
        return FailureClass.INFRASTRUCTURE, f"a network or collective failure: {error}"
    return None


def _by_exit_code(code: int | None, error: str) -> tuple[FailureClass, str]:
    """The class an exit code tells, with the exception said (`error`, may be empty) as the evidence."""
    if code in NETWORK_EXIT_CODES:
        return FailureClass.INFRASTRUCTURE, NETWORK_EXIT_CODES[code] + (f": {error}" if error else "")
    if error:
        return FailureClass.USER_CODE, error
    sig = _signal(code)
    if sig is None:
        return FailureClass.USER_CODE, f"exit code {code}"
    if sig in CRASH_SIGNALS:
        return FailureClass.USER_CODE, f"crashed: {sig.name}"
    return FailureClass.INFRASTRUCTURE, f"killed from outside: {sig.name}"


def _signal(code: int | None) -> signal.Signals | None:
    """The signal an exit code 128+N says the program died of, None when it is no such code."""
    if code is None or code <= 128:
        return None
    try:
        return signal.Signals(code - 128)
    except ValueError:
        return None


class Decision(StrEnum):
    RESTART = "Restart"
    RESTART_GANG = "RestartGang"
    IGNORE = "Ignore"
    FAIL = "Fail"


def _exits(operator: ExitCodeOperator, codes: range) -> ExitCodes:
    return ExitCodes(operator=operator, values=list(codes))


# restartPolicy as rules, evaluated after a role's own failureRules: Never fails the job on any exit of the
# program, ExitCode on 1-127 (its own errors; 128-255 are signals and the trainer's retryable codes); OnFailure
# and Always add none. Whatever no rule matches restarts the rank.
BUILTIN_RULES: dict[RestartPolicy, tuple[FailureRule, ...]] = {
    RestartPolicy.NEVER: (
        FailureRule(action=FailureAction.FAIL_JOB, on_exit_codes=_exits(ExitCodeOperator.IN, range(1, 256))),
    ),
    RestartPolicy.EXIT_CODE: (
        FailureRule(action=FailureAction.FAIL_JOB, on_exit_codes=_exits(ExitCodeOperator.IN, range(1, 128))),
    ),
    RestartPolicy.ON_FAILURE: (),
    RestartPolicy.ALWAYS: (),
}
_ACTIONS = {
    FailureAction.FAIL_JOB: Decision.FAIL,
    FailureAction.RESTART_RANK: Decision.RESTART,
    FailureAction.RESTART_GANG: Decision.RESTART_GANG,
    FailureAction.IGNORE: Decision.IGNORE,
}


def matches(rule: FailureRule, failure: Failure) -> bool:
    """Whether the rule holds for the failure. Exit codes match a program's exit only (an evicted pod's 137 is
    the eviction's); reasons match the pod's reason or the trainer container's termination reason; pod
    conditions match the DisruptionTarget condition's reason; classes match the failure's class (failure_class);
    exceptions match the exception its termination message names, by its qualified or its short name."""
    if rule.on_exit_codes is not None:
        if failure.kind != Kind.EXIT or failure.exit_code is None:
            return False
        listed = failure.exit_code in rule.on_exit_codes.values
        return listed if rule.on_exit_codes.operator == ExitCodeOperator.IN else not listed
    if rule.on_reasons is not None:
        return bool(failure.reason) and failure.reason in rule.on_reasons
    if rule.on_classes is not None:
        return failure_class(failure)[0] in rule.on_classes
    if rule.on_exceptions is not None:
        name = failure.said.exception
        return bool(name) and (name in rule.on_exceptions or name.rsplit(".", 1)[-1] in rule.on_exceptions)
    return bool(failure.disruption) and failure.disruption in (rule.on_pod_conditions or [])


def first_match(
    rules: Sequence[FailureRule], policy: RestartPolicy, failure: Failure
) -> tuple[FailureAction, int | None]:
    """The action of the first rule that holds (the role's own, then restartPolicy's), with the index of the
    role's rule (None: restartPolicy's rule, or none held: RestartRank)."""
    for i, rule in enumerate(rules):
        if matches(rule, failure):
            return rule.action, i
    for rule in BUILTIN_RULES[policy]:
        if matches(rule, failure):
            return rule.action, None
    return FailureAction.RESTART_RANK, None


def decide(
    policy: RestartPolicy,
    failure: Failure,
    exhausted: bool = False,
    rules: Sequence[FailureRule] = (),
) -> tuple[Decision, Reason | None, int | None]:
    """What to do with a rank whose pod stopped, the job's failure reason if it fails, and the index of the
    role's rule that decided (None: restartPolicy's, or none). `exhausted`: one more failure of its class is past
    the class's budget (budgets.charge), which fails a restart (reason BackoffLimitExceeded; the caller may name
    it more closely); an ignored failure is not charged, so the budget does not stop it."""
    action, rule = first_match(rules, policy, failure)
    decision = _ACTIONS[action]
    if decision == Decision.FAIL:
        return decision, Reason.FAILURE_RULE if rule is not None else Reason.FAILED, rule
    if decision != Decision.IGNORE and exhausted:
        return Decision.FAIL, Reason.BACKOFF_LIMIT, rule
    return decision, None, rule


def decide_restart(
    policy: RestartPolicy,
    failure: Failure,
    exhausted: bool = False,
    rules: Sequence[FailureRule] = (),
) -> tuple[Decision, Reason | None]:
    """`decide` without the rule's index."""
    decision, reason, _ = decide(policy, failure, exhausted, rules)
    return decision, reason


def backoff_seconds(rank_restarts: int, base: float, cap: float) -> float:
    """Wait before a rank's `rank_restarts`-th restart (1 for the first): base, 2 base, 4 base, ... up to cap."""
    if rank_restarts <= 0:
        return 0.0
    return min(cap, base * 2.0 ** min(rank_restarts - 1, 62))
