"""What a failure is and what it costs: its classes and actions, the rules that match a rank's end (exit codes,
reasons, conditions, exceptions), the restart backoff, the failure budgets and their escalation."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from .names import MAX_SECONDS, MAX_STEPS, Model


class FailureClass(StrEnum):
    """What a rank's failure is put down to (the operator's failures.py classes it; docs/operator.md lists how)."""

    INFRASTRUCTURE = "Infrastructure"  # a node lost, an eviction or preemption, a network or collective timeout, a GPU
    USER_CODE = "UserCode"  # the program's own error: an exception, a crash, its own exit code
    RESOURCES = "Resources"  # out of memory at the container's limit (or the GPU's)


class FailureAction(StrEnum):
    FAIL_JOB = "FailJob"
    RESTART_RANK = "RestartRank"
    RESTART_GANG = "RestartGang"
    IGNORE = "Ignore"


class ExitCodeOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"


MAX_RULES = 20  # failure rules per role

MAX_RULE_VALUES = 255  # exit codes or reasons one rule lists


class ExitCodes(Model):
    operator: ExitCodeOperator = Field(description="In: the exit code is one of `values`; NotIn: it is none of them.")
    values: list[int] = Field(
        min_length=1,
        max_length=MAX_RULE_VALUES,
        description="Exit codes of the trainer container, 1-255.",
        json_schema_extra={"items": {"type": "integer", "minimum": 1, "maximum": 255}},
    )

    @field_validator("values")
    @classmethod
    def _codes(cls, values: list[int]) -> list[int]:
        if any(not 1 <= v <= 255 for v in values):
            raise ValueError("exit codes are 1-255")
        return values


RULE_MATCHES = ("onExitCodes", "onReasons", "onPodConditions", "onClasses", "onExceptions")


class FailureRule(Model):
    """One failure rule: the first whose match holds decides what a rank's ended pod does (FailJob, RestartRank,
    RestartGang, Ignore). Exactly one of onExitCodes, onReasons, onPodConditions, onClasses, onExceptions."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                {
                    "rule": "[has(self.onExitCodes), has(self.onReasons), has(self.onPodConditions), "
                    "has(self.onClasses), has(self.onExceptions)].filter(x, x).size() == 1",
                    "message": f"a failure rule sets exactly one of {', '.join(RULE_MATCHES)}",
                }
            ]
        }
    )

    action: FailureAction = Field(
        description="FailJob fails the job at once; RestartRank restarts the rank (counted against backoffLimit); "
        "RestartGang restarts every rank (counted once); Ignore recreates the rank, not counted."
    )
    on_exit_codes: ExitCodes | None = Field(
        None, description="The trainer container exited with one of these codes (a program's exit, not an eviction)."
    )
    on_reasons: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_RULE_VALUES,
        description="The trainer container's termination reason (OOMKilled, Error, ContainerCannotRun, ...), the "
        "pod's status.reason (Evicted, NodeLost, ...) or the reason a container will not start (ImagePullBackOff, "
        "InvalidImageName, ErrImageNeverPull) is one of these.",
    )
    on_pod_conditions: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_RULE_VALUES,
        description="The reason of the pod's DisruptionTarget condition is one of these (EvictionByEvictionAPI, "
        "PreemptionByScheduler, TerminationByKubelet, DeletionByTaintManager, DeletionByPodGC).",
    )

    on_classes: list[FailureClass] | None = Field(
        None,
        min_length=1,
        max_length=3,
        description="The failure's class (Infrastructure, UserCode, Resources) is one of these (docs/operator.md).",
    )
    on_exceptions: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_RULE_VALUES,
        description="The exception the rank's termination message names (the trainer's exit record, or a Python "
        "traceback) is one of these, by its qualified name (torch.OutOfMemoryError) or its own (ValueError).",
        json_schema_extra={"items": {"type": "string", "maxLength": 253}},
    )

    @model_validator(mode="after")
    def _one_match(self) -> FailureRule:
        matches = (self.on_exit_codes, self.on_reasons, self.on_pod_conditions, self.on_classes, self.on_exceptions)
        if sum(x is not None for x in matches) != 1:
            raise ValueError(f"a failure rule sets exactly one of {', '.join(RULE_MATCHES)}")
        return self


def _wait(default: float, description: str) -> Any:
    """A field holding a wait in seconds: a finite number from 0 to MAX_SECONDS."""
    return Field(default, ge=0, le=MAX_SECONDS, allow_inf_nan=False, description=description)


class RestartBackoff(Model):
    base_seconds: float = _wait(1.0, "Wait before a rank's first restart; doubled for each next.")
    cap_seconds: float = _wait(60.0, "Longest wait between two restarts of the same rank.")


class FailureBudget(Model):
    """How many failures of one class the job restarts, and how fast (runPolicy.failureBudgets)."""

    limit: int | None = Field(
        None,
        ge=0,
        le=MAX_STEPS,
        description="Incidents of this class restarted within windowSeconds (failures within 30 s of an incident's "
        "first count once); the next one fails the job. Default: "
        "Infrastructure 20, UserCode runPolicy.backoffLimit, Resources 3.",
    )
    window_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_SECONDS,
        description="The count starts again this long after the first failure it holds. Default: Infrastructure "
        "3600; UserCode and Resources count over the job's whole life.",
    )
    same_error_limit: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description="This many incidents in a row with the same error (the exception's type and message) fail the "
        "job whatever the limit. Default: UserCode 3, others none.",
    )
    backoff: RestartBackoff | None = Field(
        None, description="Back-off between restarts of the same rank for this class. Default: restartBackoff."
    )


class FailureBudgets(Model):
    """Each class of failure has its own budget: a node's trouble does not use up the restarts meant for code."""

    infrastructure: FailureBudget = Field(default_factory=FailureBudget)
    user_code: FailureBudget = Field(default_factory=FailureBudget)
    resources: FailureBudget = Field(default_factory=FailureBudget)

    def of(self, kind: FailureClass) -> FailureBudget:
        return {
            FailureClass.INFRASTRUCTURE: self.infrastructure,
            FailureClass.USER_CODE: self.user_code,
            FailureClass.RESOURCES: self.resources,
        }[kind]


class Escalation(Model):
    """Graded escalation of counted failures (any class) within a window: the rank alone, then the whole gang,
    then the job fails (runPolicy.escalation)."""

    rank_restarts: int = Field(
        ge=0,
        le=MAX_STEPS,
        description="The first this many incidents within windowSeconds restart the failed rank alone (failures of "
        "ranks that ended within 30 s of an incident's first count once).",
    )
    gang_restarts: int = Field(
        0,
        ge=0,
        le=MAX_STEPS,
        description="The next this many restart every rank together (a rank alone did not hold); one incident more "
        "within the window fails the job (EscalationExhausted).",
    )
    window_seconds: int = Field(
        600, ge=1, le=MAX_SECONDS, description="The count starts again this long after the first incident it holds."
    )
