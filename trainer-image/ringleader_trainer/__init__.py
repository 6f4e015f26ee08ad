"""Ringleader's trainer: runs inside the pods the operator creates.

    import ringleader_trainer
    strategy = ringleader_trainer.from_env()

The API lives in `ringleader_trainer.strategy` and `ringleader_trainer.startup` (docs/trainer.md); it is
imported on first use so that the light modules (`env`, `exitcodes`) load without torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Options", "Strategy", "from_env"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ringleader_trainer import startup, strategy

        return getattr(startup if name == "from_env" else strategy, name)
    raise AttributeError(f"module 'ringleader_trainer' has no attribute {name!r}")
