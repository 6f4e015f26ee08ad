"""The TrainingJob API (group ringleader.dev, version v1alpha1): the single source of truth.

These pydantic models define the spec the operator accepts and the status it writes; `crd.py` generates
`crds/trainingjob.yaml` from them (schema, defaults, CEL rules), and the operator parses every object it
sees through `TrainingJob.model_validate`, so what the API server admits and what the operator understands
cannot drift apart. The CLI and SDK (cli/) build and read jobs through the same models. Field names are the
camelCase JSON names; Python attributes are snake_case.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FieldSerializationInfo,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from . import ranges as ranges  # re-exported: status readers decode range strings

GROUP = "ringleader.dev"
VERSION = "v1alpha1"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAMES = ["tj"]
API_VERSION = f"{GROUP}/{VERSION}"

# What every pod of a job carries (`kubectl get pods -l ringleader.dev/job-name=NAME`): the job, the rank's role
# and index, and the rank's attempt (0 for its first pod; its pods keep one name, `<job>-<role>-<index>`).
LABEL_JOB = "ringleader.dev/job-name"
LABEL_ROLE = "ringleader.dev/replica-type"
LABEL_INDEX = "ringleader.dev/replica-index"
ANNOTATION_ATTEMPT = "ringleader.dev/attempt"

# spec.managedBy: the controller that acts on a job. Ringleader's operator acts only on jobs without the field or
# with its own name; any other (MultiKueue's, on a manager cluster) is left alone.
MANAGED_BY_RINGLEADER = "ringleader.dev/operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"

# The variables of the environment contract the operator writes into the trainer container
# (docs/env-contract.md; a unit test holds this to rank_env and to what the trainer reads). A template that sets
# one is refused: RANK=0 on every worker would hang the rendezvous. torchrun's PET_* have their own check
# (the operator's launchers.split_world): a template may raise PET_NPROC_PER_NODE.
CONTRACT_ENV = frozenset(
    {
        "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
        "RINGLEADER_PROCS_PER_POD",
        "RINGLEADER_JOB_NAME", "RINGLEADER_NAMESPACE", "RINGLEADER_ROLE", "RINGLEADER_INDEX", "RINGLEADER_STRATEGY",
        "RINGLEADER_NUM_WORKERS", "RINGLEADER_NUM_PS", "RINGLEADER_GLOBAL_RANK", "RINGLEADER_GLOBAL_WORLD_SIZE",
        "RINGLEADER_METRICS_PORT", "RINGLEADER_PS_MODE", "RINGLEADER_PS_MAX_STALENESS", "RINGLEADER_PS_PORT",
        "RINGLEADER_PS_ADDRS", "RINGLEADER_PS_BACKUP", "RINGLEADER_LOCAL_SGD_PERIOD", "RINGLEADER_SHARDED_STAGE",
        "RINGLEADER_SHARDED_REPLICAS",
        "RINGLEADER_PIPELINE_STAGES",
        "RINGLEADER_PIPELINE_MICRO_BATCHES", "RINGLEADER_MIN_WORKERS", "RINGLEADER_CHECKPOINT_DIR",
        "RINGLEADER_CHECKPOINT_INTERVAL", "RINGLEADER_CHECKPOINT_KEEP", "RINGLEADER_TOKEN_FILE", "RINGLEADER_ATTEMPT",
    }
)  # fmt: skip

# Longest name a pod, its hostname (a DNS label) and the job's Service may have.
DNS_LABEL_MAX = 63


class Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", use_enum_values=False)


class Strategy(StrEnum):
    ALLREDUCE = "allreduce"
    PARAMETER_SERVER = "parameter-server"
    LOCAL_SGD = "local-sgd"
    SHARDED = "sharded"
    PIPELINE = "pipeline"


class PSMode(StrEnum):
    SYNCHRONOUS = "synchronous"
    ASYNCHRONOUS = "asynchronous"
    BOUNDED_STALENESS = "bounded-staleness"


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


# Upper bounds of the API (the CRD's `maximum`s): what no real job needs and what keeps the operator's arithmetic
# in range (a deadline of 10^12 s overflowed datetime in every round). The operator's own cap on ranks per job
# is lower (--max-replicas-per-job).
MAX_REPLICAS = 100_000
MAX_GPUS = 128  # per pod
MAX_SECONDS = 10**9  # about 31 years
MAX_GRACE_SECONDS = 86400  # a pod's grace period: a day
MAX_STEPS = 10**9  # step counts, intervals, restart budgets
MAX_KEEP = 1000  # checkpoints kept
MAX_RANK_ENTRIES = 64  # status.ranks keeps at most this many entries of ranks replaced and running again


class ParameterServerSettings(Model):
    mode: PSMode = Field(PSMode.SYNCHRONOUS, description="How the parameter servers apply pushed gradients.")
    max_staleness: int | None = Field(
        None,
        ge=1,
        le=MAX_STEPS,
        description="bounded-staleness only: how many steps a worker may run ahead of the slowest.",
    )
    backup: bool = Field(
        False,
        description="Keep each shard's state on the next shard (primary/backup; two or more parameter servers): "
        "every update a shard applies is sent to its backup before any worker sees it, so a lost shard's "
        "replacement serves on from the backup's copy and the workers take their places back there, with no "
        "checkpoint read. Costs one copy of each shard's gradients a step between shards. Without it a lost "
        "shard sends every rank back to the newest checkpoint.",
    )


class LocalSGDSettings(Model):
    period: int = Field(8, ge=1, le=MAX_STEPS, description="Local steps between parameter averaging rounds (tau).")


class ShardedSettings(Model):
    stage: int = Field(
        3,
        ge=1,
        le=3,
        description="What the workers shard, as DeepSpeed's ZeRO stages: 1 the optimizer state (DDP's allreduce "
        "with PyTorch's ZeroRedundancyOptimizer); 2 also the gradients (FSDP2, parameters kept whole from "
        "forward to backward); 3 also the parameters (FSDP2, each layer gathered only while it runs).",
    )
    replicas: int = Field(
        1,
        ge=1,
        le=MAX_REPLICAS,
        description="Stages 2-3: into how many replica groups the worker ranks split (HSDP: each group shards the "
        "model over its ranks, and the groups hold the same shards; gradients are reduce-scattered in a group and "
        "averaged across groups). With 2 or more a lost rank's replacement heals from the rank holding its shard "
        "in another group, with no checkpoint read; with 1 it resumes from the newest checkpoint. Must divide "
        "the worker ranks; not with minReplicas or maxReplicas.",
    )


class PipelineSettings(Model):
    stages: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="Pipeline stages: the model is split into this many consecutive parts, one per worker of a "
        "pipeline; spec.workers.replicas / stages pipelines train side by side as data-parallel replicas (it must "
        "divide replicas). Default: every worker is a stage of one pipeline.",
    )
    micro_batches: int = Field(
        4,
        ge=1,
        le=MAX_STEPS,
        description="Micro-batches each batch is split into (GPipe): the pipeline's idle share is "
        "(stages - 1) / (microBatches + stages - 1). The batch size must be a multiple of it.",
    )


class Rendezvous(StrEnum):
    STATIC = "static"
    C10D = "c10d"


class TorchrunSettings(Model):
    """How workers started with `torchrun` (no options: the operator writes them as PET_* variables) meet."""

    rendezvous: Rendezvous = Field(
        Rendezvous.STATIC,
        description="static: one world of exactly the job's worker pods, re-formed (every pod recreated) when its "
        "size changes. c10d: torchrun's elastic rendezvous, hosted by worker 0's agent on port 29400, for "
        "workers.minReplicas to maxReplicas pods: a lost pod's peers restart their processes and meet again "
        "without it while the operator replaces it, and a resize adds or removes pods without recreating the "
        "others (docs/env-contract.md). For torchrun scripts; Ringleader's own trainer resizes by re-forming.",
    )
    max_restarts: int = Field(
        3,
        ge=0,
        le=MAX_STEPS,
        description="c10d: how often each pod's torchrun agent restarts its processes after a failure (a peer lost) "
        "before the pod fails; restarts to admit a joining pod are not counted.",
    )


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
        description="Workers only, allreduce, local-sgd and sharded: the fewest workers `replicas` may be scaled to, "
        "and the fewest the job runs with when `replicas` do not fit (auto-elastic admission: status.elastic).",
    )
    max_replicas: int | None = Field(
        None,
        ge=1,
        le=MAX_REPLICAS,
        description="Workers only, allreduce, local-sgd and sharded: the most workers `replicas` may be scaled to.",
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


class TrainingJobSpec(Model):
    strategy: Strategy = Field(Strategy.ALLREDUCE, description="How ranks synchronize. Immutable.")
    parameter_server: ParameterServerSettings | None = Field(None, description="parameter-server settings.")
    local_sgd: LocalSGDSettings | None = Field(None, alias="localSGD", description="local-sgd settings.")
    sharded: ShardedSettings | None = Field(None, description="sharded settings.")
    pipeline: PipelineSettings | None = Field(None, description="pipeline settings.")
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


class ConditionType(StrEnum):
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    ADMITTED = "Admitted"  # gang admission: False while the pods wait for room to run all at once
    STALLED = "Stalled"  # runPolicy.progressDeadlineSeconds passed without progress; False once it is past
    STRAGGLER = "Straggler"  # some rank works runPolicy.stragglerThreshold times slower than its peers


class Reason(StrEnum):
    """Every reason the operator writes in conditions and events (CamelCase, as Kubernetes reasons are)."""

    CREATED = "JobCreated"
    RUNNING = "JobRunning"
    PENDING = "PodsPending"
    RESTARTING = "RankRestarting"
    STOPPED = "RankStopped"  # asked to stop, it saved a checkpoint where it stopped: recreated, not counted
    EVICTED = "RankEvicted"
    NODE_LOST = "NodeLost"
    POD_DELETED = "PodDeleted"
    SUCCEEDED = "JobSucceeded"
    FAILED = "RankFailed"
    FAILURE_RULE = "FailureRule"  # a role's failure rule with action FailJob matched a rank's ending
    GANG_RESTART = "GangRestart"  # a failure rule's RestartGang: every other rank recreated (not counted)
    IGNORED = "FailureIgnored"  # a failure rule's Ignore: the rank recreated, not counted
    BACKOFF_LIMIT = "BackoffLimitExceeded"
    ESCALATION_EXHAUSTED = "EscalationExhausted"  # runPolicy.escalation: past its rank and gang restarts
    FAILURE_BUDGET = "FailureBudgetExceeded"  # a class's failureBudgets limit or sameErrorLimit reached
    INVALID_SPEC = "InvalidSpec"
    SUSPENDED = "JobSuspended"
    RESUMED = "JobResumed"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    RESIZED = "Resized"
    ADMITTED = "GangAdmitted"
    UNSCHEDULABLE = "Unschedulable"  # the pods could not run together even on the cluster's empty nodes
    WAITING_FOR_CAPACITY = "WaitingForCapacity"  # they could, once others free the room
    FOREIGN_PODS = "ForeignPodsIgnored"  # pods carrying the job's labels that it does not own
    # worker 0's metrics page could not be read, several times (an event); Stalled Unknown: no stall can be told
    PROGRESS_UNAVAILABLE = "ProgressUnavailable"
    PROGRESS_DEADLINE = "ProgressDeadlineExceeded"  # no step for runPolicy.progressDeadlineSeconds: Stalled
    PROGRESS_RESUMED = "ProgressResumed"  # the job got past the step it stalled at
    PROGRESS_AVAILABLE = "ProgressAvailable"  # Stalled Unknown (progress unreadable) turns False: it is read again
    RANK_STALLED = "RankStalled"  # the rank that stopped first in a stall, replaced (not counted)
    RANK_NOT_STARTED = "RankNotStarted"  # its container could not start (its image not pulled): counted
    STALL_LIMIT = "StallLimitExceeded"  # one stall more than runPolicy.stallLimit
    STRAGGLERS = "RanksStraggling"  # Straggler=True: ranks working runPolicy.stragglerThreshold x their peers
    NO_STRAGGLERS = "NoStragglers"
    RANK_STRAGGLED = "RankStraggled"  # a straggler replaced (stragglerPolicy Replace; not counted)
    RANK_OUTPUT = "RankOutput"  # the last lines a failed rank wrote (its termination message), kept past its pod
    # Kueue (label kueue.x-k8s.io/queue-name): Suspended=True while the job's Workload waits for admission, and
    # after Kueue evicted it (preemption, a stopped queue) until it is admitted again.
    QUEUED = "Queued"
    QUEUE_ADMITTED = "QueueAdmitted"
    QUEUE_EVICTED = "QueueEvicted"


class Condition(Model):
    type: ConditionType
    status: str = Field(description="True, False or Unknown.")
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""
    observed_generation: int = 0


class ReplicaStatus(Model):
    active: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    restarts: int = 0


class FailureCount(Model):
    """Failures of one class (status.failures): the budget's count and what the same-error limit looks at."""

    total: int = Field(0, description="Failures of this class over the job's life.")
    in_window: int = Field(
        0,
        description="Incidents counted in the current window (failureBudgets' windowSeconds): failures of ranks "
        "that ended within 30 s of an incident's first (a node lost with 8 ranks) count once.",
    )
    window_start: str | None = Field(None, description="When the current window began (its first failure).")
    last_error: str = Field("", description="The last incident's error (exception type: message), if it said one.")
    same_errors: int = Field(0, description="Incidents in a row with that error.")
    incident_start: str | None = Field(None, description="When the latest incident's first failure ended.")
    incident_failures: int = Field(0, description="Failures in the latest incident (counted as one).")


class FailureRecord(Model):
    """One failure, named and classed: the first of the job's latest incident (status.lastFailure)."""

    failure_class: FailureClass = Field(alias="class", description="Infrastructure, UserCode or Resources.")
    rank: str = Field(description="The rank that failed (`worker-1`).")
    pod: str
    node: str = ""
    exit_code: int | None = None
    evidence: str = Field("", description="What tells the class: the exception and where, OOMKilled, the node lost.")
    time: str = Field("", description="When it ended (its container's finishedAt), else when it was seen.")


class RankStatus(Model):
    """One rank's restart history; the operator's memory of it lives here, not in the operator process."""

    # Frozen: ranks alike share one instance (as status.ranks is read, one per written entry, and as rounds copy a
    # status), so a change is a new instance (`model_copy(update=...)`), never an assignment that would reach every
    # rank sharing it. A job of 10,000 ranks then reads and copies its ranks without 10,000 validations or copies.
    model_config = ConfigDict(frozen=True)

    restarts: int = Field(0, description="Times this rank was restarted (counted against its class's budget).")
    stops: int = Field(0, description="Times this rank stopped cleanly on request and was recreated (not counted).")
    stalls: int = Field(0, description="Times this rank was replaced for stopping first in a stall (not counted).")
    uncounted: int = Field(
        0, description="Times this rank was recreated by a failure rule's Ignore or a gang restart (not counted)."
    )
    straggles: int = Field(0, description="Times this rank was replaced as a straggler (not counted).")
    avoid_node: str | None = Field(None, description="A node this rank's pods prefer not to run on (it straggled).")
    pod_seen: bool = Field(False, description="The pod of the current attempt was observed running or done.")
    last_reason: str = Field("", description="Why the rank was last restarted (a condition reason).")
    last_message: str = ""
    last_exit_code: int | None = None
    restart_after: str | None = Field(None, description="The replacement pod is created no earlier than this.")
    last_replaced: str | None = Field(None, description="When the operator last decided to replace the rank's pod.")

    @property
    def attempt(self) -> int:
        """The attempt number of the rank's current pod: every replacement, counted or not, is a new one."""
        return self.restarts + self.stops + self.stalls + self.straggles + self.uncounted


_DEFAULT_RANK_FIELDS = tuple(RankStatus().__dict__.values())  # a rank the operator remembers nothing of


SHARED_RANKS_LIMIT = 4096  # distinct rank entries kept for sharing (a job has at most MAX_RANK_ENTRIES and a few)
_shared_ranks: dict[RankStatus, RankStatus] = {}


def shared_rank(rank: RankStatus) -> RankStatus:
    """The one instance of ranks equal to `rank` (frozen, so ranks alike may share it): status.ranks as read and
    as rounds change it then holds a few instances however many ranks it has, and two such statuses compare
    entry by entry by identity. Bounded: past SHARED_RANKS_LIMIT the table starts again (sharing is a saving,
    never needed for correctness)."""
    kept = _shared_ranks.get(rank)
    if kept is not None:
        return kept
    if len(_shared_ranks) >= SHARED_RANKS_LIMIT:
        _shared_ranks.clear()
    _shared_ranks[rank] = rank
    return rank


def rank_groups(ranks: Mapping[str, RankStatus]) -> dict[tuple[str, tuple[Any, ...]], list[str]]:
    """The per-rank keys (`worker-3`) of ranks alike (same role, every field equal) by (role, fields), in the
    order first met; ranks at their defaults left out. One group is one entry of status.ranks as written.
    Each instance's fields are read once (ranks alike mostly share one: RankStatus is frozen)."""
    groups: dict[tuple[str, tuple[Any, ...]], list[str]] = {}
    fields_of: dict[int, tuple[Any, ...]] = {}
    for key, rank in ranks.items():
        fields = fields_of.get(id(rank))
        if fields is None:
            fields = fields_of[id(rank)] = tuple(rank.__dict__.values())
        if fields != _DEFAULT_RANK_FIELDS:
            groups.setdefault((key.rpartition("-")[0], fields), []).append(key)
    return groups


ROLE_VALUES = frozenset(r.value for r in Role)


def rank_entries(groups: dict[str, Any]) -> dict[str, Any]:
    """status.ranks as written (`worker-0-2,5`: one entry for ranks alike) -> one entry per rank (`worker-0`,
    `worker-1`, ...), the ranks of an entry sharing its value. An older operator's keys (`worker-1`) are groups of
    one. A key that does not parse, or ranks past the API's maximum, are left out: status is the operator's own
    record, and a corrupt entry must not make the job unreadable."""
    return {f"{role}-{i}": value for role, indexes, value in _rank_spans(groups) for i in indexes}


def _rank_spans(groups: dict[str, Any]) -> Iterator[tuple[str, list[int], Any]]:
    """(role, its indexes, the entry) for each entry of status.ranks as written that parses (see rank_entries)."""
    named = 0
    for key, value in groups.items():
        role, _, spans = str(key).partition("-")
        if role not in ROLE_VALUES or value is None:
            continue
        try:
            indexes = ranges.decode(spans, 2 * MAX_REPLICAS - named)
        except ranges.RangeError:
            continue
        named += len(indexes)
        yield role, indexes, value


class Progress(Model):
    step: int = 0
    loss: float | None = None
    samples_per_second: float | None = None
    last_checkpoint_step: int | None = Field(None, description="Step of worker 0's newest checkpoint.")
    checkpoint_seconds: float | None = Field(None, description="How long worker 0's last checkpoint took to save.")
    step_seconds: float | None = Field(None, description="Worker 0's mean step time over its last logging interval.")
    total_steps: int | None = Field(None, description="Steps the run takes, as the trainer says.")
    percent: float | None = Field(None, description="step / totalSteps, in percent.")
    eta_seconds: int | None = Field(None, description="The steps left at the last measured step time.")
    resumed_step: int | None = Field(
        None,
        description="The step worker 0's training continued from when it last started, resumed from a checkpoint "
        "or healed from a live peer.",
    )
    resumed_at: str | None = Field(None, description="When worker 0's training last continued (its clock).")
    updated_at: str = ""


class PendingLoss(Model):
    """Ranks replaced while the job ran, the steps that cost not known yet: counted once worker 0 says where its
    training continued from (progress.resumedStep), as the step then less that one; at most `atMost`."""

    step: int = Field(description="Worker 0's step when the ranks were replaced.")
    at_most: int = Field(
        description="The steps since the newest checkpoint then: what is counted if the job ends first."
    )
    resumed_at: str | None = Field(None, description="progress.resumedAt then: a later one is the continuation.")


class Goodput(Model):
    """Where the job's wall time went, from its creation: counted by the rounds that change its phase (and the one
    that ends it), so the parts add up to the time up to `accountedAt`; the time since belongs to the current
    phase. `ratio`: productive over all of it."""

    queued_seconds: int = Field(0, description="Waiting to start: admission, scheduling, pods starting.")
    productive_seconds: int = Field(0, description="Running, training steps not done before.")
    restarting_seconds: int = Field(0, description="A rank down: its back-off, its replacement starting.")
    recomputing_seconds: int = Field(0, description="Running, training again the steps lost since the checkpoint.")
    stalled_seconds: int = Field(0, description="Running without progress, until the stall was found.")
    suspended_seconds: int = Field(0, description="runPolicy.suspend.")
    ratio: float | None = Field(None, description="productiveSeconds over all the seconds counted.")
    steps_lost: int = Field(0, description="Steps trained and lost (not checkpointed) when ranks were replaced.")
    recompute_owed_seconds: int = Field(0, description="Running seconds still to be counted as recomputing.")
    pending_loss: PendingLoss | None = Field(None, description="Steps lost to a replacement, not counted yet.")
    accounted_at: str | None = Field(None, description="The time up to which the seconds above are counted.")


class JobPhase(StrEnum):
    """A one-word summary of a job's conditions, for `kubectl get tj`. Its lifecycle (written by `plan`)::

        new -> Pending -> Running -> Succeeded
                  ^  |  ^    |
                  |  v  |    v
                  |  Restarting   (a rank failed and waits out its back-off; or the world was resized)
                  |
        any of the above, not yet ended <-> Suspended    (runPolicy.suspend; resuming goes back to Pending)
        new, or any of the above, not ended <-> Queued   (a Kueue queue's job whose Workload is not admitted:
                                                          waiting, or evicted by Kueue; admitted goes to Pending)
        any of the above, not yet ended  -> Failed       (a rank failed for good, backoffLimit, the deadline,
                                                          an invalid spec, no room within the scheduling timeout)

    Succeeded and Failed are final: the Succeeded or Failed condition is True and nothing changes any more."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    QUEUED = "Queued"


class ElasticReason(StrEnum):
    """Why an elastic job runs at the size status.elastic.workers says (auto-elastic admission)."""

    REQUESTED = "Requested"  # spec.workers.replicas: it fits
    STARTED_SMALLER = "StartedSmaller"  # replicas did not fit at the start: the most that fit, not below minReplicas
    SHRUNK = "Shrunk"  # a rank's replacement found no room (a lost node): the most that fit, instead of waiting
    GROWN = "Grown"  # room appeared: grown to the most that fit


class ElasticStatus(Model):
    """Auto-elastic admission (spec.workers.minReplicas set, the operator's own gang admission): the size of the
    job's world and why."""

    workers: int = Field(
        description="Worker pods of the job's world now: spec.workers.replicas, or fewer (not below minReplicas) "
        "while only that many fit."
    )
    requested: int = Field(description="spec.workers.replicas when this size was chosen.")
    reason: ElasticReason
    message: str = ""
    last_resize_time: str | None = Field(None, description="When the size last changed.")


class TrainingJobStatus(Model):
    phase: JobPhase | None = Field(
        None, description="Pending, Running, Restarting, Succeeded, Failed, Suspended or Queued."
    )

    @field_validator("phase", mode="before")
    @classmethod
    def _unset_phase(cls, value: object) -> object:
        """An empty phase (written by versions that had no enum) reads as none yet."""
        return None if value == "" else value

    @model_validator(mode="before")
    @classmethod
    def _expand_rank_groups(cls, data: Any) -> Any:
        """status.ranks as written (`worker-0-2,5`: one entry for ranks alike) -> one entry per rank, as the
        operator works with them. An older operator's keys (`worker-1`) are groups of one, so its restart counts
        carry over. A key that does not parse, or more ranks than the API allows, is left out (status is the
        operator's own record: a corrupt entry must not make the job unreadable)."""
        if not isinstance(data, dict) or not isinstance(data.get("ranks"), dict):
            return data
        expanded: dict[str, Any] = {}
        for role, indexes, value in _rank_spans(data["ranks"]):
            try:  # once per entry, its ranks sharing the instance (frozen); one that does not validate is left out
                rank = shared_rank(value if isinstance(value, RankStatus) else RankStatus.model_validate(value))
            except ValidationError:
                continue
            expanded.update((f"{role}-{i}", rank) for i in indexes)
        return data | {"ranks": expanded}

    @field_serializer("ranks")
    def _group_ranks(self, ranks: dict[str, RankStatus], info: FieldSerializationInfo) -> dict[str, Any]:
        """Ranks alike (same role, every field equal) under one key, `<role>-<range string>`; ranks at their
        defaults left out; each entry without its default fields. A job of 10,000 healthy ranks writes one entry."""
        groups = [
            (role, [int(k.rpartition("-")[2]) for k in keys], ranks[keys[0]])
            for (role, _), keys in rank_groups(ranks).items()
        ]
        out: dict[str, Any] = {}
        for role, indexes, rank in sorted(groups, key=lambda g: (g[0], min(g[1]))):
            out[f"{role}-{ranges.encode(indexes)}"] = rank.model_dump(
                mode=info.mode, by_alias=info.by_alias, exclude_defaults=True
            )
        return out

    conditions: list[Condition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict, description="Per role: worker, ps.")
    ranks: dict[str, RankStatus] = Field(
        default_factory=dict,
        description="What the operator remembers of each rank (restarts and why), ranks alike grouped under one "
        "key: the role and a range string of its indexes (`worker-0-2,5`: workers 0, 1, 2 and 5; `ps-0`); ranks "
        "it remembers nothing of are left out, so a job whose ranks run alike keeps one entry however many it has.",
    )
    workers: str = Field("", description="ready/desired workers, for kubectl get.")
    world_size: int = Field(0, description="Ranks of the training's world: worker pods x procsPerPod, and shards.")
    replicas: int = Field(0, description="Worker pods of the current world size (the scale subresource reads it).")
    selector: str = Field("", description="Label selector of the worker pods (for the scale subresource).")
    start_time: str | None = None
    completion_time: str | None = None
    observed_generation: int = 0
    progress: Progress | None = None
    stalls: int = Field(0, description="Stalls so far (runPolicy.progressDeadlineSeconds).")
    last_stall_step: int | None = Field(
        None, description="The job's step at its last stall: the Stalled condition turns False past it."
    )
    goodput: Goodput | None = Field(None, description="Where the job's wall time went.")
    elastic: ElasticStatus | None = Field(
        None, description="An elastic job's size and why (minReplicas set; fewer workers run while only that many fit)."
    )
    failures: dict[str, FailureCount] = Field(
        default_factory=dict, description="Per class of failure (Infrastructure, UserCode, Resources): its counts."
    )
    escalation: FailureCount | None = Field(
        None, description="Counted incidents in runPolicy.escalation's current window (inWindow, windowStart)."
    )
    last_failure: FailureRecord | None = Field(
        None,
        description="The first failure of the job's latest incident (failures within 30 s of it belong to it): "
        "the rank, pod and node, its class and the evidence.",
    )
    ranks_forgotten: int = Field(
        0,
        description="Ranks whose restart history left status.ranks to keep it short (the least recently replaced "
        f"first, once more than {MAX_RANK_ENTRIES} entries would be kept); their restarts still count in "
        "replicaStatuses.",
    )


class TrainingJob(Model):
    """The whole object as the API server stores it (metadata stays a plain mapping)."""

    api_version: str = API_VERSION
    kind: str = KIND
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TrainingJobSpec
    status: TrainingJobStatus = Field(default_factory=TrainingJobStatus)

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    def replicas(self, role: Role) -> ReplicaSpec | None:
        return self.spec.workers if role == Role.WORKER else self.spec.parameter_servers

    @property
    def resized_in_place(self) -> bool:
        """Its workers meet through torchrun's c10d rendezvous: their pods do not depend on the world's size, so a
        resize adds or removes pods and the others stay (a static world is re-formed instead)."""
        return self.spec.torchrun is not None and self.spec.torchrun.rendezvous == Rendezvous.C10D
