"""Parameter servers: the parameters sharded over the PS ranks; workers push gradients and pull parameters.

A lost worker stops no shard (`shards`; not with --recover-from checkpoint): the shards hold the whole training
state but the worker's step, so its replacement asks them where it was (`shards.probe`) and takes its place back
there without joining a process group, the others training on meanwhile (a synchronous round waits for it).
With backups (`spec.parameterServer.backup`) a lost shard heals too: its replacement serves from the copy the
next shard kept (ps_backup), and the workers wait for it instead of starting again from a checkpoint.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ringleader_trainer.checkpoints.training import TrainingCheckpointer
from ringleader_trainer.elastic.healing import HealError
from ringleader_trainer.elastic.stopping import Stopped
from ringleader_trainer.env import PSMode, RankEnv
from ringleader_trainer.exitcodes import StrategyUsageError
from ringleader_trainer.logs import log_json
from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.strategies.parameter_server.client import ShardClient, probe
from ringleader_trainer.strategies.parameter_server.layout import shard_parameters
from ringleader_trainer.strategies.parameter_server.shard_records import Backups, ServerStats, ShardHooks
from ringleader_trainer.strategies.parameter_server.shards import ShardServer
from ringleader_trainer.strategies.tools import patch_step
from ringleader_trainer.strategy import Options, Strategy
from ringleader_trainer.transport import auth

PROBE_SECONDS = 2.0  # one attempt to reach a shard when a worker starts: is a run being served?


class ParameterServerStrategy(Strategy):
    """Parameters sharded over the PS ranks; workers push gradients and pull parameters every step."""

    name = "parameter-server"
    # A worker's pushes and pulls go to the shards over connections of their own, not the process group's: one
    # waiting on a shard when the group breaks (a worker lost) rightly waits on.
    exchanges_in_group = False

    def __init__(self, env: RankEnv, options: Options, **kwargs: Any) -> None:
        super().__init__(env, options, **kwargs)
        self.client: ShardClient | None = None
        if env.ps is None:  # the env reader requires it under parameter-server
            raise StrategyUsageError("the parameter-server settings (RINGLEADER_PS_*) are not set")
        self.shards = env.ps
        self.token = auth.load_token(env.token_file)  # before anything is opened: without it, exit 2 at once
        self.rejoined = False  # this worker took a lost worker's place back at the shards (no process group)
        self.restoring = False  # this shard replaces a lost one: it serves from the copy its backup kept

    @property
    def backups(self) -> bool:
        """Each shard's state is kept on the next shard (healing only: a lost shard's replacement serves from it)."""
        return self.shards.backup and self.options.heal

    @property
    def addrs(self) -> list[tuple[str, int]]:
        return [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in self.shards.addrs]

    def join(self) -> None:
        """A worker started while the shards serve a run (it replaces a lost one): take its place back at the
        step the shards hold for it, joining no process group (the others are training); else rendezvous with
        every rank as every strategy does."""
        if self.is_worker and self.options.heal and (step := self._lost_place()) is not None:
            self.steps_done, self.rejoined = step, True
            self.metrics.resumed(step)
            log_json(role=self.env.role, index=self.env.index, event="healed", step=step, source="shards")
            return
        if self.is_server and self.backups:
            # A shard started while the next shard serves and holds its copy replaces a lost shard: it serves
            # from that copy (`serve`), joining nothing. Else (the job is starting, or its backup holds no copy)
            # it joins everyone, who then start again from the checkpoint.
            self.restoring = ps_backup.held(self.addrs[self._backup_index], self.env.index, self._backup_index,
                                            self.token, PROBE_SECONDS)  # fmt: skip
            if self.restoring:
                return
        super().join()

    @property
    def _backup_index(self) -> int:
        return (self.env.index + 1) % self.env.num_ps

    def _lost_place(self) -> int | None:
        """This worker's clock on every shard once every shard has given its place up; None when the shards
        are not serving (or would not give a place back, or failed meanwhile: everyone starts again). A shard
        that still holds the place (its connection has not failed yet: a node lost sends nothing) ends that
        connection when asked. HealError if the shards serve on but never agree within twice the timeout."""
        deadline = time.monotonic() + 2 * self.options.timeout
        while (answers := probe(self.addrs, self.rank, self.token, PROBE_SECONDS)) is not None:
            if not all(a.get("rejoin") is True for a in answers):
                return None
            clocks = {a.get("clock") for a in answers}
            if all(a.get("lost") is True for a in answers) and len(clocks) == 1:
                (clock,) = clocks
                if isinstance(clock, int) and clock >= 0:
                    return clock
            # Not yet released everywhere; or lost between its pushes to two shards (clocks differ), a place no
            # step resumes cleanly: the shards then time out waiting for it and everyone starts again.
            if time.monotonic() >= deadline:
                clocks_seen = ", ".join(sorted(map(str, clocks)))
                raise HealError(f"the shards serve, but did not agree on worker {self.rank}'s place (clocks "
                                f"{clocks_seen}) within {2 * self.options.timeout:g} s")  # fmt: skip
            time.sleep(0.2)
        return None

    def checkpointer(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainingCheckpointer:
        return TrainingCheckpointer(self, model, optimizer, saves_model=False)  # the shards hold the state

    def distributed_optimizer(self, optimizer: torch.optim.Optimizer, model: nn.Module) -> torch.optim.Optimizer:
        if self.is_server:
            raise StrategyUsageError("parameter-server ranks call serve(), not distributed_optimizer()")
        self.client = ShardClient(
            self.addrs, self.rank, shard_parameters(model, self.env.num_ps), self.steps_done,
            connect_timeout=self.options.rendezvous_timeout, timeout=self.options.timeout, token=self.token,
            resume=self.rejoined, backups=self.backups,
        )  # fmt: skip

        def exchange() -> None:
            assert self.client is not None
            self.metrics.entered_exchange()
            self.client.push_pull(self.steps_done, stop=self.stop.requested)
            self.metrics.left_exchange()
            self.communication_rounds += 1

        def after() -> None:
            self._advance()
            if self.client is not None and self.client.rejoined:  # a lost worker was replaced: the job went on
                self.client.rejoined = False
                self.metrics.resumed(self.steps_done)
                log_json(role=self.env.role, index=self.env.index, event="heal", step=self.steps_done,
                         source="shards")  # fmt: skip
            while self.client is not None and self.client.healed:  # a lost shard served on from its backup
                shard = self.client.healed.pop()
                self.metrics.resumed(self.steps_done)
                log_json(role=self.env.role, index=self.env.index, event="heal", step=self.steps_done,
                         source=f"shard {shard}'s backup")  # fmt: skip

        return patch_step(optimizer, exchange, local=False, after=after)

    def serve(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> ServerStats:
        """Serve this rank's shard until every worker is done; checkpoint it alongside the workers."""
        if not self.is_server:
            raise StrategyUsageError("serve() is for parameter-server ranks")
        index, shards = self.env.index, shard_parameters(model, self.env.num_ps)
        backups = None
        if self.backups:
            before = (index - 1) % self.env.num_ps
            backups = Backups(self._backup_index, self.addrs[self._backup_index], before, shards[before])
        checkpoints, saved = self.checkpoints, {self.steps_done}

        def on_progress(slowest: int) -> None:
            self.metrics.reached(slowest)  # a shard is as far as its slowest worker
            if checkpoints and slowest not in saved and (checkpoints.due(slowest) or server.finished):
                checkpoints.save(slowest, {"shard": server.state_dict()})
                saved.add(slowest)

        hooks = self._shard_hooks(index, on_progress)
        server = ShardServer(
            index, shards[index], optimizer, self.env.num_workers, self.shards.mode, self.shards.max_staleness,
            self.options.timeout, self.token, start_step=self.steps_done, rejoin=self.options.heal, backups=backups,
            hooks=hooks,
        )  # fmt: skip
        if self.resumed is not None:
            server.load_state_dict(self.resumed["shard"])
        if self.restoring:
            self._restore(server)
        self.metrics.entered_exchange()
        log_json(role="ps", index=index, event="serving", values=server.flat.numel(), mode=server.mode)
        # Listening only while serving: a worker starting finds no listener before (the job is starting) and
        # after (everyone is starting again), and a serving shard when it replaces a lost worker (`join`).
        port = int(self.shards.addrs[index].rsplit(":", 1)[1])
        with socket.create_server(("", port), reuse_port=False) as listener:
            server.serve(listener, accept_timeout=self.options.rendezvous_timeout)
        stats = server.stats
        if server.stopping:  # the workers stopped (and the shard saved) at the step shard 0 named
            raise self.stopped(server.slowest)
        log_json(role="ps", index=index, event="done", updates=stats.updates, waits=stats.waits,
                 max_lead_on_release=stats.max_lead_on_release, rejected=stats.rejected)  # fmt: skip
        return stats

    def _shard_hooks(self, index: int, progress: Callable[[int], None]) -> ShardHooks:
        """What shard `index` tells this rank (its log lines, its metrics) and asks it (whether it stops)."""

        def say(event: str, *names: str) -> Callable[..., None]:
            return lambda *args: log_json(role="ps", index=index, event=event, **dict(zip(names, args, strict=True)))

        return ShardHooks(
            progress,
            # A shard waits on its workers except while it applies an update (then it is the one they wait for).
            (self.metrics.left_exchange, self.metrics.entered_exchange),
            reject=say("connection-rejected", "peer", "reason"),
            lost=say("worker-lost", "worker", "reason"),
            rejoined=say("worker-rejoined", "worker", "step"),
            backup=lambda event, detail: log_json(role="ps", index=index, event=event, detail=detail),
            asked_to_stop=lambda: self.stop.requested,
        )

    def _restore(self, server: ShardServer) -> None:
        """Serve from the copy this shard's backup kept (this shard replaces a lost one: `join`)."""
        state = ps_backup.restore(self.addrs[self._backup_index], self.env.index, self._backup_index, self.token,
                                  self.options.timeout, ps_backup.state_bound(server.flat))  # fmt: skip
        server.restore(state)
        self.steps_done = server.slowest
        self.metrics.resumed(self.steps_done)
        log_json(role="ps", index=self.env.index, event="healed", step=self.steps_done,
                 source=f"shard {self._backup_index}'s backup")  # fmt: skip

    # ---- lossless stop: the request travels with the exchange, shard 0 names the step (shards.py) ---
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

    def close(self) -> None:
        """Leave the process group without the closing barrier where a lost worker can be replaced: its
        replacement is not in the group (the shards' DONE from every worker is the end instead)."""
        if self.options.heal:
            self.rendezvous.depart()
        else:
            super().close()
