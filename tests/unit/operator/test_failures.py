"""The failure table, pure: what a pod's end was (classify), its class and evidence (failure_class), whether the
rank restarts under each restart policy and rule (decide_restart), and the back-off between restarts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from ringleader_api import FailureClass, FailureRule, Reason, RestartPolicy
from ringleader_operator.evidence import Said
from ringleader_operator.failures import (
    Decision,
    Failure,
    Kind,
    backoff_seconds,
    classify,
    decide_restart,
    failure_class,
    matches,
)

E, EV, NL, DEL, ST = Kind.EXIT, Kind.EVICTED, Kind.NODE_LOST, Kind.DELETED, Kind.STOPPED


@pytest.mark.parametrize(
    ("exit_code", "pod_reason", "disruption", "kind"),
    [
        (1, "Error", "", E),
        (137, "OOMKilled", "", E),
        (143, "Error", "EvictionByEvictionAPI", EV),  # SIGTERMed by an eviction: the eviction's doing
        (None, "Evicted", "", EV),  # the kubelet evicted it under node pressure
        (None, "", "PreemptionByScheduler", EV),
        (None, "", "TerminationByKubelet", EV),
        (None, "", "DeletionByTaintManager", NL),  # its node became unreachable
        (None, "", "DeletionByPodGC", NL),  # its node object was deleted
        (None, "NodeRestarted", "", NL),  # the process node restarted under it
        (None, "NodeLost", "", NL),
        (None, "UnexpectedAdmissionError", "", EV),  # failed without running: not the program's fault
        (None, "", "", DEL),
        (202, "Error", "", ST),  # the trainer stopped on request with its checkpoint written
        (202, "Error", "EvictionByEvictionAPI", ST),  # whatever asked it to: nothing was lost
    ],
)
def test_classify(exit_code: int | None, pod_reason: str, disruption: str, kind: Kind) -> None:
    assert classify(exit_code, pod_reason, disruption).kind == kind


RESTART, FAIL = (Decision.RESTART, None), (Decision.FAIL, Reason.FAILED)
LIMIT = (Decision.FAIL, Reason.BACKOFF_LIMIT)
P = RestartPolicy


@pytest.mark.parametrize(
    ("policy", "failure", "restarts", "limit", "want"),
    [
        (P.NEVER, Failure(E, 1), 0, 3, FAIL),
        (P.NEVER, Failure(E, 137), 0, 3, FAIL),
        (P.NEVER, Failure(EV), 0, 3, RESTART),  # an eviction is no failure of the program
        (P.NEVER, Failure(NL), 0, 3, RESTART),
        (P.NEVER, Failure(NL), 3, 3, LIMIT),
        (P.ON_FAILURE, Failure(E, 1), 0, 3, RESTART),
        (P.ON_FAILURE, Failure(E, 1), 3, 3, LIMIT),
        (P.ON_FAILURE, Failure(DEL), 0, 3, RESTART),
        (P.ALWAYS, Failure(E, 2), 2, 3, RESTART),
        (P.ALWAYS, Failure(Kind.EXITED), 0, 3, RESTART),
        (P.EXIT_CODE, Failure(E, 137), 0, 3, RESTART),  # OOM kill / SIGKILL
        (P.EXIT_CODE, Failure(E, 143), 0, 3, RESTART),  # SIGTERM
        (P.EXIT_CODE, Failure(E, 200), 0, 3, RESTART),  # the trainer's rendezvous timeout
        (P.EXIT_CODE, Failure(E, 201), 0, 3, RESTART),  # the trainer lost a peer
        (P.EXIT_CODE, Failure(E, 1), 0, 3, FAIL),  # the program's own error
        (P.EXIT_CODE, Failure(E, 3), 0, 3, FAIL),  # the trainer's bad configuration
        (P.EXIT_CODE, Failure(E, 127), 0, 3, FAIL),
        (P.EXIT_CODE, Failure(EV), 0, 3, RESTART),  # evicted / lost: infrastructure
        (P.EXIT_CODE, Failure(E, 137), 3, 3, LIMIT),  # an OOM loop ends
        (P.EXIT_CODE, Failure(E, 1), 3, 3, FAIL),  # a user error says so, even past the limit
    ],
)
def test_decide_restart(
    policy: RestartPolicy, failure: Failure, restarts: int, limit: int, want: tuple[Decision, Reason | None]
) -> None:
    assert decide_restart(policy, failure, exhausted=restarts >= limit) == want


def rule(action: str, **match: Any) -> FailureRule:
    return FailureRule.model_validate({"action": action, **match})


OOM = Failure(E, 137, "OOMKilled", reason="OOMKilled")
EVICTED = Failure(EV, 143, "EvictionByEvictionAPI", reason="", disruption="EvictionByEvictionAPI")
FAIL_OOM = rule("FailJob", onReasons=["OOMKilled"])
RESTART_201 = rule("RestartRank", onExitCodes={"operator": "In", "values": [201]})
IGNORE_EVICTIONS = rule("Ignore", onPodConditions=["EvictionByEvictionAPI", "PreemptionByScheduler"])
GANG_NOT_1 = rule("RestartGang", onExitCodes={"operator": "NotIn", "values": [1, 2]})
BY_RULE = (Decision.FAIL, Reason.FAILURE_RULE)


@pytest.mark.parametrize(
    ("policy", "rules", "failure", "restarts", "want"),
    [
        # (restartPolicy, the role's rules, the failure, restarts so far of a budget of 3) -> decision
        (P.EXIT_CODE, [FAIL_OOM], OOM, 0, BY_RULE),  # the rule first: 137 would be retried under ExitCode
        (P.ON_FAILURE, [FAIL_OOM], Failure(E, 1, reason="Error"), 0, RESTART),  # no rule holds: the policy's
        (P.NEVER, [RESTART_201], Failure(E, 201, reason="Error"), 0, RESTART),  # before Never's own rule
        (P.NEVER, [RESTART_201], Failure(E, 1, reason="Error"), 0, FAIL),  # Never's rule: the program failed
        (P.NEVER, [RESTART_201], Failure(E, 201), 3, LIMIT),  # a restart by rule is counted
        (P.ON_FAILURE, [IGNORE_EVICTIONS], EVICTED, 3, (Decision.IGNORE, None)),  # not counted: past the limit too
        (P.ON_FAILURE, [RESTART_201], EVICTED, 0, RESTART),  # exit codes match a program's exits only
        (P.ON_FAILURE, [GANG_NOT_1], Failure(E, 201), 0, (Decision.RESTART_GANG, None)),
        (P.ON_FAILURE, [GANG_NOT_1], Failure(E, 1), 0, RESTART),
        (P.ON_FAILURE, [IGNORE_EVICTIONS, FAIL_OOM], OOM, 0, BY_RULE),  # in order: the first that holds
        (P.EXIT_CODE, [], OOM, 0, RESTART),  # ExitCode, written as its rule: 1-127 fail
    ],
    ids=["oom-fails", "no-match", "201-restarts", "never-1", "by-rule-limit", "ignore", "exit-not-eviction",
         "gang", "gang-notin", "order", "builtin"],
)  # fmt: skip
def test_failure_rules(
    policy: RestartPolicy, rules: list[FailureRule], failure: Failure, restarts: int, want: tuple[Any, ...]
) -> None:
    assert decide_restart(policy, failure, restarts >= 3, rules) == want


def test_classify_keeps_the_reasons_rules_match() -> None:
    f = classify(137, "OOMKilled", "")
    assert (f.reason, f.disruption) == ("OOMKilled", "")
    f = classify(143, "", "EvictionByEvictionAPI")
    assert (f.kind, f.disruption) == (EV, "EvictionByEvictionAPI")


@pytest.mark.parametrize(
    "body",
    [
        {"action": "FailJob"},
        {"action": "FailJob", "onReasons": ["OOMKilled"], "onPodConditions": ["DeletionByPodGC"]},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}},
        {"action": "FailJob", "onExitCodes": {"operator": "In", "values": []}},
        {"action": "Retry", "onReasons": ["OOMKilled"]},
    ],
    ids=["no-match", "two-matches", "exit-0", "no-values", "unknown-action"],
)
def test_a_rule_that_cannot_be_evaluated_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        FailureRule.model_validate(body)


@pytest.mark.parametrize(
    ("rank_restarts", "base", "cap", "want"),
    [(0, 1, 60, 0), (1, 1, 60, 1), (2, 1, 60, 2), (3, 1, 60, 4), (7, 1, 60, 60), (500, 1, 60, 60), (3, 0, 60, 0),
     (2, 10, 15, 15)],
)  # fmt: skip
def test_backoff_seconds(rank_restarts: int, base: float, cap: float, want: float) -> None:
    assert backoff_seconds(rank_restarts, base, cap) == want


INF, CODE, RES = FailureClass.INFRASTRUCTURE, FailureClass.USER_CODE, FailureClass.RESOURCES


def ended(code: int, exception: str = "", message: str = "", reason: str = "Error") -> Failure:
    """A program's exit with `code` whose termination message named `exception` (none: it named none)."""
    frames = ("train.py:190 in train",) if exception else ()
    return Failure(E, code, reason, reason=reason, said=Said(exception, message, frames))


@pytest.mark.parametrize(
    ("failure", "want"),
    [
        # Kubernetes' doing: the infrastructure's, whatever the program said.
        (Failure(EV, 143, "EvictionByEvictionAPI", disruption="EvictionByEvictionAPI"),
         (INF, "was evicted (EvictionByEvictionAPI)")),
        (Failure(NL, None, "DeletionByTaintManager"), (INF, "was lost with its node (DeletionByTaintManager)")),
        (Failure(DEL, None, "pod disappeared"), (INF, "was deleted (pod disappeared)")),
        (Failure(Kind.EXITED), (INF, "exited")),
        # The kernel's OOM kill at the container's limit, and running out of memory as the exception says.
        (ended(137, reason="OOMKilled"), (RES, "OOMKilled: out of memory at the container's limit")),
        (ended(1, "torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"),
         (RES, "out of memory: torch.OutOfMemoryError: CUDA out of memory.")),
        # A GPU's error: the infrastructure's, though the program raised it.
        (ended(1, "RuntimeError", "CUDA error: an illegal memory access was encountered"),
         (INF, "a GPU error: RuntimeError: CUDA error")),
        (ended(1, "torch.distributed.DistBackendError", "NCCL error in: ProcessGroupNCCL.cpp:1970"),
         (INF, "a GPU error: torch.distributed.DistBackendError")),
        # The network's, a collective's timeout, a lost peer.
        (ended(1, "torch.distributed.DistNetworkError", "Connection reset by peer"),
         (INF, "a network or collective failure: torch.distributed.DistNetworkError")),
        (ended(1, "RuntimeError", "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)"),
         (INF, "a network or collective failure")),
        (ended(201, "ringleader_trainer.strategies.ring.PeerLost", "worker 2 closed the connection"),
         (INF, "a collective failed or timed out (a peer lost): ringleader_trainer.strategies.ring.PeerLost")),
        (ended(200), (INF, "the rendezvous timed out")),
        # A peer's name that does not resolve yet (a headless service's records come a moment after its pods).
        (ended(1, "socket.gaierror", "[Errno -3] Temporary failure in name resolution"),
         (INF, "a network or collective failure: socket.gaierror")),
        (ended(1, "RuntimeError", "[Errno -2] Name or service not known"), (INF, "a network or collective failure")),
        # The program's own.
        (ended(1, "ValueError", "bad shape"), (CODE, "ValueError: bad shape (train.py:190 in train)")),
        (ended(3, "ringleader_trainer.exitcodes.ConfigError", "--steps must be at least 1"),
         (CODE, "ringleader_trainer.exitcodes.ConfigError: --steps must be at least 1")),
        (ended(1), (CODE, "exit code 1")),  # a script that said nothing
        (ended(139), (CODE, "crashed: SIGSEGV")),
        (ended(134), (CODE, "crashed: SIGABRT")),
        (ended(137), (INF, "killed from outside: SIGKILL")),
        (ended(143), (INF, "killed from outside: SIGTERM")),
        (ended(255), (CODE, "exit code 255")),  # 127 over 128 is no signal
    ],
    ids=["evicted", "node-lost", "deleted", "exited", "oom-killed", "cuda-oom", "cuda-error", "nccl-error", "network",
         "watchdog", "peer-lost", "rendezvous", "dns", "dns-wrapped", "exception", "trainer-config", "no-word", "segv",
         "abort", "sigkill", "sigterm", "255"],
)  # fmt: skip
def test_failure_class(failure: Failure, want: tuple[FailureClass, str]) -> None:
    kind, evidence = failure_class(failure)
    assert kind == want[0] and evidence.startswith(want[1]), (kind, evidence)


@pytest.mark.parametrize(
    ("match", "failure", "holds"),
    [
        ({"onClasses": ["Infrastructure"]}, Failure(NL), True),
        ({"onClasses": ["Infrastructure"]}, ended(1, "ValueError", "x"), False),
        ({"onClasses": ["UserCode", "Resources"]}, ended(137, reason="OOMKilled"), True),
        ({"onExceptions": ["ValueError"]}, ended(1, "ValueError", "x"), True),
        ({"onExceptions": ["OutOfMemoryError"]}, ended(1, "torch.OutOfMemoryError", "x"), True),  # its own name
        ({"onExceptions": ["torch.OutOfMemoryError"]}, ended(1, "torch.OutOfMemoryError", "x"), True),
        ({"onExceptions": ["ValueError"]}, ended(1), False),  # it named none
        ({"onExceptions": ["ValueError"]}, ended(1, "KeyError", "x"), False),
    ],
    ids=["class", "other-class", "classes", "exception", "short-name", "qualified", "none-named", "other"],
)
def test_rules_on_classes_and_exceptions(match: dict[str, Any], failure: Failure, holds: bool) -> None:
    assert matches(rule("FailJob", **match), failure) is holds
