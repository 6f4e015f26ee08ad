"""DiLoCo's outer step (strategies/diloco.OuterState), on one process: the averaged pseudo-gradient applied from the
anchor by SGD with Nesterov momentum, and the anchor and momentum carried in the script's optimizer's state_dict."""

from __future__ import annotations

import pytest
import torch
from ringleader_trainer.elastic import healing
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.strategies.diloco import OUTER_KEY, OuterState
from torch import nn


def model_and_optimizer(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)


def hooked(lr: float, momentum: float, seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, OuterState]:
    model, inner = model_and_optimizer(seed)
    outer = OuterState(list(model.parameters()), lr, momentum)
    inner.register_state_dict_post_hook(outer.add_to)
    inner.register_load_state_dict_pre_hook(outer.take_from)
    outer.set_anchor()
    return model, inner, outer


def drift(model: nn.Module, by: float) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(by)


@pytest.mark.parametrize(
    ("lr", "momentum", "moved"),
    [
        (1.0, 0.0, [1.0, 1.0]),  # plain averaging: local SGD
        (0.5, 0.0, [0.5, 0.5]),  # half way
        (0.7, 0.9, [0.7 * 1.9, 0.7 * (1 + 0.9 * 1.9)]),  # Nesterov: lr * (g + m * buf), buf = m * buf + g
    ],
    ids=["lr1-no-momentum", "lr0.5", "lr0.7-nesterov0.9"],
)
def test_a_sync_moves_the_anchor_along_the_averaged_change(lr: float, momentum: float, moved: list[float]) -> None:
    """Two syncs, each after the parameters drifted by +1 (the average of the workers' drift): the anchor moves
    by `moved` each time."""
    model, _, outer = hooked(lr, momentum)
    start = [p.detach().clone() for p in model.parameters()]
    for total in (moved[0], moved[0] + moved[1]):
        drift(model, 1.0)
        outer.step(outer.pseudo_gradients())
        for p, s, a in zip(model.parameters(), start, outer.anchor or [], strict=True):
            assert torch.allclose(p, s + total) and torch.equal(p, a)
            assert p.grad is None


def test_the_anchor_and_momentum_travel_in_the_optimizers_state_dict() -> None:
    """A state_dict taken mid-period carries the anchor (not the drifted parameters) and the outer momentum;
    another worker's optimizer loading it (as bytes, as it travels) continues exactly as the first would."""
    model, inner, outer = hooked(0.7, 0.9)
    drift(model, 1.0)
    outer.step(outer.pseudo_gradients())  # some momentum
    drift(model, 0.25)  # mid-period
    state = healing.decode(healing.encode(inner.state_dict()), 0)  # as a peer's replacement or a checkpoint reads it
    assert set(state[OUTER_KEY]) == {"anchor", "outer"}

    other_model, other_inner, other_outer = hooked(0.7, 0.9, seed=1)
    other_model.load_state_dict(model.state_dict())
    other_inner.load_state_dict(state)
    assert OUTER_KEY not in other_inner.state_dict()["param_groups"][0]
    for a, b in zip(outer.anchor or [], other_outer.anchor or [], strict=True):
        assert torch.equal(a, b)
    outer.step(outer.pseudo_gradients())
    other_outer.step(other_outer.pseudo_gradients())
    for p, q in zip(model.parameters(), other_model.parameters(), strict=True):
        assert torch.equal(p, q)


def test_a_state_without_the_outer_one_anchors_at_the_parameters_it_loads() -> None:
    """A local SGD checkpoint (the script's optimizer's state alone): the anchor is the parameters loaded."""
    model, inner = model_and_optimizer(seed=2)
    hooked_model, hooked_inner, outer = hooked(0.7, 0.9)
    hooked_model.load_state_dict(model.state_dict())  # load_state's order: the model, then its optimizer
    hooked_inner.load_state_dict(inner.state_dict())
    loaded = list(model.parameters())
    assert outer.anchor is not None and all(torch.equal(a, p) for a, p in zip(outer.anchor, loaded, strict=True))


@pytest.mark.parametrize(
    "anchor",
    [None, [], [torch.zeros(2, 3)], [torch.zeros(3, 2), torch.zeros(2)], "anchor"],
    ids=["none", "empty", "short", "wrong-shape", "not-a-list"],
)
def test_a_foreign_outer_state_is_refused_with_a_clear_error(anchor: object) -> None:
    _, inner, _ = hooked(0.7, 0.9)
    state = inner.state_dict()
    state[OUTER_KEY] = {"anchor": anchor, "outer": state[OUTER_KEY]["outer"]}
    with pytest.raises(StrategyUsageError, match="DiLoCo anchor does not match"):
        inner.load_state_dict(state)
