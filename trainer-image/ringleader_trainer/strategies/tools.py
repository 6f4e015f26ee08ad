"""What strategies share to build their part of the model and optimizer: an optimizer whose step() runs the
strategy's exchange (`patch_step`, `unpatched`), the model out of its wrapper (`unwrap`), a part of a model built on
the meta device allocated and seeded (`materialize`, `own_stream`), and an optimizer rebuilt over the parameters a
strategy replaced (`rebuild_optimizer`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.exitcodes import StrategyUsageError


def patch_step(
    optimizer: torch.optim.Optimizer,
    before: Callable[[], None],
    local: bool,
    after: Callable[[], None],
    void: Callable[[], bool] = lambda: False,
) -> torch.optim.Optimizer:
    """`optimizer` with its step() running `before`, then (if `local`) the original step, then `after`; nothing
    when `void()` says the step is void (a heal moved the rank past it)."""
    if getattr(optimizer, "_ringleader_distributed", False):
        raise StrategyUsageError("distributed_optimizer() was already applied to this optimizer")
    original = optimizer.step

    def step(closure: Callable[[], float] | None = None) -> float | None:
        if void():
            return None
        before()
        loss = original(closure) if local else None
        after()
        return loss

    optimizer.step = step  # type: ignore[method-assign,assignment]
    optimizer._ringleader_distributed = True  # type: ignore[attr-defined]
    return optimizer


def unwrap(model: nn.Module) -> nn.Module:
    """The model itself, out of DistributedDataParallel's wrapper if it is in one."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def own_stream(index: int) -> int:
    """A seed of its own for the `index`-th part of a model (a shard, a stage), derived from the seed the
    script set, so the parts' initial values are not copies of one another."""
    return torch.initial_seed() + 1_000_003 * (index + 1)


def materialize(model: nn.Module, device: torch.device, seed: int) -> None:
    """Allocate a module built on the meta device (or what a strategy kept of it) on `device`, initialized as
    its modules' reset_parameters() do, drawing from `seed` (the caller's random state is left as it was)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        model.to_empty(device=device)
        for module in model.modules():
            if callable(reset := getattr(module, "reset_parameters", None)):
                reset()


def rebuild_optimizer(
    optimizer: torch.optim.Optimizer, names: dict[int, str] | None, model: nn.Module, keep_missing: bool = True
) -> torch.optim.Optimizer:
    """A new optimizer of `optimizer`'s class and settings over `model`'s parameters now, found by the names
    (`names`: id of each parameter the optimizer was built over -> its name in the model then) after a strategy
    replaced or dropped them (sharding, a pipeline stage). With `keep_missing` False, parameters the model no
    longer has are left out (another stage's); otherwise they are an error."""
    if names is None:
        raise StrategyUsageError("call distributed_model(model) before distributed_optimizer()")
    current = dict(unwrap(model).named_parameters())
    groups = []
    for group in optimizer.param_groups:
        try:
            params = [current[names[id(p)]] for p in group["params"] if keep_missing or names.get(id(p)) in current]
        except KeyError:
            raise StrategyUsageError("the optimizer holds parameters that are not the model's") from None
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    return type(optimizer)(groups, **optimizer.defaults)


@contextlib.contextmanager
def unpatched(optimizer: torch.optim.Optimizer) -> Iterator[torch.optim.Optimizer]:
    """`optimizer` with its own step() for the duration: for code that steps it to create its state (DCP's
    get_state_dict does, with zero gradients and lr), which is no training step to count or exchange."""
    patched = optimizer.__dict__.pop("step", None)
    try:
        yield optimizer
    finally:
        if patched is not None:
            optimizer.step = patched  # type: ignore[method-assign]
