"""Local SGD: workers step alone for a period, then average their parameters."""

from __future__ import annotations

import torch
from torch import nn

from ringleader_trainer.strategy import Strategy, StrategyUsageError, patch_step


class LocalSGDStrategy(Strategy):
    """Local SGD: `tau` optimizer steps on each worker alone, then the workers' parameters are averaged."""

    name = "local-sgd"

    @property
    def period(self) -> int:
        if self.env.local_sgd_period is None:  # the env reader requires it under local-sgd
            raise StrategyUsageError("RINGLEADER_LOCAL_SGD_PERIOD is not set")
        return self.env.local_sgd_period

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        self._params = [p for p in model.parameters()]
        if self.steps_done == 0:  # start from the same point (resumed ranks load their own)
            self._average_parameters(count=False)

        def after() -> None:
            self._advance()
            if self.steps_done % self.period == 0:
                self._average_parameters()

        return patch_step(optimizer, lambda: None, local=True, after=after)

    def _average_parameters(self, count: bool = True) -> None:
        self.average_(self._params)
        if count:
            self.communication_rounds += 1

    def finish(self) -> None:
        if self.steps_done % self.period:  # a partial period at the end: average it too
            self._average_parameters()
