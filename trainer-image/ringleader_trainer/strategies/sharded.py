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

Replica groups (stages 2-3, RINGLEADER_SHARDED_REPLICAS; spec.sharded.replicas): HSDP. The worker ranks form a
mesh of `replicas` groups x `world / replicas` shards; rank i holds shard i % (world / replicas), as does the
rank of that shard in every other group. Gradients are reduce-scattered within a group and averaged across the
groups, so the groups hold the same shards at every step. A lost rank's replacement heals from the rank of
its shard in another group (`healing.newest_serves` by shard: the local pieces of the model's and optimizer's
DTensors, no checkpoint read), and the survivors move their FSDP modules to the new group's mesh. Each shard's
replicas average over a group of their own, so a commit over every worker ends backward (as under pipeline,
`Strategy.commit_step`): one shard cannot step where another could not. With one group nobody holds a lost
shard but the checkpoint.
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
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.fsdp._fully_shard._fsdp_common import TrainingState
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.checkpoints import sharded as sharded_checkpoint
from ringleader_trainer.checkpoints.training import HEALED_FROM, TrainingCheckpointer, load_state, worker_state
from ringleader_trainer.elastic import healing
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.strategies.allreduce import stamp_exchange
from ringleader_trainer.strategies.tools import (
    materialize,
    own_stream,
    patch_step,
    rebuild_optimizer,
    unpatched,
    unwrap,
)
from ringleader_trainer.strategy import LossFn, Strategy

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


def shard_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, dict[str, Any]]:
    """This worker's part of the model's and optimizer's state, as DCP's state dicts (DTensors; the optimizer's
    by parameter name). Creates the optimizer's state if it has none yet (DCP steps it with zero gradients)."""
    with unpatched(local_optimizer(optimizer)) as inner:
        model_state, optimizer_state = get_state_dict(model, inner, options=FLAT_OPTIMIZER)
    return {"model": model_state, "optimizer": optimizer_state}


def set_shard_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, dict[str, Any]]) -> None:
    """Load `shard_state`'s dicts, filled (from a checkpoint, or a replica's shards), into the model and optimizer."""
    inner = local_optimizer(optimizer)
    set_state_dict(model, inner, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=FLAT_OPTIMIZER)  # fmt: skip
    if isinstance(optimizer, ZeroRedundancyOptimizer):  # its own groups set the inner ones each step
        for outer, loaded in zip(optimizer.param_groups, inner.param_groups, strict=True):
            outer.update({k: v for k, v in loaded.items() if k != "params"})


def local_pieces(state: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """`shard_state` as plain tensors and values, each DTensor as its local piece (the wire carries no DTensor)."""
    return {part: {k: v.to_local() if isinstance(v, DTensor) else v for k, v in d.items()} for part, d in state.items()}


def fill(state: dict[str, dict[str, Any]], pieces: Any, source: str) -> None:
    """Fill `shard_state`'s tensors in place from `local_pieces` of the same shard's (a replica's), and take its
    other values; HealError naming `source` for an entry it lacks or a piece of another shape."""
    for part, entries in state.items():
        theirs = pieces.get(part) if isinstance(pieces, dict) else None
        for key, value in entries.items():
            if not isinstance(theirs, dict) or key not in theirs:
                raise healing.HealError(f"the state {source} sent has no {part} entry {key}")
            got, mine = theirs[key], value.to_local() if isinstance(value, DTensor) else value
            if not isinstance(mine, torch.Tensor):
                entries[key] = got
            elif not isinstance(got, torch.Tensor) or got.shape != mine.shape:
                raise healing.HealError(f"{source} sent {part} entry {key} in another shape")
            else:
                mine.copy_(got)


def move_to(model: nn.Module, old: DeviceMesh, new: DeviceMesh) -> None:
    """Move an FSDP2 model from the process groups of `old` to those of `new`, built after a loss on the next
    process group, and clear what a step a peer's loss broke off left behind. FSDP2 keeps the groups of its
    mesh as objects (torch offers no way to move a module to other groups): the mesh and its DTensors name
    their groups, so `new` must have built groups of the same names (it is built the same way, first thing on
    a fresh group), and each mesh info of the model's parameter groups reads its groups again. Unhealable
    where the names differ."""
    if getattr(new, "_dim_group_names", None) != getattr(old, "_dim_group_names", None):
        raise healing.Unhealable("the next group's device mesh names its process groups differently")
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        state: Any = module._get_fsdp_state()
        state._state_ctx.iter_forward_root = None
        state._state_ctx.post_backward_final_callback_queued = False
        state._modules_to_run_forward.clear()
        state._training_state = TrainingState.IDLE
        # The order the broken step's forward ran its layers in, which backward prefetches by: left there, a
        # rank whose forward had begun prefetches a layer the others do not, and the groups deadlock.
        comm = state._comm_ctx
        comm.post_forward_order.clear()
        comm.reduce_scatter_states.clear()
        comm._last_post_reduce_events.clear()
        comm.all_gather_state = None
        for group in state._fsdp_param_groups:
            infos = [group.mesh_info, group.post_forward_mesh_info]
            infos += [i for p in group.fsdp_params for i in (p.mesh_info, p.post_forward_mesh_info)]
            for info in {id(i): i for i in infos if i is not None}.values():
                info.__post_init__()  # reads the mesh's groups, by name, again
            group._training_state = TrainingState.IDLE
            group._all_gather_result = None
            group._post_backward_pending = False
            group._post_forward_indices.clear()
            group._partial_reduce_output = None
            group._partial_reduce_output_layout.clear()
        module.reshard()  # a broken step may have left parameters gathered


class ShardedStrategy(Strategy):
    """ZeRO stage 1 (DDP + ZeroRedundancyOptimizer), 2 or 3 (FSDP2)."""

    name = "sharded"
    materializes_meta = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replicas = self.env.sharded_replicas
        self.heals = self.replicas > 1 and self.stage >= 2  # a replica group's rank of the same shard serves
        self._mesh: DeviceMesh | None = None

    @property
    def stage(self) -> int:
        return self.env.sharded_stage or 3

    def _device_mesh(self) -> DeviceMesh:
        """The workers' mesh: one dimension of shards, or (replicas, shards) for HSDP; its groups are watched with
        the job's (a loss ends their collectives at once)."""
        with self.rendezvous.watched():
            if self.replicas > 1:
                shape = (self.replicas, self.world_size // self.replicas)
                return init_device_mesh(self.device.type, shape, mesh_dim_names=("replicate", "shard"))
            return init_device_mesh(self.device.type, (self.world_size,))

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
        mesh = self._mesh = self._device_mesh()
        reshard = self.stage == 3
        for unit in list(shard_units(model)):
            fully_shard(unit, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        if on_meta:  # each shard's values drawn from a stream of its own (its replica groups' ranks alike)
            materialize(model, self.device, own_stream(self.rank % (self.world_size // self.replicas)))
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

        patched = patch_step(sharded, exchange, local=True, after=self._advance, void=self._take_void)
        if self.heals:
            self.hold(model, patched)
        return patched

    def _forward_backward(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn) -> float:
        """Under HSDP each shard's gradients are all-reduced over its own replicate group inside backward: a
        commit over every worker follows (`Strategy.commit_step`), so no rank steps unless every shard's did."""
        loss = super()._forward_backward(model, x, y, loss_fn)
        self.commit_step()
        return loss

    # ---- healing (elastic/healing.py): a replica group's rank of the same shard serves ------------------------------
    def heal_plan(self, reports: Any) -> healing.Plan | None:
        return healing.newest_serves(reports, parts=self.world_size // self.replicas)

    def held_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """Progress and RNGs, and this shard's local pieces of the model's and optimizer's state."""
        return worker_state(self, None, optimizer, self.progress) | {
            "shards": local_pieces(shard_state(model, optimizer))
        }

    def take_state(self, state: Any) -> None:
        if self._held is None:
            raise StrategyUsageError("no model to load a peer's state into before distributed_optimizer()")
        model, optimizer = self._held
        load_state(state, None, optimizer, self.device)
        mine = shard_state(model, optimizer)
        fill(mine, state.get("shards"), f"rank {state.get(HEALED_FROM)}")
        set_shard_state(model, optimizer, mine)

    def _regroup(self) -> None:
        super()._regroup()
        if self._mesh is not None and self._held is not None:
            new = self._device_mesh()
            move_to(self._held[0], self._mesh, new)
            self._mesh = new

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
        return shard_state(self.model, self.optimizer)

    def _step_path(self, step: int) -> Path:
        checkpoints = self.strategy.checkpoints
        if checkpoints is None:
            raise StrategyUsageError("this job has no checkpoints")
        return checkpoints.path(step).parent

    def restore(self) -> dict[str, Any] | None:
        resumed = self.strategy.resumed
        if resumed is not None and HEALED_FROM not in resumed:  # a replica's shards were loaded when held
            state = self._state()  # what this worker holds, at this world size: the pieces to read
            sharded_checkpoint.load(self._step_path(int(resumed["step"])), state)
            set_shard_state(self.model, self.optimizer, state)
        return super().restore()

    def _save_model(self, step: int) -> None:
        sharded_checkpoint.save(self._step_path(step), self._state())
