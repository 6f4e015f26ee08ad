"""The strategy API: a few calls that make one training script run under whichever strategy the TrainingJob
names (docs/trainer.md has the complete example).

    strategy = ringleader_trainer.from_env()           # rendezvous; agrees on the checkpoint to resume from
    model, optimizer = build()                         # same seed on every rank
    if strategy.is_server:                             # parameter-server shards serve, then return
        strategy.serve(model, optimizer)
        return strategy.close()
    model = strategy.distributed_model(model)          # DDP under allreduce; unchanged otherwise
    optimizer = strategy.distributed_optimizer(optimizer, model)  # step() now exchanges as the strategy says
    checkpoints = strategy.checkpointer(model, optimizer)
    progress = checkpoints.restore() or {}             # the `progress` dict saved with the checkpoint
    for step in range(strategy.steps_done, total):
        ...; optimizer.zero_grad(); loss.backward(); optimizer.step()
        strategy.report(step + 1, loss.item(), batch_size)
        checkpoints.maybe_save(step + 1, progress={...})
    checkpoints.save(total, progress={...})
    strategy.finish(); strategy.close()

One process group spans every rank (workers, then shards: RINGLEADER_GLOBAL_RANK); the workers' collectives
run in a sub-group of the workers. Every wait is bounded: the rendezvous by `rendezvous_timeout`, collectives
and parameter-server exchanges by `timeout`. Failures raise the exceptions `exitcodes.exit_code_for` maps to
the documented exit codes.
"""

from __future__ import annotations

import datetime
import os
import random
import socket
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ringleader_trainer import auth
from ringleader_trainer import checkpoint as ckpt
from ringleader_trainer.env import RankEnv
from ringleader_trainer.env import from_env as read_env
from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line
from ringleader_trainer.logs import log_json
from ringleader_trainer.metrics import TrainerMetrics
from ringleader_trainer.ps import ServerStats, ShardClient, ShardServer, flat_views, shard_parameters
from ringleader_trainer.ring import ring_allreduce

ALLREDUCE_IMPLEMENTATIONS = ("native", "ring")


class RendezvousError(TrainerError):
    """The master or a peer was not reachable within the rendezvous timeout."""

    exit_code = ExitCode.RENDEZVOUS_TIMEOUT


class StrategyUsageError(TrainerError):
    """The script called the API in a way this rank's strategy cannot honour."""

    exit_code = ExitCode.BAD_CONFIG


@dataclass(frozen=True)
class Options:
    rendezvous_timeout: float = 300.0  # seconds to reach the master and every peer at start
    timeout: float = 300.0  # seconds any one collective or parameter-server exchange may take
    allreduce: str = "native"  # "native": torch.distributed (gloo on CPU, NCCL on GPU); "ring": ours
    log_every: int = 20  # steps between JSON log lines (`report`)


class Strategy:
    """What every strategy offers; `from_env` returns the subclass the environment names."""

    name = ""

    def __init__(self, env: RankEnv, options: Options) -> None:
        self.env, self.options = env, options
        self.timeout = datetime.timedelta(seconds=options.timeout)
        self.steps_done = 0  # optimizer steps completed, counting those before a resume
        self.communication_rounds = 0  # exchanges of gradients or parameters this process made
        self.metrics = TrainerMetrics()
        self.workers_group: dist.ProcessGroup | None = None
        self.checkpoints: ckpt.Checkpointer | None = None
        self.resumed: dict[str, Any] | None = None
        self._log_window = (time.perf_counter(), 0)  # (time, step) at the last report; reset at resume

    # ---- identity -----------------------------------------------------------------------------------
    @property
    def is_server(self) -> bool:
        return self.env.role == "ps"

    @property
    def is_worker(self) -> bool:
        return self.env.role == "worker"

    @property
    def rank(self) -> int:
        """The worker's index (torchrun's RANK); parameter servers have none."""
        if self.env.rank is None:
            raise StrategyUsageError("parameter-server ranks have no worker rank")
        return self.env.rank

    @property
    def world_size(self) -> int:
        """The number of workers."""
        return self.env.num_workers

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.env.local_rank) if torch.cuda.is_available() else torch.device("cpu")

    # ---- the calls a script makes -------------------------------------------------------------------
    def distributed_model(self, model: nn.Module) -> nn.Module:
        return model.to(self.device)

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        """The same optimizer object, its `step()` now doing this strategy's exchange."""
        raise NotImplementedError

    def serve(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ServerStats:
        raise StrategyUsageError(f"strategy {self.name} has no parameter servers; serve() is for ps ranks")

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainingCheckpointer:
        return TrainingCheckpointer(self, model, optimizer, saves_model=True)

    def report(self, step: int, loss: float, batch_size: int, **extra: Any) -> None:
        """Call after each step: every `log_every` steps, log a JSON line and (worker 0) update the metrics."""
        if step % self.options.log_every:
            return
        t0, s0 = self._log_window
        now = time.perf_counter()
        rate = (step - s0) * batch_size * self.world_size / max(now - t0, 1e-9)
        self._log_window = (now, step)
        self.metrics.update(step, loss, rate)
        log_json(
            role=self.env.role, index=self.env.index, strategy=self.name, step=step, loss=round(loss, 6),
            samples_per_second=round(rate, 1), rounds=self.communication_rounds, **extra,
        )  # fmt: skip

    def average_(self, tensors: Sequence[torch.Tensor]) -> None:
        """Replace each tensor by its mean over the workers, in one allreduce of their concatenation."""
        if not tensors:
            return
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            self.allreduce_(flat).div_(self.world_size)
            for t, mean in zip(tensors, flat_views(flat, tensors), strict=True):
                t.copy_(mean)

    def allreduce_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum over the workers in place, with the configured implementation."""
        if self.options.allreduce == "ring":
            return ring_allreduce(tensor, group=self.workers_group)
        dist.all_reduce(tensor, group=self.workers_group)
        return tensor

    def finish(self) -> None:
        """After the last step: complete any pending exchange."""

    def close(self) -> None:
        """Leave the process group once every rank is done (worker 0 hosts the rendezvous store)."""
        if dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()

    # ---- shared helpers -----------------------------------------------------------------------------
    def _advance(self) -> None:
        self.steps_done += 1


def _patch_step(
    optimizer: torch.optim.Optimizer, before: Callable[[], None], local: bool, after: Callable[[], None]
) -> torch.optim.Optimizer:
    if getattr(optimizer, "_ringleader_distributed", False):
        raise StrategyUsageError("distributed_optimizer() was already applied to this optimizer")
    original = optimizer.step

    def step(closure: Callable[[], float] | None = None) -> float | None:
        before()
        loss = original(closure) if local else None
        after()
        return loss

    optimizer.step = step  # type: ignore[method-assign,assignment]
    optimizer._ringleader_distributed = True  # type: ignore[attr-defined]
    return optimizer


class AllreduceStrategy(Strategy):
    """Data parallel: gradients averaged over the workers every step (DDP buckets, overlapped with backward)."""

    name = "allreduce"

    def distributed_model(self, model: nn.Module) -> nn.Module:
        model = model.to(self.device)
        ids = [self.env.local_rank] if self.device.type == "cuda" else None
        ddp = DistributedDataParallel(model, device_ids=ids, process_group=self.workers_group)
        if self.options.allreduce == "ring":
            hook = RingHook(self)
            # A lambda: DDP checks a hook's annotations against real types, and ours are strings here.
            ddp.register_comm_hook(None, lambda state, bucket: hook(bucket))
        return ddp

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        params = [p for p in model.parameters() if p.requires_grad]

        def exchange() -> None:
            if not isinstance(model, DistributedDataParallel):  # DDP has averaged them during backward
                self.average_([p.grad for p in params if p.grad is not None])
            self.communication_rounds += 1

        return _patch_step(optimizer, exchange, local=True, after=self._advance)


class RingHook:
    """DDP communication hook: average each gradient bucket with our ring, on one background thread, so the
    exchange of a ready bucket overlaps the backward pass computing the next (as gloo's own allreduce does).
    One thread keeps the buckets in DDP's order, which is the same on every rank, as the ring's links need."""

    def __init__(self, strategy: Strategy) -> None:
        self.strategy = strategy
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ring-hook")

    def __call__(self, bucket: Any) -> torch.futures.Future[torch.Tensor]:
        buf: torch.Tensor = bucket.buffer()
        fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()

        def run() -> None:
            try:
                ring_allreduce(buf, group=self.strategy.workers_group).div_(self.strategy.world_size)
            except BaseException as e:  # DDP raises it from backward()
                fut.set_exception(e)  # type: ignore[arg-type]  # torch's stub says T
            else:
                fut.set_result(buf)

        self.pool.submit(run)
        return fut


class LocalSGDStrategy(Strategy):
    """Local SGD: `tau` optimizer steps on each worker alone, then the workers' parameters are averaged."""

    name = "local-sgd"

    @property
    def period(self) -> int:
        assert self.env.local_sgd_period is not None  # the env reader requires it for local-sgd
        return self.env.local_sgd_period

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        self._params = [p for p in model.parameters()]
        if self.steps_done == 0:  # start from the same point (resumed ranks load their own)
            self._average_parameters(count=False)

        def after() -> None:
            self._advance()
            if self.steps_done % self.period == 0:
                self._average_parameters()

        return _patch_step(optimizer, lambda: None, local=True, after=after)

    def _average_parameters(self, count: bool = True) -> None:
        self.average_(self._params)
        if count:
            self.communication_rounds += 1

    def finish(self) -> None:
        if self.steps_done % self.period:  # a partial period at the end: average it too
            self._average_parameters()


class ParameterServerStrategy(Strategy):
    """Parameters sharded over the PS ranks; workers push gradients and pull parameters every step."""

    name = "parameter-server"

    def __init__(self, env: RankEnv, options: Options) -> None:
        super().__init__(env, options)
        self.listener: socket.socket | None = None
        self.client: ShardClient | None = None
        self.token = auth.load_token(env.token_file)  # before anything is opened: without it, exit 2 at once
        if self.is_server:
            port = int(env.ps_addrs[env.index].rsplit(":", 1)[1])
            self.listener = socket.create_server(("", port), reuse_port=False)

    @property
    def addrs(self) -> list[tuple[str, int]]:
        return [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in self.env.ps_addrs]

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainingCheckpointer:
        return TrainingCheckpointer(self, model, optimizer, saves_model=False)  # the shards hold the state

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        if self.is_server:
            raise StrategyUsageError("parameter-server ranks call serve(), not distributed_optimizer()")
        self.client = ShardClient(
            self.addrs, self.rank, shard_parameters(model, self.env.num_ps), self.steps_done,
            connect_timeout=self.options.rendezvous_timeout, timeout=self.options.timeout, token=self.token,
        )  # fmt: skip

        def exchange() -> None:
            assert self.client is not None
            self.client.push_pull(self.steps_done)
            self.communication_rounds += 1

        return _patch_step(optimizer, exchange, local=False, after=self._advance)

    def serve(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ServerStats:
        """Serve this rank's shard until every worker is done; checkpoint it alongside the workers."""
        if not self.is_server or self.listener is None:
            raise StrategyUsageError("serve() is for parameter-server ranks")
        index = self.env.index
        server = ShardServer(
            index, shard_parameters(model, self.env.num_ps)[index], optimizer, self.env.num_workers,
            self.env.ps_mode or "synchronous", self.env.ps_max_staleness, self.options.timeout, self.token,
            start_step=self.steps_done,
        )  # fmt: skip
        server.on_reject = lambda peer, reason: log_json(
            role="ps", index=index, event="connection-rejected", peer=peer, reason=reason
        )
        if self.resumed is not None:
            server.load_state_dict(self.resumed["shard"])
        checkpoints, saved = self.checkpoints, {self.steps_done}

        def on_progress(slowest: int) -> None:
            if checkpoints and slowest not in saved and (checkpoints.due(slowest) or server.finished):
                checkpoints.save(slowest, {"shard": server.state_dict()})
                saved.add(slowest)

        server.on_progress = on_progress
        log_json(role="ps", index=index, event="serving", values=server.flat.numel(), mode=server.mode)
        try:
            server.serve(self.listener, accept_timeout=self.options.rendezvous_timeout)
        finally:
            self.listener.close()
        stats = server.stats
        log_json(role="ps", index=index, event="done", updates=stats.updates, waits=stats.waits,
                 max_lead_on_release=stats.max_lead_on_release, rejected=stats.rejected)  # fmt: skip
        return stats

    def finish(self) -> None:
        if self.client is not None:
            self.client.done()
            self.client = None


class TrainingCheckpointer:
    """A worker's checkpoints: model and optimizer (unless the shards hold them), progress and RNG states."""

    def __init__(self, strategy: Strategy, model: nn.Module, optimizer: torch.optim.Optimizer, saves_model: bool):
        self.strategy, self.optimizer, self.saves_model = strategy, optimizer, saves_model
        self.model = model.module if isinstance(model, DistributedDataParallel) else model
        self.last_step: int | None = None

    @property
    def enabled(self) -> bool:
        return self.strategy.checkpoints is not None

    def restore(self) -> dict[str, Any] | None:
        """Load the checkpoint the ranks agreed on, if any; return the `progress` saved with it."""
        state = self.strategy.resumed
        if state is None:
            return None
        if self.saves_model:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(_python_rng(state["rng"]["python"]))
        self.last_step = int(state["step"])
        self.strategy.metrics.last_checkpoint_step.set(self.last_step)
        return dict(state["progress"])

    def maybe_save(self, step: int, progress: Mapping[str, Any]) -> None:
        checkpoints = self.strategy.checkpoints
        if checkpoints is not None and checkpoints.due(step):
            self.save(step, progress)

    def save(self, step: int, progress: Mapping[str, Any]) -> None:
        checkpoints = self.strategy.checkpoints
        if checkpoints is None or step == self.last_step:
            return
        started = time.perf_counter()
        state: dict[str, Any] = {
            "progress": dict(progress),
            "rounds": self.strategy.communication_rounds,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        }
        if self.saves_model:
            state |= {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}
        path = checkpoints.save(step, state)
        self.last_step = step
        self.strategy.metrics.last_checkpoint_step.set(step)
        log_json(
            role=self.strategy.env.role, index=self.strategy.env.index, event="checkpoint", step=step, path=str(path),
            seconds=round(time.perf_counter() - started, 4),
        )  # fmt: skip


def _python_rng(saved: Any) -> tuple[Any, ...]:
    version, internal, gauss = saved
    return (version, tuple(internal), gauss)


STRATEGIES: dict[str, type[Strategy]] = {
    "allreduce": AllreduceStrategy,
    "parameter-server": ParameterServerStrategy,
    "local-sgd": LocalSGDStrategy,
}


INCARNATION_KEY = "ringleader/incarnation"
CONNECT_SECONDS = 5.0


def _formed_key(incarnation: str) -> str:
    return f"ringleader/{incarnation}/formed"


def _rendezvous(env: RankEnv, options: Options) -> None:
    """Join the process group of every rank within `rendezvous_timeout`.

    Worker 0 hosts the store and names the group it forms with a fresh id, once per process; every rank
    builds the group under that prefix, and worker 0 marks it formed once all have joined. A rank joins
    only a group that is not formed yet and that it has not tried before: after a recovery (`recovery`:
    survivors start a fresh process, the dead rank's pod is replaced) a rank that reaches the previous
    worker 0's store before that process has gone sees a formed group and waits for the store to go away,
    then reconnects to the new worker 0 and joins its group. Worker 0 does not retry: its failure to form
    the group is a rendezvous timeout (exit 200), and the others wait for its replacement."""
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    deadline = time.monotonic() + options.rendezvous_timeout
    is_host = env.global_rank == 0
    where = f"rendezvous with {env.master_addr}:{env.master_port} as rank {env.global_rank} of {env.global_world_size}"
    tried: set[str] = set()
    store: Any = None
    waiting_since = 0.0
    while True:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError(f"no group to join in {options.rendezvous_timeout:g} s")
            if store is None:
                # A client gives each connection attempt a few seconds and then resolves worker 0's name
                # again: while worker 0's pod is replaced its name still points at the old address for a
                # while, where a connect would otherwise sit out the kernel's SYN retries (about 2 min).
                store = dist.TCPStore(  # type: ignore[attr-defined]
                    env.master_addr, env.master_port, env.global_world_size, is_master=is_host,
                    timeout=datetime.timedelta(seconds=remaining if is_host else min(CONNECT_SECONDS, remaining)),
                    wait_for_workers=False,
                )  # fmt: skip
                store.set_timeout(datetime.timedelta(seconds=remaining))
                if is_host:
                    store.set(INCARNATION_KEY, uuid.uuid4().hex)
            incarnation = store.get(INCARNATION_KEY).decode()
            if incarnation in tried or store.check([_formed_key(incarnation)]):
                if not waiting_since:
                    waiting_since = time.monotonic()
                    log_json(role=env.role, index=env.index, event="rendezvous-wait", group=incarnation)
                time.sleep(0.5)  # the store's host is going away (or gone): the next call fails, then reconnect
                continue
            tried.add(incarnation)
            dist.init_process_group(
                backend, store=dist.PrefixStore(f"ringleader/{incarnation}/", store),  # type: ignore[attr-defined]
                rank=env.global_rank, world_size=env.global_world_size,
                timeout=datetime.timedelta(seconds=options.timeout),
            )  # fmt: skip
            if is_host:  # gloo connected worker 0 to every rank: the group takes no one new from now on
                store.set(_formed_key(incarnation), "1")
            return
        except (dist.DistError, RuntimeError, OSError, TimeoutError) as e:
            if dist.is_initialized():
                dist.destroy_process_group()
            if is_host or time.monotonic() >= deadline:
                raise RendezvousError(f"{where} failed within {options.rendezvous_timeout:g} s: {one_line(e)}") from e
            log_json(role=env.role, index=env.index, event="rendezvous-retry", reason=one_line(e))
            store = None  # reconnect: worker 0 may be a new process by now
            waiting_since = 0.0
            time.sleep(0.5)


def _agree_on_resume(strategy: Strategy) -> None:
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
    log_json(role=strategy.env.role, index=strategy.env.index, event="resume", step=agreed)


def from_env(environ: Mapping[str, str] | None = None, options: Options | None = None, **overrides: Any) -> Strategy:
    """Read the environment contract, rendezvous with every rank, agree on the checkpoint to resume from,
    and return this rank's strategy. Worker 0 starts serving metrics. `overrides` set `Options` fields."""
    options = options or Options()
    if overrides:
        options = Options(**{**options.__dict__, **overrides})
    if options.allreduce not in ALLREDUCE_IMPLEMENTATIONS:
        raise ValueError(f"allreduce={options.allreduce!r} is not one of {', '.join(ALLREDUCE_IMPLEMENTATIONS)}")
    env = read_env(os.environ if environ is None else environ)
    if options.allreduce == "ring":
        auth.load_token(env.token_file)  # the ring's links need it: fail now, not at the first allreduce
    strategy = STRATEGIES[env.strategy](env, options)
    if env.checkpoint_dir:
        assert env.checkpoint_interval is not None and env.checkpoint_keep is not None
        strategy.checkpoints = ckpt.Checkpointer(
            Path(env.checkpoint_dir), env.role, env.index, env.num_workers, env.num_ps,
            env.checkpoint_interval, env.checkpoint_keep, elastic=env.strategy != "parameter-server",
        )  # fmt: skip
    _rendezvous(env, options)
    if env.num_ps:
        group = dist.new_group(list(range(env.num_workers)), timeout=strategy.timeout)  # every rank must call it
        strategy.workers_group = group if isinstance(group, dist.ProcessGroup) else None  # None on shards
    _agree_on_resume(strategy)
    strategy._log_window = (time.perf_counter(), strategy.steps_done)
    if env.role == "worker" and env.index == 0:
        strategy.metrics.serve(env.metrics_port)
    device = f", on {strategy.device}" if strategy.is_worker else ""  # shards serve from host memory
    print(f"[ringleader] {env.role} {env.index}: {strategy.name}, rank {env.global_rank} of {env.global_world_size}"
          f"{device}, starting at step {strategy.steps_done}", file=sys.stderr, flush=True)  # fmt: skip
    return strategy
