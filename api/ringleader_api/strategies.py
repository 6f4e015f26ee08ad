"""How a job trains: the strategy's name and each strategy's settings (parameter server, local SGD, DiLoCo, sharded,
pipeline), and torchrun's. A strategy with settings is a name here, a settings model, a field of `StrategySettings`
and its variables in `STRATEGY_ENV` (`SETTINGS` ties the field to the name: the CRD allows it only with it)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, get_args

from pydantic import (
    Field,
)

from .names import MAX_REPLICAS, MAX_STEPS, Model


class Strategy(StrEnum):
    ALLREDUCE = "allreduce"
    PARAMETER_SERVER = "parameter-server"
    LOCAL_SGD = "local-sgd"
    DILOCO = "diloco"
    SHARDED = "sharded"
    PIPELINE = "pipeline"


class PSMode(StrEnum):
    SYNCHRONOUS = "synchronous"
    ASYNCHRONOUS = "asynchronous"
    BOUNDED_STALENESS = "bounded-staleness"


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
    ENV: ClassVar[dict[str, str]] = {"period": "RINGLEADER_LOCAL_SGD_PERIOD"}  # see `StrategySettings.settings_env`

    period: int = Field(8, ge=1, le=MAX_STEPS, description="Local steps between parameter averaging rounds (tau).")


class DiLoCoSettings(Model):
    """DiLoCo (Douillard et al. 2023; torchft's DiLoCo): local SGD whose syncs average each worker's change since
    the last sync (the pseudo-gradient) and apply it with an outer SGD with Nesterov momentum."""

    ENV: ClassVar[dict[str, str]] = {
        "period": "RINGLEADER_DILOCO_PERIOD",
        "outer_learning_rate": "RINGLEADER_DILOCO_OUTER_LR",
        "outer_momentum": "RINGLEADER_DILOCO_OUTER_MOMENTUM",
    }

    period: int = Field(
        100,
        ge=1,
        le=MAX_STEPS,
        description="Inner (local) steps between syncs (H). The paper trains with 500: the fewer syncs, the less "
        "bandwidth, traded against the workers drifting apart.",
    )
    outer_learning_rate: float = Field(
        0.7, gt=0, le=10, description="The outer SGD's learning rate on the averaged pseudo-gradient."
    )
    outer_momentum: float = Field(
        0.9, ge=0, lt=1, description="The outer SGD's Nesterov momentum (0: plain SGD, no momentum)."
    )


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


# The variables the strategies' settings travel in (the operator writes them, `CONTRACT_ENV`).
STRATEGY_ENV = frozenset(
    {
        "RINGLEADER_PS_MODE", "RINGLEADER_PS_MAX_STALENESS", "RINGLEADER_PS_PORT", "RINGLEADER_PS_ADDRS",
        "RINGLEADER_PS_BACKUP", "RINGLEADER_LOCAL_SGD_PERIOD", "RINGLEADER_DILOCO_PERIOD",
        "RINGLEADER_DILOCO_OUTER_LR", "RINGLEADER_DILOCO_OUTER_MOMENTUM", "RINGLEADER_SHARDED_STAGE",
        "RINGLEADER_SHARDED_REPLICAS", "RINGLEADER_PIPELINE_STAGES", "RINGLEADER_PIPELINE_MICRO_BATCHES",
    }
)  # fmt: skip


class StrategySettings(Model):
    """The spec's first fields: the strategy, and each strategy's settings under its name (`TrainingJobSpec`
    extends this: a new strategy's settings are a field here)."""

    strategy: Strategy = Field(Strategy.ALLREDUCE, description="How ranks synchronize. Immutable.")
    parameter_server: ParameterServerSettings | None = Field(None, description="parameter-server settings.")
    local_sgd: LocalSGDSettings | None = Field(None, alias="localSGD", description="local-sgd settings.")
    diloco: DiLoCoSettings | None = Field(None, description="diloco settings.")
    sharded: ShardedSettings | None = Field(None, description="sharded settings.")
    pipeline: PipelineSettings | None = Field(None, description="pipeline settings.")

    def settings_env(self) -> dict[str, str]:
        """The variables this job's strategy's settings travel in, where its settings model declares them (`ENV`:
        field -> variable), each with the field's value or, the settings absent, its default. Empty for a strategy
        whose variables the operator derives itself (rank_env.py)."""
        field = SETTINGS.get(self.strategy)
        if field is None:
            return {}
        settings: Any = getattr(self, field)
        if settings is None:
            settings = get_args(type(self).model_fields[field].annotation)[0]()
        return {variable: str(getattr(settings, name)) for name, variable in getattr(settings, "ENV", {}).items()}


# Each strategy's settings field of `StrategySettings`, allowed only with that strategy.
SETTINGS: dict[Strategy, str] = {
    Strategy.PARAMETER_SERVER: "parameter_server",
    Strategy.LOCAL_SGD: "local_sgd",
    Strategy.DILOCO: "diloco",
    Strategy.SHARDED: "sharded",
    Strategy.PIPELINE: "pipeline",
}
