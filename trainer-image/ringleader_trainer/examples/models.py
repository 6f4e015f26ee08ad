"""Built-in models: a small MLP for digits, a ~25M-parameter MLP whose step time is dominated by
communication (for benchmarks), and a deep ~69M-parameter MLP where sharding's memory split shows."""

from __future__ import annotations

import torch
from torch import nn


def digits_mlp(features: int = 64, classes: int = 10, hidden: int = 128) -> nn.Module:
    return nn.Sequential(
        nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, classes)
    )


def wide_mlp(features: int = 1024, classes: int = 10, hidden: int = 3280) -> nn.Module:
    """About 25M parameters in two wide hidden layers: cheap compute per step, heavy gradients."""
    return nn.Sequential(
        nn.Linear(features, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, classes),
    )


class ResidualBlock(nn.Module):
    """x + relu(linear(layernorm(x))): a block that stays trainable stacked deep."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(self.norm(x)))


def deep_mlp(features: int = 1024, classes: int = 10, hidden: int = 2048, depth: int = 16) -> nn.Module:
    """`depth` residual blocks of hidden x hidden (about 69M parameters as given): many equal blocks, so a
    sharded worker gathers a small part of the model at a time."""
    blocks = [ResidualBlock(hidden) for _ in range(depth)]
    return nn.Sequential(nn.Linear(features, hidden), *blocks, nn.LayerNorm(hidden), nn.Linear(hidden, classes))


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
