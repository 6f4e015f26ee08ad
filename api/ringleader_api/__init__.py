"""The TrainingJob API (group ringleader.dev, version v1alpha1): the single source of truth.

These pydantic models define the spec the operator accepts and the status it writes; `crd.py` generates
`crds/trainingjob.yaml` from them (schema, defaults, CEL rules), and the operator parses every object it
sees through `TrainingJob.model_validate`, so what the API server admits and what the operator understands
cannot drift apart. The CLI and SDK (cli/) build and read jobs through the same models. Field names are the
camelCase JSON names; Python attributes are snake_case. The models live by concern in `names`, `strategies`,
`failures`, `spec`, `status` and `progress`; this module is where everyone imports them from.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from . import ranges
from .failures import (
    MAX_RULE_VALUES,
    MAX_RULES,
    RULE_MATCHES,
    Escalation,
    ExitCodeOperator,
    ExitCodes,
    FailureAction,
    FailureBudget,
    FailureBudgets,
    FailureClass,
    FailureRule,
    RestartBackoff,
)
from .names import (
    ANNOTATION_ATTEMPT,
    API_VERSION,
    DNS_LABEL_MAX,
    GROUP,
    KIND,
    LABEL_INDEX,
    LABEL_JOB,
    LABEL_ROLE,
    MANAGED_BY_MULTIKUEUE,
    MANAGED_BY_RINGLEADER,
    MAX_GPUS,
    MAX_GRACE_SECONDS,
    MAX_KEEP,
    MAX_RANK_ENTRIES,
    MAX_REPLICAS,
    MAX_SECONDS,
    MAX_STEPS,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    Model,
)
from .progress import Goodput, PendingLoss, Progress
from .spec import (
    CONTRACT_ENV,
    LABEL_KEY_PATTERN,
    ROLE_FIELDS,
    ROLE_NAMES,
    CheckpointSpec,
    CleanPodPolicy,
    Placement,
    PlacementMode,
    ReplicaSpec,
    RestartPolicy,
    Role,
    RunPolicy,
    StallAction,
    StragglerPolicy,
    TrainingJobSpec,
)
from .status import (
    ROLE_VALUES,
    SHARED_RANKS_LIMIT,
    Condition,
    ConditionType,
    ElasticReason,
    ElasticStatus,
    FailureCount,
    FailureRecord,
    JobPhase,
    RankStatus,
    Reason,
    ReplicaStatus,
    TrainingJobStatus,
    rank_entries,
    rank_groups,
    shared_rank,
)
from .strategies import (
    SETTINGS,
    DiLoCoSettings,
    LocalSGDSettings,
    ParameterServerSettings,
    PipelineSettings,
    PSMode,
    Rendezvous,
    ShardedSettings,
    Strategy,
    TorchrunSettings,
)

__all__ = [
    "ANNOTATION_ATTEMPT",
    "API_VERSION",
    "CONTRACT_ENV",
    "DNS_LABEL_MAX",
    "GROUP",
    "KIND",
    "LABEL_INDEX",
    "LABEL_JOB",
    "LABEL_KEY_PATTERN",
    "LABEL_ROLE",
    "MANAGED_BY_MULTIKUEUE",
    "MANAGED_BY_RINGLEADER",
    "MAX_GPUS",
    "MAX_GRACE_SECONDS",
    "MAX_KEEP",
    "MAX_RANK_ENTRIES",
    "MAX_REPLICAS",
    "MAX_RULES",
    "MAX_RULE_VALUES",
    "MAX_SECONDS",
    "MAX_STEPS",
    "PLURAL",
    "ROLE_FIELDS",
    "ROLE_NAMES",
    "ROLE_VALUES",
    "RULE_MATCHES",
    "SETTINGS",
    "SHARED_RANKS_LIMIT",
    "SHORT_NAMES",
    "SINGULAR",
    "VERSION",
    "CheckpointSpec",
    "CleanPodPolicy",
    "Condition",
    "ConditionType",
    "DiLoCoSettings",
    "ElasticReason",
    "ElasticStatus",
    "Escalation",
    "ExitCodeOperator",
    "ExitCodes",
    "FailureAction",
    "FailureBudget",
    "FailureBudgets",
    "FailureClass",
    "FailureCount",
    "FailureRecord",
    "FailureRule",
    "Goodput",
    "JobPhase",
    "LocalSGDSettings",
    "Model",
    "PSMode",
    "ParameterServerSettings",
    "PendingLoss",
    "PipelineSettings",
    "Placement",
    "PlacementMode",
    "Progress",
    "RankStatus",
    "Reason",
    "Rendezvous",
    "ReplicaSpec",
    "ReplicaStatus",
    "RestartBackoff",
    "RestartPolicy",
    "Role",
    "RunPolicy",
    "ShardedSettings",
    "StallAction",
    "StragglerPolicy",
    "Strategy",
    "TorchrunSettings",
    "TrainingJob",
    "TrainingJobSpec",
    "TrainingJobStatus",
    "ranges",
    "rank_entries",
    "rank_groups",
    "shared_rank",
]


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
