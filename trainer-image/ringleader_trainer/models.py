"""Built-in models: a small MLP for digits, and a ~25M-parameter MLP whose step time is dominated by
communication (for benchmarks)."""

from __future__ import annotations

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


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
