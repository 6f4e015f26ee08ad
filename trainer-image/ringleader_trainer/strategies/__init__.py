"""The strategies, by the name the TrainingJob's spec.strategy gives them (RINGLEADER_STRATEGY)."""

from __future__ import annotations

from ringleader_trainer.strategies.allreduce import AllreduceStrategy
from ringleader_trainer.strategies.local_sgd import LocalSGDStrategy
from ringleader_trainer.strategies.parameter_server import ParameterServerStrategy
from ringleader_trainer.strategies.pipeline import PipelineStrategy
from ringleader_trainer.strategies.sharded import ShardedStrategy
from ringleader_trainer.strategy import Strategy

STRATEGIES: dict[str, type[Strategy]] = {
    s.name: s for s in (AllreduceStrategy, ParameterServerStrategy, LocalSGDStrategy, ShardedStrategy, PipelineStrategy)
}

__all__ = [
    "STRATEGIES",
    "AllreduceStrategy",
    "LocalSGDStrategy",
    "ParameterServerStrategy",
    "PipelineStrategy",
    "ShardedStrategy",
]
