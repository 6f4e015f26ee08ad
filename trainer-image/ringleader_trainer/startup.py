"""`from_env`: how a rank starts. Read the environment contract, build the strategy it names, rendezvous with
every rank, agree where to continue from (a live peer's state, or the newest checkpoint); every rank starts
serving its metrics."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.env import RankEnv, StrategyName
from ringleader_trainer.env import from_env as read_env
from ringleader_trainer.logs import emit
from ringleader_trainer.strategies import strategy_class
from ringleader_trainer.strategy import ALLREDUCE_IMPLEMENTATIONS, Options, Strategy
from ringleader_trainer.transport import auth


def from_env(environ: Mapping[str, str] | None = None, options: Options | None = None, **overrides: Any) -> Strategy:
    """Read the environment contract, rendezvous with every rank, agree where to continue from (a live peer's
    state when this rank replaces a lost one, else the newest checkpoint), and return this rank's strategy.
    Every rank starts serving its metrics. `overrides` set `Options` fields."""
    options = options or Options()
    if overrides:
        options = Options(**{**options.__dict__, **overrides})
    if options.allreduce not in ALLREDUCE_IMPLEMENTATIONS:
        raise ValueError(f"allreduce={options.allreduce!r} is not one of {', '.join(ALLREDUCE_IMPLEMENTATIONS)}")
    env = read_env(os.environ if environ is None else environ)
    if options.allreduce == "ring":
        auth.load_token(env.token_file)  # the ring's links need it: fail now, not at the first allreduce
    strategy = strategy_class(env.strategy)(env, options, checkpoints=checkpointer(env))
    strategy.start()
    device = f", on {strategy.device}" if strategy.is_worker else ""  # shards serve from host memory
    emit(f"[ringleader] {env.role} {env.index}: {strategy.name}, rank {env.global_rank} of {env.global_world_size}"
          f"{device}, starting at step {strategy.steps_done}", sys.stderr)  # fmt: skip
    return strategy


def checkpointer(env: RankEnv) -> ckpt.Checkpointer | None:
    """This rank's checkpoints, as the environment contract places them; None when the job keeps none."""
    if (saved := env.checkpoints) is None:
        return None
    return ckpt.Checkpointer(
        Path(saved.directory), env.role, env.index, env.num_workers, env.num_ps, saved.interval, saved.keep,
        # Another world's step serves: each worker holds the whole model, or reads its shard back (sharded).
        elastic=env.strategy not in (StrategyName.PARAMETER_SERVER, StrategyName.PIPELINE),
    )  # fmt: skip
