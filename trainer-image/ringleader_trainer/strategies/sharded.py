"""Sharded data parallelism, ZeRO stages 1-3 (RINGLEADER_SHARDED_STAGE; spec.sharded.stage).

Every worker trains on its own slice of the batch, as under allreduce, and takes the same optimizer steps, but
no worker holds the whole training state:

- stage 1: the optimizer state is sharded. DDP averages the gradients; PyTorch's ZeroRedundancyOptimizer
  steps only this worker's share of the parameters and broadcasts them.
- stage 2: gradients too. FSDP2 (`fully_shard`, reshard_after_forward=False): each shard unit's parameters are
  gathered in forward and kept whole until backward, gradients are reduce-scattered, the optimizer steps the
  shard.
- stage 3: parameters too. FSDP2 with reshard_after_forward=True: a unit's parameters exist whole only while
  that unit runs (forward, then again in backward), so per-worker memory for parameters, gradients and
  optimizer state falls as 1/N, plus one unit gathered at a time.

A model built on the meta device (`with torch.device("meta"): model = build()`; `Strategy.materializes_meta`)
is allocated only after sharding, so no worker ever holds the whole of it at stages 2-3: each initializes its
own shard by the modules' reset_parameters(), from a stream of its own (the values differ from a model built
whole with the same seed; both are draws from the same initialization).

Shard units: the model's submodules that hold parameters, looking through containers (Sequential, ModuleList,
ModuleDict) to what they contain, so each layer or block of a stack is a unit; then the model itself, for the
parameters left over. gloo on CPU, NCCL on GPU.

Checkpoints go through `torch.distributed.checkpoint` (`sharded_checkpoint`): each worker writes its shard,
and a job resumes from them at another world size.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer import sharded_checkpoint
from ringleader_trainer.checkpointing import TrainingCheckpointer
from ringleader_trainer.strategies.allreduce import stamp_exchange
from ringleader_trainer.strategy import (
    Strategy,
    StrategyUsageError,
    materialize,
    own_stream,
    patch_step,
    rebuild_optimizer,
    unpatched,
    unwrap,
)

CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)
# The optimizer state in checkpoints: keyed by parameter name (`state.<name>.<key>`), never by position, so
# each worker of any world size asks for exactly the parameters it holds.
FLAT_OPTIMIZER = StateDictOptions(flatten_optimizer_state_dict=True)


def shard_units(model: nn.Module) -> Iterator[nn.Module]:
    """The submodules sharded (and gathered) as one: those holding parameters, containers looked through."""
    for child in model.children():
        if isinstance(child, CONTAINERS):
            yield from shard_units(child)
        elif any(True for _ in child.parameters()):
            yield child


def local_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that holds this worker's state: ZeroRedundancyOptimizer's inner one at stage 1."""
    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else optimizer


class ShardedStrategy(Strategy):
    """ZeRO stage 1 (DDP + ZeroRedundancyOptimizer), 2 or 3 (FSDP2)."""

    name = "sharded"
    materializes_meta = True

    @property
    def stage(self) -> int:
        return self.env.sharded_stage or 3

    def distributed_model(self, model: nn.Module) -> nn.Module:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self._names = {id(p): name for name, p in model.named_parameters()}
        on_meta = any(p.is_meta for p in model.parameters())
        if not on_meta:
            model = model.to(self.device)
        if self.stage == 1:
            if on_meta:  # every worker holds the whole model: the same values on each
                materialize(model, self.device, torch.initial_seed())
            ids = [self.env.local_rank] if self.device.type == "cuda" else None
            ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group)
            stamp_exchange(ddp, self.metrics)
            return ddp
        mesh = init_device_mesh(self.device.type, (self.world_size,))
        reshard = self.stage == 3
        for unit in list(shard_units(model)):
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        if on_meta:  # each worker draws its own shard's values, from its own stream
            materialize(model, self.device, own_stream(self.rank))
        # The first exchange of a step is the first unit's all-gather, as the forward pass starts.
        model.register_forward_pre_hook(lambda *_: self.metrics.entered_exchange())
        return model

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        """A new optimizer of the same class and settings over the sharded parameters (fully_shard replaces
        every parameter by its shard; stage 1's ZeroRedundancyOptimizer keeps state only for its share)."""
        sharded = rebuild_optimizer(optimizer, self._names, model)
        if self.stage == 1:  # the same groups, each worker stepping its share of them
            sharded = ZeroRedundancyOptimizer(
                sharded.param_groups, optimizer_class=type(optimizer), process_group=self.workers_group,
                **optimizer.defaults,
            )  # fmt: skip

        def exchange() -> None:  # the gradients were averaged (stage 1) or reduce-scattered in backward
            self.metrics.left_exchange()
            self.communication_rounds += 1

        return patch_step(sharded, exchange, local=True, after=self._advance)

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainingCheckpointer:
        return ShardedCheckpointer(self, model, optimizer)

    def full_state_dict(self, model: nn.Module) -> dict[str, torch.Tensor]:
        """The whole model's parameters on worker 0, in CPU memory (a collective; the others get {})."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(unwrap(model), options=options)
        return {k: v for k, v in state.items() if isinstance(v, torch.Tensor)}


class ShardedCheckpointer(TrainingCheckpointer):
    """The model and optimizer state as shards (`sharded_checkpoint`, in the step's directory beside every
    worker's own file, which keeps progress and RNG states as under the other strategies)."""

    def __init__(self, strategy: Strategy, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().__init__(strategy, model, optimizer, saves_model=False)

    def _state(self) -> dict[str, Any]:
        with unpatched(local_optimizer(self.optimizer)) as optimizer:
            model_state, optimizer_state = get_state_dict(self.model, optimizer, options=FLAT_OPTIMIZER)
        return {"model": model_state, "optimizer": optimizer_state}

    def _step_path(self, step: int) -> Path:
        checkpoints = self.strategy.checkpoints
        if checkpoints is None:
            raise StrategyUsageError("this job has no checkpoints")
        return checkpoints.path(step).parent

    def restore(self) -> dict[str, Any] | None:
        resumed = self.strategy.resumed
        if resumed is not None:
            state = self._state()  # what this worker holds, at this world size: the pieces to read
            sharded_checkpoint.load(self._step_path(int(resumed["step"])), state)
            inner = local_optimizer(self.optimizer)
            set_state_dict(self.model, inner, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                           options=FLAT_OPTIMIZER)  # fmt: skip
            if isinstance(self.optimizer, ZeroRedundancyOptimizer):  # its own groups set the inner ones each step
                for outer, loaded in zip(self.optimizer.param_groups, inner.param_groups, strict=True):
                    outer.update({k: v for k, v in loaded.items() if k != "params"})
        return super().restore()

    def _save_model(self, step: int) -> None:
        sharded_checkpoint.save(self._step_path(step), self._state())
