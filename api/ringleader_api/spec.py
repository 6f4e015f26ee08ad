"""What a user asks for: the roles and their replicas (`ReplicaSpec`), placement, checkpoints, the run policy, and the
spec (`TrainingJobSpec`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
)

from .failures import MAX_RULES, Escalation, FailureBudgets, FailureRule, RestartBackoff
from .names import (
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_RINGLEADER,
    MAX_GPUS,
    MAX_GRACE_SECONDS,
    MAX_KEEP,
    MAX_REPLICAS,
    MAX_SECONDS,
    MAX_STEPS,
    RANK_ENV,
    Model,
)
from .strategies import (
    STRATEGY_ENV,
    StrategySettings,
    TorchrunSettings,
)


class RestartPolicy(StrEnum):
    NEVER = "Never"
    ON_FAILURE = "OnFailure"
    ALWAYS = "Always"
    EXIT_CODE = "ExitCode"


class StallAction(StrEnum):
    RECOVER = "Recover"
    FAIL = "Fail"


class StragglerPolicy(StrEnum):
    REPORT = "Report"
    REPLACE = "Replace"


class CleanPodPolicy(StrEnum):
    NONE = "None"
    RUNNING = "Running"
    ALL = "All"


class Role(StrEnum):
    """A replica role; its value is the role label and the middle of pod names (`<job>-<role>-<i>`)."""

    WORKER = "worker"
    PS = "ps"


ROLE_NAMES = {Role.WORKER: "worker", Role.PS: "parameter server"}  # how messages name a role

ROLE_FIELDS = {Role.WORKER: "spec.workers", Role.PS: "spec.parameterServers"}  # where messages find its spec


class ReplicaSpec(Model):
    replicas: int = Field(
        1,
        ge=1,
        le=MAX_REPLICAS,
        description="Number of pods (ranks) of this role. Workers of an elastic job (minReplicas or maxReplicas "
        "set) may change it, also with `kubectl scale`; otherwise it is immutable.",
    )
    min_replicas: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="Workers only, every strategy but parameter-server and pipeline: the fewest workers `replicas` "
        "may be scaled to, and the fewest the job runs with when `replicas` do not fit (auto-elastic admission: "
        "status.elastic).",
    )
    max_replicas: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="Workers only, every strategy but parameter-server and pipeline: the most workers `replicas` may "
        "be scaled to.",
    )
    gpus: int = Field(
        0, ge=0, le=MAX_GPUS, description="GPUs per pod; becomes the nvidia.com/gpu limit of the trainer container."
    )
    procs_per_pod: int = Field(
        1,
        ge=1,
        le=MAX_GPUS,
        description="Workers only: training processes (ranks) per pod, torchrun's nproc-per-node. The trainer's "
        "supervisor (`python -m ringleader_trainer`) or `torchrun` starts them, each with its own RANK and "
        "LOCAL_RANK; with GPUs, one GPU each (gpus must equal it). The world is replicas x procsPerPod ranks.",
    )
    restart_policy: RestartPolicy = Field(
        RestartPolicy.ON_FAILURE,
        description="What happens when a pod of this role fails: Never fails the job; OnFailure and Always "
        "recreate the rank; ExitCode retries signal and infrastructure exits (128-255, which include the "
        "trainer's retryable codes) and fails on 1-127. Evictions and node loss are retried under every policy.",
    )
    failure_rules: list[FailureRule] = Field(
        default_factory=list,
        max_length=MAX_RULES,
        description="Rules for a rank's pod that ended (failed, was evicted, lost its node), evaluated in order "
        "before restartPolicy's own (docs/operator.md): the first that matches decides.",
    )
    template: dict[str, Any] = Field(
        default_factory=dict,
        description="A PodTemplateSpec. The container named 'trainer' (else the first) runs the training.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class PlacementMode(StrEnum):
    REQUIRED = "Required"
    PREFERRED = "Preferred"


# A node label key: an optional DNS-subdomain prefix and a name (Kubernetes' qualified names).
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"  # prefix
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"  # name
)


class Placement(Model):
    topology_key: str = Field(
        max_length=316,
        pattern=LABEL_KEY_PATTERN,
        description="The node label whose values are the topology domains (a rack, a block, an NVLink domain), "
        "e.g. topology.kubernetes.io/rack. Nodes without it take none of the job's pods.",
    )
    mode: PlacementMode = Field(
        PlacementMode.REQUIRED,
        description="Required: every pod in one domain (a gang that fits no single domain waits, saying what each "
        "domain is short of). Preferred: the fewest domains the gang fits in.",
    )

    @property
    def required(self) -> bool:
        return self.mode == PlacementMode.REQUIRED


class CheckpointSpec(Model):
    interval_steps: int = Field(100, ge=1, le=MAX_STEPS, description="Steps between checkpoints (and one at the end).")
    claim_name: str | None = Field(None, description="PersistentVolumeClaim holding checkpoints, mounted in every pod.")
    directory: str | None = Field(
        None,
        description="Path inside the pods where the ranks keep checkpoints. Default: "
        "/checkpoints/<namespace>/<name>/<uid>, this job's own, so a new job never resumes another's; give "
        "an earlier job's directory to continue from its checkpoints. The claim is mounted here, or at "
        "/checkpoints by default; without claimName, whatever the template mounts there, else the container's own "
        "filesystem (the trainer image's /checkpoints is writable by its user; checkpoints then last as long as "
        "the pod).",
    )
    keep: int = Field(3, ge=1, le=MAX_KEEP, description="Newest checkpoints kept.")
    stop_grace_period_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_GRACE_SECONDS,
        description="The trainer pods' grace period: on SIGTERM (an eviction, a drain, a suspend) every rank "
        "saves the step it stops at within it. Default: sized from worker 0's measured save and step times "
        "(3 x (save + 2 steps) + 10 s, at least 30 s; 60 s before the first save), unless the template sets "
        "terminationGracePeriodSeconds.",
    )


class RunPolicy(Model):
    backoff_limit: int = Field(
        3,
        ge=0,
        le=MAX_STEPS,
        description="Restarts for failures of the program's own (class UserCode) allowed across the job before it "
        "fails, counted by incident (ranks failing within 30 s of each other count once); infrastructure and "
        "resource failures have their own budgets (failureBudgets).",
    )
    failure_budgets: FailureBudgets = Field(
        default_factory=FailureBudgets,
        description="Per class of failure (infrastructure, userCode, resources): how many are restarted, within "
        "what window, how many of the same error in a row end it, and the back-off (docs/operator.md).",
    )
    escalation: Escalation | None = Field(
        None,
        description="Restart the rank, after rankRestarts failures within windowSeconds restart the gang, after "
        "gangRestarts more fail the job. Default: none (each failure restarts its rank, within its class's budget).",
    )
    restart_backoff: RestartBackoff = Field(
        default_factory=RestartBackoff, description="Exponential back-off between restarts of the same rank."
    )
    active_deadline_seconds: int | None = Field(
        None, ge=1, le=MAX_SECONDS, description="Fail a job running longer than this."
    )
    ttl_seconds_after_finished: int | None = Field(
        None, ge=0, le=MAX_SECONDS, description="Delete a finished job after this."
    )
    clean_pod_policy: CleanPodPolicy = Field(
        CleanPodPolicy.RUNNING, description="Which pods to delete when the job finishes: None, Running or All."
    )
    elastic_grow_after_seconds: int = Field(
        60,
        ge=0,
        le=MAX_SECONDS,
        description="An elastic job (spec.workers.minReplicas) running with fewer workers than replicas grows to "
        "the most that fit no sooner than this after its last resize (each resize restarts every worker from the "
        "latest checkpoint); a scale-up by kubectl scale is tried at once.",
    )
    suspend: bool = Field(
        False,
        description="A suspended job has no pods; unsuspending resumes from a checkpoint (the contract Kueue drives: "
        "a job created suspended waits until something unsuspends it).",
    )
    scheduling_timeout_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_SECONDS,
        description="Fail the job when its pods have waited this long for room to run all at once (gang admission).",
    )
    priority_class_name: str | None = Field(
        None,
        description="PriorityClass of every pod (and of the PodGroup under a gang scheduler); a template's own wins.",
    )
    progress_deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_SECONDS,
        description="A Running job whose step does not advance for this long is Stalled: the condition names "
        "the rank that stopped first (and its node), and onStall says what follows. Counted from the last step "
        "seen to advance, once the job has made its first step since it turned Running (start-up has its own "
        "deadline, startupDeadlineSeconds); leave room for the longest checkpoint save. A job whose progress "
        "cannot be read (a script that serves no metrics page, a network that drops the operator's reads) is "
        "never Stalled: the condition is Unknown, reason ProgressUnavailable. Default: no deadline.",
    )
    startup_deadline_seconds: int | None = Field(
        None,
        ge=1,
        le=MAX_SECONDS,
        description="With progressDeadlineSeconds: a job that turned Running (started, resumed or recovered) and "
        "makes no first step for this long is Stalled (importing, loading a checkpoint, compiling, waiting for a "
        "replaced rank count here, not against progressDeadlineSeconds). Default: 600, or "
        "progressDeadlineSeconds if longer.",
    )
    on_stall: StallAction = Field(
        StallAction.RECOVER,
        description="What a stall does: Recover replaces the rank that stopped first (its peers recover in place "
        "and resume with it from the newest checkpoint; not counted against backoffLimit); Fail fails the job.",
    )
    stall_limit: int = Field(
        3,
        ge=0,
        le=MAX_STEPS,
        description="onStall Recover: stalls recovered from before the next one fails the job.",
    )
    straggler_threshold: float | None = Field(
        None,
        ge=1.1,
        le=1000,
        allow_inf_nan=False,
        description="A Running job's rank whose work per step (outside exchanges) is this many times the median "
        "of its role's other ranks, in every reading for stragglerWindowSeconds, is a straggler: the Straggler "
        "condition names it and its node. Default: stragglers are not looked for.",
    )
    straggler_window_seconds: int = Field(
        60, ge=1, le=MAX_SECONDS, description="How long a rank must stay that slow to be named a straggler."
    )
    straggler_policy: StragglerPolicy = Field(
        StragglerPolicy.REPORT,
        description="Report names stragglers; Replace also recreates each once (stopping it with its checkpoint "
        "when the job checkpoints), its replacement preferring another node. Not counted against backoffLimit.",
    )


class TrainingJobSpec(StrategySettings):
    workers: ReplicaSpec = Field(description="The worker ranks.")
    torchrun: TorchrunSettings | None = Field(
        None, description="Workers started with torchrun: its rendezvous (static, or c10d: elastic) and restarts."
    )
    parameter_servers: ReplicaSpec | None = Field(None, description="Parameter-server shards (parameter-server only).")
    checkpoint: CheckpointSpec | None = Field(None, description="Periodic checkpoints and resume.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy, description="Restart budget, deadlines, cleanup.")
    placement: Placement | None = Field(
        None, description="Topology-aware placement of the gang: one domain, or as few as it fits in."
    )
    managed_by: str | None = Field(
        None,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-zA-Z0-9]([-a-zA-Z0-9_.]*[a-zA-Z0-9])?$",
        description=f"The controller that acts on the job: unset or {MANAGED_BY_RINGLEADER} for Ringleader's "
        f"operator; another (e.g. {MANAGED_BY_MULTIKUEUE}) and the operator leaves the job alone, its pods and "
        "status to that controller. A domain-prefixed path. Immutable.",
    )


# What the operator writes into every rank's container (a template may not set these).
CONTRACT_ENV = RANK_ENV | STRATEGY_ENV
