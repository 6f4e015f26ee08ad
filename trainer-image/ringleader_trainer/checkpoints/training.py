"""Checkpoints as a training script uses them (beside `checkpoint`, the store): the ranks agree on the step to
resume from at startup, and `TrainingCheckpointer` saves and restores a worker's model, optimizer, progress and
RNG states."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer.checkpoints import store as ckpt
from ringleader_trainer.env import RankEnv
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics


class Strategy(Protocol):
    """What checkpoints use of the strategy they save for (strategy.Strategy is one): its rank, its store of
    checkpoints, where it resumed from, its step, rounds and progress, its device, its metrics, the steps a
    heal moved it past, and the agreement on where the workers stop."""

    env: RankEnv
    checkpoints: ckpt.Checkpointer | None
    resumed: dict[str, Any] | None
    steps_done: int
    communication_rounds: int
    progress: Mapping[str, Any]
    last_checkpoint: int | None
    metrics: TrainerMetrics

    @property
    def device(self) -> torch.device: ...

    @property
    def void_steps(self) -> int: ...

    def stop_agreed(self) -> bool: ...

    def stop_step(self, step: int) -> int: ...

    def stopped(self, step: int) -> Exception: ...


def agree_on_resume(strategy: Strategy) -> None:
    """Every rank proposes the newest checkpoint it can load; all take the oldest proposal (loading that step
    if it is not their own), so the whole job resumes from one step. CheckpointError when some rank can load
    none of the checkpoints there are."""
    checkpoints = strategy.checkpoints
    if checkpoints is None:
        return
    proposal, state, warnings = checkpoints.propose()
    for w in warnings:
        log_json(role=strategy.env.role, index=strategy.env.index, event="checkpoint-skipped", reason=w)
    vote = torch.tensor([proposal], dtype=torch.int64)
    dist.all_reduce(vote, op=dist.ReduceOp.MIN)
    agreed = int(vote.item())
    if agreed == ckpt.UNLOADABLE:
        mine = warnings[-1] if proposal == ckpt.UNLOADABLE else "another rank's checkpoints cannot be loaded"
        raise ckpt.CheckpointError(mine)
    if agreed == ckpt.NO_CHECKPOINT:
        return
    if agreed != proposal:
        source = checkpoints.source(agreed)
        if source is None:  # the ranks share the directory, so each proposed a step that serves its world
            raise ckpt.CheckpointError(f"checkpoint step {agreed} cannot serve this rank's world")
        state = ckpt.load(source)
    strategy.resumed, strategy.steps_done = state, agreed
    strategy.communication_rounds = int(state.get("rounds", 0)) if state else 0
    # What a peer's replacement gets with this rank's state until the script's first step says otherwise (local
    # SGD backs its state up before that step).
    strategy.progress, strategy.last_checkpoint = dict(state.get("progress", {})) if state else {}, agreed
    log_json(role=strategy.env.role, index=strategy.env.index, event="resume", step=agreed)


class TrainingCheckpointer:
    """A worker's checkpoints: model and optimizer (unless the shards hold them), progress and RNG states."""

    def __init__(self, strategy: Strategy, model: nn.Module, optimizer: torch.optim.Optimizer, saves_model: bool):
        self.strategy, self.optimizer, self.saves_model = strategy, optimizer, saves_model
        self.model = model.module if isinstance(model, DistributedDataParallel) else model
        self.last_step: int | None = None

    def _save_model(self, step: int) -> None:
        """Where model and optimizer state are saved apart from this rank's file (the sharded strategy's shards),
        before it: a step is complete once every rank's file is there."""

    @property
    def enabled(self) -> bool:
        return self.strategy.checkpoints is not None

    def restore(self) -> dict[str, Any] | None:
        """Load the checkpoint the ranks agreed on, or the state a live peer sent (healing), if any; return the
        `progress` saved with it."""
        state = self.strategy.resumed
        if state is None:
            return None
        if HEALED_FROM not in state:  # a peer's state was loaded when the strategy had model and optimizer
            load_state(state, self.model if self.saves_model else None, self.optimizer, self.strategy.device)
        saved = state.get(LAST_CHECKPOINT, state["step"])  # a checkpoint's own step, or the peer's last save
        self.last_step = self.strategy.last_checkpoint = saved
        if saved is not None:
            self.strategy.metrics.last_checkpoint_step.set(saved)
        return dict(state["progress"])

    def maybe_save(self, step: int, progress: Mapping[str, Any]) -> None:
        """Call after every step: save when the interval says so, and when the ranks agree to stop (SIGTERM;
        elastic/stopping.py) save at this step and raise `Stopped`, which ends the process with its exit code."""
        self.strategy.progress = progress  # what a peer's replacement gets with this rank's state (healing)
        stop = self.strategy.stop_agreed()  # a vote also where no checkpoint is kept: on taking a rank in
        step += self.strategy.void_steps  # a heal moved this rank's state ahead of the script's count
        checkpoints = self.strategy.checkpoints
        if checkpoints is None:
            return
        if stop:
            at = self.strategy.stop_step(step)
            self.save(at, progress, reason="stop")
            raise self.strategy.stopped(at)
        if checkpoints.due(step):
            self.save(step, progress)

    def save(self, step: int, progress: Mapping[str, Any], reason: str = "interval") -> None:
        checkpoints = self.strategy.checkpoints
        if checkpoints is None or step == self.last_step:
            return
        started = time.perf_counter()
        self._save_model(step)
        state = worker_state(self.strategy, self.model if self.saves_model else None, self.optimizer, progress)
        path = checkpoints.save(step, state)
        seconds = time.perf_counter() - started
        self.last_step = self.strategy.last_checkpoint = step
        self.strategy.metrics.last_checkpoint_step.set(step)
        self.strategy.metrics.checkpoint_seconds.set(seconds)
        log_json(
            role=self.strategy.env.role, index=self.strategy.env.index, event="checkpoint", step=step, path=str(path),
            seconds=round(seconds, 4), reason=reason,
        )  # fmt: skip


# Keys of a worker's state beyond a checkpoint's: set when a live peer sent it (elastic/healing.py).
HEALED_FROM = "healed_from"  # the rank that sent it
LAST_CHECKPOINT = "last_checkpoint"  # the step of the job's newest checkpoint then (None: none yet)


def worker_state(
    strategy: Strategy, model: nn.Module | None, optimizer: torch.optim.Optimizer, progress: Mapping[str, Any]
) -> dict[str, Any]:
    """What a worker's checkpoint holds, and what a live peer sends its replacement: progress, exchange rounds
    and RNG states, with the model's and optimizer's states unless `model` is None (held elsewhere: the
    sharded strategy's shards)."""
    state: dict[str, Any] = {
        "progress": dict(progress),
        "rounds": strategy.communication_rounds,
        "rng": rng_states(strategy.device),
    }
    if model is not None:
        state |= {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    return state


def load_state(
    state: Mapping[str, Any], model: nn.Module | None, optimizer: torch.optim.Optimizer, device: torch.device
) -> None:
    """Take a worker's state (`worker_state`) into `model` and `optimizer` (unless `model` is None) and this
    process's RNGs (`device`'s, where it is a GPU)."""
    if model is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    set_rng_states(state["rng"], device)


def rng_states(device: torch.device) -> dict[str, Any]:
    """This process's RNG states: torch's CPU generator, Python's, and `device`'s where it is a GPU (dropout on a
    GPU draws from it: a replacement healed without it would draw other masks than the rank it replaces)."""
    states: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states: Mapping[str, Any], device: torch.device) -> None:
    """Take `rng_states` back. A GPU's state is taken into `device` where it is a GPU and ignored where it is the
    CPU (a checkpoint written on a GPU resumed on a CPU-only rank); one written on the CPU leaves the GPU's as is."""
    torch.set_rng_state(states["torch"])
    random.setstate(_python_rng(states["python"]))
    if "cuda" in states and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def _python_rng(saved: Any) -> tuple[Any, ...]:
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)
