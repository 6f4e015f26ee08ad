"""Sharded checkpoints (strategy sharded): each worker's shard of the model and optimizer state read back at
another world size exactly, and never running code from the files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from ringleader_trainer.checkpoints import sharded as sharded_checkpoint
from ringleader_trainer.checkpoints.store import CheckpointError
from ringleader_trainer.strategies.sharded import FLAT_OPTIMIZER, local_optimizer, shard_units
from ringleader_trainer.strategies.tools import unwrap
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from tests.support.ranks import run_ranks


def build(stage: int, world: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    """As ShardedStrategy builds them (without the environment contract around it)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 16), nn.ReLU()), nn.Linear(16, 3))
    if stage == 1:
        ddp = DistributedDataParallel(model)
        return ddp, ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=0.01)
    mesh = init_device_mesh("cpu", (world,))
    for unit in list(shard_units(model)):
        fully_shard(unit, mesh=mesh, reshard_after_forward=stage == 3)
    fully_shard(model, mesh=mesh, reshard_after_forward=stage == 3)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def whole(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The whole model and optimizer state on rank 0 (a collective)."""
    module = unwrap(model)
    if isinstance(optimizer, ZeroRedundancyOptimizer):
        optimizer.consolidate_state_dict(0)
        names = [n for n, _ in module.named_parameters()]
        state = optimizer.state_dict()["state"] if dist.get_rank() == 0 else {}
        out: dict[str, torch.Tensor] = {f"optim.{names[i]}.{k}": v for i, s in state.items() for k, v in s.items()}
        return out | {f"model.{k}": v for k, v in module.state_dict().items()}
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, flatten_optimizer_state_dict=True)
    model_state, optimizer_state = get_state_dict(module, optimizer, options=options)
    tensors = {f"model.{k}": v for k, v in model_state.items()} | {f"optim.{k}": v for k, v in optimizer_state.items()}
    return {k: v for k, v in tensors.items() if isinstance(v, torch.Tensor)}


def state_of(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    module = unwrap(model)
    model_state, optimizer_state = get_state_dict(module, local_optimizer(optimizer), options=FLAT_OPTIMIZER)
    return {"model": model_state, "optimizer": optimizer_state}


def train_and_save(rank: int, world: int, stage: int, step_path: str) -> None:
    model, optimizer = build(stage, world)
    for step in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(step * world + rank))
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    sharded_checkpoint.save(Path(step_path), state_of(model, optimizer))
    saved = whole(model, optimizer)
    if rank == 0:
        torch.save(saved, Path(step_path) / "whole.pt")


def load_and_compare(rank: int, world: int, stage: int, step_path: str) -> None:
    model, optimizer = build(stage, world)
    state = state_of(model, optimizer)
    sharded_checkpoint.load(Path(step_path), state)
    module = unwrap(model)
    set_state_dict(module, local_optimizer(optimizer), model_state_dict=state["model"],
                   optim_state_dict=state["optimizer"], options=FLAT_OPTIMIZER)  # fmt: skip
    loaded = whole(model, optimizer)
    if rank == 0:
        saved = torch.load(Path(step_path) / "whole.pt", weights_only=True)
        assert loaded.keys() == saved.keys() and any(k.endswith("exp_avg_sq") for k in saved)
        for name in saved:
            assert torch.equal(loaded[name], saved[name]), name


@pytest.mark.parametrize(("stage", "old", "new"), [(1, 2, 3), (2, 3, 2), (3, 2, 3)], ids=["zero1", "zero2", "zero3"])
def test_model_and_optimizer_state_read_back_exactly_at_another_world_size(
    tmp_path: Path, stage: int, old: int, new: int
) -> None:
    run_ranks(old, train_and_save, stage, str(tmp_path))
    run_ranks(new, load_and_compare, stage, str(tmp_path))


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_a_genuine_checkpoint_loads_without_a_process_group(tmp_path: Path) -> None:
    sharded_checkpoint.save(tmp_path, {"w": torch.arange(6.0), "meta": {"lr": 0.5, "note": "x"}})
    state: dict[str, Any] = {"w": torch.zeros(6), "meta": {"lr": 0.0, "note": ""}}
    sharded_checkpoint.load(tmp_path, state)
    assert torch.equal(state["w"], torch.arange(6.0)) and state["meta"] == {"lr": 0.5, "note": "x"}


def test_an_index_that_names_code_is_refused_unrun(tmp_path: Path) -> None:
    sharded_checkpoint.save(tmp_path, {"w": torch.ones(2)})
    marker = tmp_path / "ran"
    (tmp_path / sharded_checkpoint.SHARDS_DIR / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(
        CheckpointError, match=r"checkpoint .*shards cannot be loaded: .*system is not allowed in a checkpoint's index"
    ):
        sharded_checkpoint.load(tmp_path, {"w": torch.zeros(2)})
    assert not marker.exists()


def test_a_value_that_names_code_is_refused_unrun(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    sharded_checkpoint.save(tmp_path, {"w": torch.ones(2), "extra": Payload(marker)})  # DCP pickles it
    assert not marker.exists()
    with pytest.raises(CheckpointError, match=r"cannot be loaded: .*Weights only load failed"):
        sharded_checkpoint.load(tmp_path, {"w": torch.zeros(2), "extra": None})
    assert not marker.exists()
