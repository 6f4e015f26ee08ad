"""The strategies, by the name the TrainingJob's spec.strategy gives them (RINGLEADER_STRATEGY).

A strategy's module is imported when a rank first asks for its class: the pipeline's and the sharded strategy's pull
in torch.distributed.pipelining, FSDP and DTensor, which every other rank's start, and every replacement's, would
otherwise pay (about 0.6 s of CPU of an allreduce rank's 8, measured with torch._dynamo preloaded)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ringleader_trainer.env import StrategyName

if TYPE_CHECKING:
    from ringleader_trainer.strategy import Strategy

_CLASSES: dict[str, tuple[str, str]] = {  # name -> (module, class)
    StrategyName.ALLREDUCE: ("allreduce", "AllreduceStrategy"),
    StrategyName.PARAMETER_SERVER: ("parameter_server.strategy", "ParameterServerStrategy"),
    StrategyName.LOCAL_SGD: ("local_sgd", "LocalSGDStrategy"),
    StrategyName.DILOCO: ("diloco", "DiLoCoStrategy"),
    StrategyName.SHARDED: ("sharded", "ShardedStrategy"),
    StrategyName.PIPELINE: ("pipeline", "PipelineStrategy"),
}


def strategy_class(name: str) -> type[Strategy]:
    """The class of the strategy named `name` (a StrategyName value), its module imported now if not before;
    KeyError for a name no strategy has."""
    module, cls = _CLASSES[name]
    strategy: type[Strategy] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return strategy
