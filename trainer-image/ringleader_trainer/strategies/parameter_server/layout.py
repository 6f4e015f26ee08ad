"""How the parameters are split over the shards: which shard owns each tensor (`assign_shards`: about the same
number of values each, the same on every rank), a shard's values in one flat buffer with its optimizer over views
into it (`shard_buffers`, `shard_optimizer`)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def assign_shards(sizes: Sequence[int], num_shards: int) -> list[int]:
    """The shard of each parameter: largest first onto the least-loaded shard (ties to the lower index).
    Deterministic, so every rank computes the same assignment from the same model."""
    loads = [0] * num_shards
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        shard = min(range(num_shards), key=lambda s: (loads[s], s))
        out[i] = shard
        loads[shard] += sizes[i]
    return out


def shard_parameters(model: nn.Module, num_shards: int) -> list[list[nn.Parameter]]:
    """The model's parameters grouped by shard, each group in model order."""
    params = list(model.parameters())
    owner = assign_shards([p.numel() for p in params], num_shards)
    return [[p for p, o in zip(params, owner, strict=True) if o == s] for s in range(num_shards)]


def flat_views(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views into `flat`, one shaped like each of `like`, laid end to end."""
    out, offset = [], 0
    for t in like:
        out.append(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    return out


def shard_buffers(
    model_params: Sequence[nn.Parameter], optimizer: torch.optim.Optimizer
) -> tuple[torch.Tensor, torch.Tensor, torch.optim.Optimizer]:
    """A shard's values in one flat buffer (a copy of `model_params`'), its gradient buffer, and the user's
    optimizer over parameters that are views into them."""
    dtype = model_params[0].dtype if model_params else torch.float32
    flat = torch.cat([p.detach().reshape(-1) for p in model_params]) if model_params else torch.empty(0)
    flat = flat.to(dtype).contiguous()
    grad = torch.zeros(flat.numel(), dtype=dtype)
    params = [nn.Parameter(v) for v in flat_views(flat, model_params)]
    for p, g in zip(params, flat_views(grad, model_params), strict=True):
        p.grad = g
    return flat, grad, shard_optimizer(optimizer, model_params, params)


def shard_optimizer(
    optimizer: torch.optim.Optimizer, originals: Sequence[nn.Parameter], shard: Sequence[nn.Parameter]
) -> torch.optim.Optimizer:
    """The user's optimizer class and per-group settings, over the shard's own parameters (`shard[i]` stands
    for `originals[i]`)."""
    stand_in = {id(o): s for o, s in zip(originals, shard, strict=True)}
    groups = []
    for group in optimizer.param_groups:
        mine = [stand_in[id(p)] for p in group["params"] if id(p) in stand_in]
        if mine:
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": mine})
    return type(optimizer)(groups)  # type: ignore[call-arg]
