"""The failure table, pure: what a pod's end was (classify), whether the rank restarts under each restart policy
(decide_restart), and the back-off between restarts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError
from ringleader_api import FailureRule, Reason, RestartPolicy
from ringleader_operator.failures import Decision, Failure, Kind, backoff_seconds, classify, decide_restart

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
    assert decide_restart(policy, failure, restarts, limit) == want


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
        # (restartPolicy, the role's rules, the failure, restarts so far of backoffLimit 3) -> decision
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
    assert decide_restart(policy, failure, restarts, 3, rules) == want


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
