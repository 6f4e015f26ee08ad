"""Parameter servers: the parameters sharded over the PS ranks; workers push gradients and pull parameters."""

from __future__ import annotations

import socket

import torch
from torch import nn

from ringleader_trainer import auth
from ringleader_trainer.checkpointing import TrainingCheckpointer
from ringleader_trainer.env import PSMode, RankEnv
from ringleader_trainer.logs import log_json
from ringleader_trainer.ps import ServerStats, ShardClient, ShardServer, shard_parameters
from ringleader_trainer.stopping import Stopped
from ringleader_trainer.strategy import Options, Strategy, StrategyUsageError, patch_step


class ParameterServerStrategy(Strategy):
    """Parameters sharded over the PS ranks; workers push gradients and pull parameters every step."""

    name = "parameter-server"

    def __init__(self, env: RankEnv, options: Options) -> None:
        super().__init__(env, options)
        self.listener: socket.socket | None = None
        self.client: ShardClient | None = None
        if env.ps is None:  # the env reader requires it under parameter-server
            raise StrategyUsageError("the parameter-server settings (RINGLEADER_PS_*) are not set")
        self.shards = env.ps
        self.token = auth.load_token(env.token_file)  # before anything is opened: without it, exit 2 at once
        if self.is_server:
            port = int(self.shards.addrs[env.index].rsplit(":", 1)[1])
            self.listener = socket.create_server(("", port), reuse_port=False)

    @property
    def addrs(self) -> list[tuple[str, int]]:
        return [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in self.shards.addrs]

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
            self.metrics.entered_exchange()
            self.client.push_pull(self.steps_done, stop=self.stop.requested)
            self.metrics.left_exchange()
            self.communication_rounds += 1

        return patch_step(optimizer, exchange, local=False, after=self._advance)

    def serve(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ServerStats:
        """Serve this rank's shard until every worker is done; checkpoint it alongside the workers."""
        if not self.is_server or self.listener is None:
            raise StrategyUsageError("serve() is for parameter-server ranks")
        index = self.env.index
        server = ShardServer(
            index, shard_parameters(model, self.env.num_ps)[index], optimizer, self.env.num_workers,
            self.shards.mode, self.shards.max_staleness, self.options.timeout, self.token,
            start_step=self.steps_done,
        )  # fmt: skip
        server.on_reject = lambda peer, reason: log_json(
            role="ps", index=index, event="connection-rejected", peer=peer, reason=reason
        )
        if self.resumed is not None:
            server.load_state_dict(self.resumed["shard"])
        checkpoints, saved = self.checkpoints, {self.steps_done}

        def on_progress(slowest: int) -> None:
            self.metrics.reached(slowest)  # a shard is as far as its slowest worker
            if checkpoints and slowest not in saved and (checkpoints.due(slowest) or server.finished):
                checkpoints.save(slowest, {"shard": server.state_dict()})
                saved.add(slowest)

        server.on_progress = on_progress
        # A shard waits on its workers except while it applies an update (then it is the one they wait for).
        server.on_apply = (self.metrics.left_exchange, self.metrics.entered_exchange)
        self.metrics.entered_exchange()
        server.asked_to_stop = lambda: self.stop.requested
        log_json(role="ps", index=index, event="serving", values=server.flat.numel(), mode=server.mode)
        try:
            server.serve(self.listener, accept_timeout=self.options.rendezvous_timeout)
        finally:
            self.listener.close()
        stats = server.stats
        if server.stopping:  # the workers stopped (and the shard saved) at the step shard 0 named
            raise self.stopped(server.slowest)
        log_json(role="ps", index=index, event="done", updates=stats.updates, waits=stats.waits,
                 max_lead_on_release=stats.max_lead_on_release, rejected=stats.rejected)  # fmt: skip
        return stats

    # ---- lossless stop: the request travels with the exchange, shard 0 names the step (ps.py) ----------
    def enable_stop(self) -> None:
        self.stop.install()

    def stop_agreed(self) -> bool:
        """Synchronous: at the round shard 0 named, which every worker reaches together. Asynchronous and bounded
        staleness: the furthest workers (one step short of it) train that step, as the shards' clocks must reach
        it; every other worker stops as soon as it hears the step: one far behind (a straggler, a slow node)
        would otherwise train on up to it, past the pod's grace period."""
        stop_at = self.client.stop_at if self.client is not None else None
        if stop_at is None:
            return False
        behind = self.shards.mode != PSMode.SYNCHRONOUS and self.steps_done < stop_at - 1
        return self.steps_done >= stop_at or behind

    def stop_step(self, step: int) -> int:
        """The step shard 0 named: a worker behind it (asynchronous modes) skips to it, so every rank's file of the
        stop is of one step and the job resumes there together; the steps it skips are not trained (its data
        between them is not seen this epoch), which is what asynchronous training does to a slow worker anyway."""
        stop_at = self.client.stop_at if self.client is not None else None
        return max(step, stop_at) if stop_at is not None else step

    def stopped(self, step: int) -> Stopped:
        if self.client is not None:  # a worker: the shards checkpoint this step once every worker says so
            self.client.done(stop=True)
            self.client = None
        return super().stopped(step)

    def finish(self) -> None:
        if self.client is not None:
            self.client.done()
            self.client = None
