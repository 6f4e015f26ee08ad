"""`from_env`: how a rank starts. Read the environment contract, build the strategy it names, rendezvous with
every rank, agree where to continue from (a live peer's state, or the newest checkpoint); every rank starts
serving its metrics."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.env import StrategyName
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
    strategy = strategy_class(env.strategy)(env, options)
    if (saved := env.checkpoints) is not None:
        strategy.checkpoints = ckpt.Checkpointer(
            Path(saved.directory), env.role, env.index, env.num_workers, env.num_ps, saved.interval, saved.keep,
            # Another world's step serves: each worker holds the whole model, or reads its shard back (sharded).
            elastic=env.strategy not in (StrategyName.PARAMETER_SERVER, StrategyName.PIPELINE),
        )  # fmt: skip
    strategy.join()
    if strategy.checkpoints is not None:  # SIGTERM now stops at an agreed step, with a checkpoint there
        strategy.enable_stop()
    elif strategy.quorum is not None:  # the workers vote on taking in a lost rank's replacement
        strategy.enable_votes()
    strategy._log_window = (time.perf_counter(), strategy.steps_done)
    # Every rank serves its page (on its pod's port plus its local rank): worker 0's holds the job's progress, each
    # rank's says where it is (the operator reads them all when the job stalls).
    strategy.metrics.serve(env.metrics_port)
    device = f", on {strategy.device}" if strategy.is_worker else ""  # shards serve from host memory
    emit(f"[ringleader] {env.role} {env.index}: {strategy.name}, rank {env.global_rank} of {env.global_world_size}"
          f"{device}, starting at step {strategy.steps_done}", sys.stderr)  # fmt: skip
    return strategy
