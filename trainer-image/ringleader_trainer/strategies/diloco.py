"""DiLoCo (Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models", 2023; torchft's
`DiLoCo`): local SGD whose syncs apply the workers' average change through an outer optimizer.

Each worker keeps the parameters of the last sync (the anchor). Between syncs it steps alone with the script's
optimizer (the inner one). At a sync every worker computes its pseudo-gradient, anchor - parameters; they are
averaged over the workers present; each worker puts its parameters back to the anchor and takes one step of the
outer optimizer, SGD with Nesterov momentum, along the averaged pseudo-gradient; the result is the new anchor,
the same on every worker. With an outer learning rate of 1 and no momentum this is local SGD's plain average.

The anchor and the outer optimizer's momentum travel inside the script's optimizer's `state_dict()` (torch's
state-dict hooks), so checkpoints, the successor's backup and a live peer's state carry them with nothing else
changed: healing, training short and the lossless stop are local SGD's (`local_sgd.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ringleader_trainer.env import DiLoCo
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.strategies.local_sgd import LocalSGDStrategy

OUTER_KEY = "diloco"  # where the optimizer's state_dict holds the outer state


class OuterState:
    """The anchor and the outer optimizer over `params` (the model's, in order). Its tensors are allocated once:
    a sync of a large model makes no new ones."""

    def __init__(self, params: Sequence[nn.Parameter], lr: float, momentum: float) -> None:
        self.params = list(params)
        self.anchor: list[torch.Tensor] | None = None  # set at the start (`set_anchor`) or loaded (`take_from`)
        self._pseudo = [torch.empty_like(p) for p in self.params]
        # torch's SGD refuses Nesterov without momentum; with none it is plain SGD.
        self.optimizer = torch.optim.SGD(self.params, lr=lr, momentum=momentum, nesterov=momentum > 0)
        self.omit = False  # state_dict()s leave the outer state out (a backup: see DiLoCoStrategy._exchange_states)

    def set_anchor(self) -> None:
        """The parameters as they are now are the anchor (the same on every worker: after a sync or the start)."""
        with torch.no_grad():
            if self.anchor is None:
                self.anchor = [p.detach().clone() for p in self.params]
                return
            for a, p in zip(self.anchor, self.params, strict=True):
                a.copy_(p)

    def pseudo_gradients(self) -> list[torch.Tensor]:
        """anchor - parameters: this worker's change since the anchor, negated (the same tensors every sync)."""
        assert self.anchor is not None  # set at the start, or loaded with a state
        with torch.no_grad():
            for g, a, p in zip(self._pseudo, self.anchor, self.params, strict=True):
                torch.sub(a, p, out=g)
        return self._pseudo

    def step(self, averaged: Sequence[torch.Tensor]) -> None:
        """Back to the anchor, one outer step along `averaged`, and the result is the new anchor."""
        assert self.anchor is not None
        with torch.no_grad():
            for p, a, g in zip(self.params, self.anchor, averaged, strict=True):
                p.copy_(a)
                p.grad = g
        self.optimizer.step()
        for p in self.params:
            p.grad = None  # the inner optimizer's gradients start afresh
        self.set_anchor()

    def snapshot(self) -> dict[str, Any]:
        """The anchor and the outer optimizer's state, as `add_to` puts them in a state_dict: references to the live
        tensors, as torch's own state_dict gives (a checkpoint or a peer's state is written out at once)."""
        anchor = self.anchor if self.anchor is not None else [p.detach() for p in self.params]
        return {"anchor": list(anchor), "outer": self.optimizer.state_dict()}

    # The optimizer's state_dict hooks (torch.optim.Optimizer.register_state_dict_post_hook and
    # register_load_state_dict_pre_hook).
    def add_to(self, _optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        if not self.omit:
            state[OUTER_KEY] = self.snapshot()
        return state

    def take_from(self, _optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> dict[str, Any]:
        """Load the outer state from an optimizer's `state` (a checkpoint's, a peer's: checked against the
        model), returning the rest for the inner optimizer. A state without one (a local SGD checkpoint) leaves
        the anchor at the parameters it loads."""
        state = dict(state)
        outer = state.pop(OUTER_KEY, None)
        if outer is None:  # load_state loads the model's parameters first: they are the anchor
            self.set_anchor()
            return state
        anchor = outer.get("anchor") if isinstance(outer, dict) else None
        shapes = [p.shape for p in self.params]
        if not isinstance(anchor, list) or [getattr(a, "shape", None) for a in anchor] != shapes:
            raise StrategyUsageError("the optimizer state's DiLoCo anchor does not match the model's parameters")
        self.optimizer.load_state_dict(outer["outer"])
        self.anchor = [a.to(p.device, p.dtype) for a, p in zip(anchor, self.params, strict=True)]
        return state


class DiLoCoStrategy(LocalSGDStrategy):
    """DiLoCo: `period` inner steps on each worker alone, then an outer Nesterov step on the averaged change."""

    name = "diloco"
    _outer: OuterState  # built by distributed_optimizer, over the model's parameters

    @property
    def settings(self) -> DiLoCo:
        if self.env.diloco is None:  # the env reader requires it under diloco
            raise StrategyUsageError("RINGLEADER_DILOCO_PERIOD is not set")
        return self.env.diloco

    @property
    def period(self) -> int:
        return self.settings.period

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        settings = self.settings
        # Before local SGD's part: it loads a peer's or a checkpoint's state and backs it up, through these hooks.
        self._outer = OuterState(list(model.parameters()), settings.outer_lr, settings.outer_momentum)
        optimizer.register_state_dict_post_hook(self._outer.add_to)
        optimizer.register_load_state_dict_pre_hook(self._outer.take_from)
        distributed = super().distributed_optimizer(optimizer, model)
        if self._outer.anchor is None:  # every path above sets it; kept so a sync never lacks one
            self._outer.set_anchor()
        return distributed

    def _exchange_states(self) -> None:
        """Local SGD's backup of each worker's state on its successor, without the outer state: right after a sync
        it is the same on every worker (the anchor is the parameters, the outer momentum moved by the same
        average), so the successor serves its own with the backup (`state_for`) instead of keeping a copy."""
        self._outer.omit = True
        try:
            super()._exchange_states()
        finally:
            self._outer.omit = False

    def state_for(self, receiver: int) -> dict[str, Any]:
        state = super().state_for(receiver)
        if self.quorum is None:  # the backup of the last sync, whose outer state this worker holds as it was then
            state["optimizer"][OUTER_KEY] = self._outer.snapshot()
        return state

    def _average_parameters(self, count: bool = True) -> None:
        if not count:  # the start: every worker from the same point, the first anchor
            super()._average_parameters(count=False)
            self._outer.set_anchor()
            return
        # Nothing changes until the average completes: a peer lost in it is healed and the sync done again.
        pseudo = self._outer.pseudo_gradients()
        self.average_(pseudo)
        self._outer.step(pseudo)
        self.communication_rounds += 1
