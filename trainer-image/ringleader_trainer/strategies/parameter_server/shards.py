"""Parameter server: the model's parameters sharded over the PS ranks; workers push gradients, pull parameters.

Each shard (`ShardServer`) owns whole parameter tensors, assigned by `assign_shards` so shards hold about the
same number of values, and applies the optimizer the user configured to them:

- synchronous: one update per step from the mean of all workers' gradients, summed in worker order (so a run
  is reproducible); every worker waits for that update.
- asynchronous: each push is applied on arrival, scaled by 1/workers so that one push from every worker
  moves the parameters as far as one synchronous step (the same learning rate works under both); the
  pusher gets the parameters as they are then.
- bounded-staleness: as asynchronous, but a worker more than `max_staleness` steps ahead of the slowest
  unfinished worker waits until the slowest catches up.

A stop (elastic/stopping.py) travels with the exchange, and shard 0 decides the step: a worker asked to stop sets
Flag.STOP on its pushes; another shard asked to stop sets it on its replies, and the workers pass it on to
shard 0 with their next push. Shard 0, once it knows, names the step every worker stops at (STOP_AT, sent
before its next PARAMS to each worker): in synchronous mode the round just completed, which every worker
has reached; otherwise one past the furthest clock, which no worker can have passed (each pushes to shard 0
first and reads every reply before its next push). Workers behind it do not train on up to it (a worker far
behind would take it past its pod's grace period): each stops as soon as it hears the step and saves as of
it, skipping the steps between (ParameterServerStrategy.stop_step). Once a worker has finished, no step is
named: the others finish too. Workers that stop say DONE with Flag.STOP; the shard then checkpoints at that
step and its strategy ends it as stopped.

Workers talk to every shard through `ShardClient` over the raw-bytes protocol of `wire`, each connection
opened by `auth`'s handshake (both ends prove the job's token). A shard admits connections through a `Gate`:
until every worker's slot is claimed by a proven peer, connections that fail the handshake or the hello, or
claim a taken slot, are dropped and logged, and the shard keeps accepting.

A lost worker stops no shard (`rejoin`, the default; elastic/healing.py for the other strategies): its slot is given
back and the shards keep serving the others (asynchronous and bounded-staleness workers train on; a synchronous
round waits for the lost worker's push). Its replacement asks every shard where it is (a probe: HELLO with
"probe", answered by STATE with this worker's clock) and takes its slot back at that clock (HELLO with
"resume"), receiving the parameters as they are: it redoes the step it was lost in, if its push had not
completed the round, with the same parameters and data. Shard 0 then tells every worker (Flag.REJOINED) that
the job continued. A lost worker not replaced within the timeout, a lost shard, or anything else ends everyone
with `PeerLost` (exit 201): the operator recreates the ranks and they resume from the newest checkpoint all of
them have, which keeps synchronous runs exact.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.transport import auth, wire
from ringleader_trainer.transport.gate import Answered, Gate, Refused
from ringleader_trainer.transport.wire import Flag, Op, PeerLost, context

SYNCHRONOUS, ASYNCHRONOUS, BOUNDED = "synchronous", "asynchronous", "bounded-staleness"


def assign_shards(sizes: Sequence[int], num_shards: int) -> list[int]:
    """The shard of each parameter: largest first onto the least-loaded shard (ties to the lower index).
    Deterministic, so every rank computes the same assignment from the same model."""
    loads = [0] * num_shards
    out = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        shard = min(range(num_shards), key=lambda s: (loads[s], s))
        out[i] = shard
        loads[shard] += sizes[i]
    return out


def shard_parameters(model: nn.Module, num_shards: int) -> list[list[nn.Parameter]]:
    """The model's parameters grouped by shard, each group in model order."""
    params = list(model.parameters())
    owner = assign_shards([p.numel() for p in params], num_shards)
    return [[p for p, o in zip(params, owner, strict=True) if o == s] for s in range(num_shards)]


def flat_views(flat: torch.Tensor, like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Views into `flat`, one shaped like each of `like`, laid end to end."""
    out, offset = [], 0
    for t in like:
        out.append(flat[offset : offset + t.numel()].view_as(t))
        offset += t.numel()
    return out


def shard_buffers(
    model_params: Sequence[nn.Parameter], optimizer: torch.optim.Optimizer
) -> tuple[torch.Tensor, torch.Tensor, torch.optim.Optimizer]:
    """A shard's values in one flat buffer (a copy of `model_params`'), its gradient buffer, and the user's
    optimizer over parameters that are views into them."""
    dtype = model_params[0].dtype if model_params else torch.float32
    flat = torch.cat([p.detach().reshape(-1) for p in model_params]) if model_params else torch.empty(0)
    flat = flat.to(dtype).contiguous()
    grad = torch.zeros(flat.numel(), dtype=dtype)
    params = [nn.Parameter(v) for v in flat_views(flat, model_params)]
    for p, g in zip(params, flat_views(grad, model_params), strict=True):
        p.grad = g
    return flat, grad, shard_optimizer(optimizer, model_params, params)


@dataclass(frozen=True)
class Backups:
    """Primary/backup (ps_backup): where this shard's backup lives (shard `to` at `addr`), and the parameters of
    the shard whose backup this one keeps (the shard before it)."""

    to: int
    addr: tuple[str, int]
    of: int
    of_params: Sequence[nn.Parameter]


def shard_optimizer(
    optimizer: torch.optim.Optimizer, originals: Sequence[nn.Parameter], shard: Sequence[nn.Parameter]
) -> torch.optim.Optimizer:
    """The user's optimizer class and per-group settings, over the shard's own parameters (`shard[i]` stands
    for `originals[i]`)."""
    stand_in = {id(o): s for o, s in zip(originals, shard, strict=True)}
    groups = []
    for group in optimizer.param_groups:
        mine = [stand_in[id(p)] for p in group["params"] if id(p) in stand_in]
        if mine:
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": mine})
    return type(optimizer)(groups)  # type: ignore[call-arg]


class ShardFailed(PeerLost):
    """The shard itself failed (another worker lost past the timeout, a round not completed in time): everyone
    ends, even where a lost worker's slot would be given back."""


@dataclass
class ServerStats:
    updates: int = 0
    max_lead_on_release: int = 0  # the most steps any worker was ahead of the slowest when let go
    waits: int = 0  # releases held back by the staleness bound
    rejected: int = 0  # connections dropped: no proof of the job's token, a bad hello, a taken slot


class ShardServer:
    """One parameter-server shard. `serve(listener)` runs until every worker has said DONE.

    Parameters live in one flat buffer (the optimizer's parameters are views into it), so replies go out
    without a copy. `on_progress(slowest_clock)` is called under the lock whenever the slowest worker's clock
    advances, and once more at the end: the strategy checkpoints the shard there.
    """

    def __init__(
        self,
        shard: int,
        model_params: Sequence[nn.Parameter],
        optimizer: torch.optim.Optimizer,
        num_workers: int,
        mode: str,
        max_staleness: int | None,
        timeout: float,
        token: bytes,
        start_step: int = 0,
        rejoin: bool = False,
        backups: Backups | None = None,
    ) -> None:
        """`rejoin`: a lost worker's slot is given back and its replacement takes it (the others go on); else a
        lost worker ends the shard. `backups` (with `rejoin`): this shard's state is kept on the next shard and
        it keeps the previous shard's (ps_backup)."""
        if mode not in (SYNCHRONOUS, ASYNCHRONOUS, BOUNDED):
            raise ValueError(f"unknown parameter-server mode {mode!r}")
        if mode == BOUNDED and not max_staleness:
            raise ValueError("bounded-staleness needs max_staleness >= 1")
        self.shard, self.mode, self.max_staleness = shard, mode, max_staleness or 0
        self.num_workers, self.timeout, self.token = num_workers, timeout, token
        self.flat, self.grad, self.optimizer = shard_buffers(model_params, optimizer)
        self.cond = threading.Condition()
        self.clock = [start_step] * num_workers
        self.done: set[int] = set()
        self.pending: dict[int, torch.Tensor] = {}
        self.failure: str | None = None
        self.finished = False  # every worker said DONE; on_progress is being called a last time
        self.stop_heard = False  # a worker asked to stop (Flag.STOP on a push)
        self.stop_at: int | None = None  # shard 0: the step every worker stops at, once decided
        self.stopping = False  # a worker said DONE with Flag.STOP: the workers stopped, not finished
        self.asked_to_stop: Callable[[], bool] = lambda: False  # this shard's own stop signal
        self.stats = ServerStats()
        self.on_progress: Callable[[int], None] = lambda slowest: None
        self.on_reject: Callable[[str, str], None] = lambda peer, reason: None  # (peer address, why)
        # Called, under the lock, before and after each update is applied (the strategy stamps its metrics).
        self.on_apply: tuple[Callable[[], None], Callable[[], None]] = (lambda: None, lambda: None)
        self._conns: list[socket.socket] = []
        self.rejoin = rejoin
        self.lost: dict[int, float] = {}  # worker -> when its connection was lost (rejoin), until replaced
        self.rejoins = 0  # replacements taken in
        self.on_lost: Callable[[int, str], None] = lambda worker, why: None
        self.on_rejoined: Callable[[int, int], None] = lambda worker, clock: None
        self._gate: Gate | None = None
        self._by_worker: dict[int, socket.socket] = {}  # each admitted worker's connection
        self.returning: set[int] = set()  # workers to take back after this shard was restored from its backup
        self.on_backup: Callable[[str, str], None] = lambda event, detail: None  # its link linked or lost
        self.replica: ps_backup.Replica | None = None
        self.link: ps_backup.BackupLink | None = None
        if backups is not None and rejoin:
            self.replica = ps_backup.Replica(backups.of, lambda: shard_buffers(backups.of_params, optimizer))
            self.link = ps_backup.BackupLink(
                shard, backups.to, backups.addr, token, timeout, self.flat.numel(), self.whole_state, self.cond,
                self._backup_event,
            )  # fmt: skip

    # ---- state the strategy checkpoints -------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"flat": self.flat.clone(), "optimizer": self.optimizer.state_dict()}

    def whole_state(self) -> dict[str, Any]:
        """What the backup keeps (under the lock): the checkpoint's state and every worker's clock."""
        return ps_backup.whole_state(self.flat, self.optimizer, self.clock, self.done)

    def restore(self, state: dict[str, Any]) -> None:
        """Serve on from the state this shard's backup kept (`ps_backup.restore`): every unfinished worker's
        place is open for it to take back, at its clock there."""
        clock, done = state.get("clock"), state.get("done")
        if not (isinstance(clock, list) and len(clock) == self.num_workers and isinstance(done, list)):
            raise PeerLost(f"shard {self.shard}: its backup's state does not hold {self.num_workers} workers' clocks")
        ps_backup.load(state, self.flat, self.optimizer)
        self.clock, self.done = [int(c) for c in clock], {int(w) for w in done}
        now = time.monotonic()
        self.returning = {w for w in range(self.num_workers) if w not in self.done}
        self.lost = dict.fromkeys(self.returning, now)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["flat"].shape != self.flat.shape:
            raise ValueError(
                f"shard {self.shard}: checkpoint holds {state['flat'].numel()} values, model {self.flat.numel()}"
            )
        self.flat.copy_(state["flat"])
        self.optimizer.load_state_dict(state["optimizer"])  # clocks restart at start_step, as the workers do

    @property
    def stop_requested(self) -> bool:
        return self.stop_heard or self.asked_to_stop()

    @property
    def slowest(self) -> int:
        active = [c for w, c in enumerate(self.clock) if w not in self.done]
        return min(active) if active else max(self.clock)

    # ---- serving ------------------------------------------------------------------------------------
    def serve(self, listener: socket.socket, accept_timeout: float) -> None:
        """Admit one proven connection per worker and serve them; return when all are DONE. Raise PeerLost if
        not every worker connected within `accept_timeout` or a worker's connection fails (after closing the
        others so their workers fail fast too)."""
        gate = self._gate = Gate(listener, self._handshake, self.on_reject)
        if self.link is not None:
            self.link.start()
        slots = self.num_workers + (self.replica is not None)  # the last: the previous shard's backup link
        try:
            try:
                gate.run(slots, time.monotonic() + accept_timeout, self._connection,
                         stop=self._ended, keep_open=self.rejoin)  # fmt: skip
            except TimeoutError as e:
                self._fail(f"shard {self.shard}: not every worker connected within {accept_timeout:g} s: {e}")
            if self.link is not None:  # before waiting for the backup link this shard serves (no cycle of waits)
                self.link.end()
            for t in list(gate.admitted):
                t.join()
        finally:
            with self.cond:
                conns = list(self._conns)
            for c in conns:
                c.close()
            self.stats.rejected = gate.rejected
        if self.failure:
            raise PeerLost(self.failure)
        with self.cond:
            self.finished = True
            self.on_progress(self.slowest)

    def _ended(self) -> bool:
        """Whether to stop admitting: a failure, or (rejoin) every worker done; a worker lost for longer than
        the timeout is a failure."""
        with self.cond:
            now = time.monotonic()
            overdue = sorted(w for w, since in self.lost.items() if now - since > self.timeout)
            if overdue and self.failure is None:
                self._fail(f"shard {self.shard}: worker {overdue[0]} was lost and not replaced within "
                           f"{self.timeout:g} s")  # fmt: skip
            return self.failure is not None or (self.rejoin and len(self.done) >= self.num_workers)

    def _lose(self, worker: int, conn: socket.socket, why: str) -> None:
        """Give a lost worker's slot back for its replacement (rejoin); the others go on."""
        with self.cond:
            if self.failure is not None:
                return
            self.lost[worker] = time.monotonic()
            self._conns.remove(conn)
            if self._by_worker.get(worker) is conn:
                del self._by_worker[worker]
        conn.close()
        if self._gate is not None:
            self._gate.release(worker)
        self.on_lost(worker, why)

    def _fail(self, message: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = message
                for c in self._conns:
                    with contextlib.suppress(OSError):
                        c.shutdown(socket.SHUT_RDWR)
            self.cond.notify_all()

    def _handshake(self, conn: socket.socket) -> int:
        """Authenticate a new connection and read its hello; the worker index it claims. Refused (after telling
        the peer why, once it has proven the token) for a hello this shard cannot serve."""
        conn.settimeout(self.timeout)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        auth.accept(conn, self.token, context(self.shard))
        header = wire.recv_header(conn)
        wire.expect(conn, header, Op.HELLO)
        info = wire.recv_json(conn, header)
        worker = header.worker
        problem = None
        if self.replica is not None and ("backup_of" in info or "restore" in info):
            return self._backup_hello(conn, info)
        if worker >= self.num_workers:
            problem = f"worker index {worker} is out of range for {self.num_workers} workers"
        elif info.get("shard") != self.shard:
            problem = f"this is shard {self.shard}, not shard {info.get('shard')}"
        elif info.get("probe") is True:  # a replacement asks where its worker was: answer, then hang up
            with self.cond:
                state = {"clock": self.clock[worker], "lost": worker in self.lost, "rejoin": self.rejoin}
            self._end_stale(worker)  # its predecessor is gone (a node lost sends no FIN)
            wire.send_json(conn, Op.STATE, worker, state["clock"], state)  # the clock read under the lock
            raise Answered()
        elif info.get("numel") != self.flat.numel() or info.get("dtype") != str(self.flat.dtype):
            problem = (
                f"shard {self.shard} holds {self.flat.numel()} {self.flat.dtype} values, worker {worker} expects "
                f"{info.get('numel')} {info.get('dtype')}: do all ranks build the same model?"
            )
        elif info.get("resume") is True:
            if worker not in self.lost:
                problem = f"worker {worker} is not lost on shard {self.shard}: there is no place to take back"
        elif header.step != self.clock[worker]:
            problem = f"worker {worker} resumes at step {header.step}, shard {self.shard} at {self.clock[worker]}"
        if problem:
            wire.send_error(conn, problem)  # the peer proved the token: it is one of this job's ranks
            raise Refused(problem)
        return worker

    def _backup_event(self, event: str, detail: str) -> None:
        self.on_backup(event, detail)  # looked up now: the strategy sets it after construction

    def _end_stale(self, worker: int) -> None:
        """End `worker`'s connection here (rejoin): its process is gone, which a node lost never says."""
        with self.cond:
            stale = self._by_worker.get(worker) if self.rejoin else None
        if stale is not None:
            with contextlib.suppress(OSError):
                stale.shutdown(socket.SHUT_RDWR)

    def _backup_hello(self, conn: socket.socket, info: dict[str, Any]) -> int:
        """The previous shard links its backup here (its slot, after the workers'), or its replacement asks for
        the copy (answered, no slot)."""
        assert self.replica is not None
        if info.get("restore") == self.replica.of:
            probe = info.get("probe") is True
            try:
                self.replica.hand_over(conn, probe)
            except PeerLost as e:
                wire.send_error(conn, str(e))
                raise Refused(str(e)) from e
            if not probe:
                self.on_backup("backup-handed-over", f"to shard {self.replica.of}'s replacement")
            raise Answered()
        if info.get("backup_of") != self.replica.of or info.get("numel") != self.replica.flat.numel():
            problem = (
                f"shard {self.shard} keeps the backup of shard {self.replica.of} ({self.replica.flat.numel()} values)"
            )
            wire.send_error(conn, problem)
            raise Refused(problem)
        return self.num_workers

    def _connection(self, conn: socket.socket, worker: int) -> None:
        """Serve one admitted worker (on its connection's thread) until it says DONE; or the previous shard's
        backup link (the slot after the workers')."""
        if worker == self.num_workers and self.replica is not None:
            self._serve_replica(conn)
        else:
            self._serve_worker(conn, worker)

    def _serve_worker(self, conn: socket.socket, worker: int) -> None:
        with self.cond:
            self._conns.append(conn)
            if self.failure is not None:
                conn.close()
                return
            snapshot = self.flat.clone()
            self._by_worker[worker] = conn
            returned = worker in self.returning  # after this shard's restore: not a replacement
            self.returning.discard(worker)
            rejoined = self.lost.pop(worker, None) is not None and not returned
            self.rejoins += rejoined
            heard = self.rejoins  # the replacements this worker knows of
        if rejoined:
            self.on_rejoined(worker, self.clock[worker])
        try:
            wire.send(conn, Op.PARAMS, worker, self.clock[worker], wire.tensor_bytes(snapshot))
            inbox = torch.empty_like(self.grad)
            outbox = torch.empty_like(self.flat)
            told = False  # this worker has been sent STOP_AT
            while True:
                header = wire.recv_header(conn)
                if header.op == Op.ERROR:  # the worker gives up: every rank resumes from the checkpoint
                    raise ValueError(f"worker {worker}: {wire.recv_small(conn, header).decode(errors='replace')}")
                wire.expect(conn, header, Op.PUSH, Op.DONE)
                stops = bool(header.flags & Flag.STOP)
                if header.op == Op.DONE:
                    with self.cond:
                        self.done.add(worker)
                        self.stopping |= stops
                        self.cond.notify_all()
                    wire.send(conn, Op.DONE, worker, self.clock[worker])
                    return
                wire.recv_tensor_into(conn, header, inbox)
                reply, stop_at = self._push(worker, header.step, inbox, outbox, stops)
                if stop_at is not None and not told:
                    wire.send(conn, Op.STOP_AT, worker, stop_at)
                    told = True
                flags = Flag.STOP if self.asked_to_stop() else Flag.NONE
                if self.shard == 0 and self.rejoins > heard:  # tell the worker the job continued
                    heard, flags = self.rejoins, flags | Flag.REJOINED
                wire.send(conn, Op.PARAMS, worker, self.clock[worker], wire.tensor_bytes(reply), flags)
        except ShardFailed as e:
            self._fail(str(e))
        except PeerLost as e:  # the worker's connection: lost with it (rejoin), else the end of everyone
            if self.rejoin:
                self._lose(worker, conn, str(e))
            else:
                self._fail(f"shard {self.shard}: {e}")
        except ValueError as e:
            self._fail(f"shard {self.shard}: {e}")

    def _serve_replica(self, conn: socket.socket) -> None:
        """Keep the previous shard's backup over its link until it says DONE or is lost (its slot given back for
        its replacement's link)."""
        assert self.replica is not None
        try:
            self.replica.serve(conn)
        except PeerLost as e:
            self.on_backup("primary-lost", f"shard {self.replica.of}: {e}")
        finally:
            conn.close()
            if self._gate is not None:
                self._gate.release(self.num_workers)

    def _forward(self, grad: torch.Tensor, worker: int, clock: int, round_: bool = False) -> None:
        """Under the lock, after an update: the backup has it before any worker is answered."""
        if self.link is not None:
            self.link.forward(grad, worker, clock, round_)

    def _wait(self, predicate: Callable[[], bool], what: str) -> None:
        if not self.cond.wait_for(lambda: self.failure is not None or predicate(), timeout=self.timeout):
            raise ShardFailed(f"shard {self.shard}: {what} within {self.timeout:g} s")
        if self.failure is not None:
            raise ShardFailed(self.failure)

    def _apply(self, grad: torch.Tensor) -> None:
        self.on_apply[0]()
        self.grad.copy_(grad)
        self.optimizer.step()
        self.stats.updates += 1
        self.on_apply[1]()

    def _advance(self, worker: int, clock: int) -> None:
        before = self.slowest
        self.clock[worker] = clock
        after = self.slowest
        for step in range(before + 1, after + 1):
            self.on_progress(step)

    def _push(
        self, worker: int, step: int, grad: torch.Tensor, outbox: torch.Tensor, stops: bool = False
    ) -> tuple[torch.Tensor, int | None]:
        """Apply one push per the mode; return the tensor to send back (the live buffer in synchronous mode,
        where nothing changes it until this worker pushes again; a snapshot otherwise) and the step to stop
        at, once shard 0 has decided it."""
        with self.cond:
            if step != self.clock[worker]:
                raise PeerLost(f"worker {worker} pushed step {step}, expected {self.clock[worker]}")
            self.stop_heard |= stops
            if self.mode == SYNCHRONOUS:
                self.pending[worker] = grad
                if len(self.pending) == self.num_workers:
                    total = self.pending[0].clone()
                    for w in range(1, self.num_workers):
                        total.add_(self.pending[w])
                    self._apply(total.div_(self.num_workers))
                    self.pending.clear()
                    self._decide_stop(step + 1)  # the round every worker has reached
                    for w in range(self.num_workers):
                        self._advance(w, step + 1)
                    self._forward(total, 0, step + 1, round_=True)
                    self.cond.notify_all()
                else:
                    self._wait(lambda: self.clock[worker] > step, f"not every worker pushed step {step}")
                self._released(worker)
                return self.flat, self.stop_at
            if not self.done:  # one past the furthest worker, none of whom can pass it (none has finished)
                self._decide_stop(max(self.clock) + 1)
            self._apply(grad.div_(self.num_workers))
            self._advance(worker, step + 1)
            self._forward(grad, worker, step + 1)
            self.cond.notify_all()
            if self.mode == BOUNDED and self.clock[worker] - self.slowest > self.max_staleness:
                self.stats.waits += 1
                self._wait(
                    lambda: self.clock[worker] - self.slowest <= self.max_staleness,
                    f"the slowest worker did not come within {self.max_staleness} steps of worker {worker}",
                )
            self._released(worker)
            outbox.copy_(self.flat)
            return outbox, self.stop_at

    def _decide_stop(self, step: int) -> None:
        """Shard 0, under the lock: fix the step to stop at, once, when a stop has been asked for."""
        if self.shard == 0 and self.stop_at is None and self.stop_requested:
            self.stop_at = step

    def _released(self, worker: int) -> None:
        lead = self.clock[worker] - self.slowest
        self.stats.max_lead_on_release = max(self.stats.max_lead_on_release, lead)


class ShardClient:
    """A worker's connections to every shard. `push_pull(step)` sends this step's gradients and replaces the
    model's parameters with the shards' answers."""

    def __init__(
        self,
        addrs: Sequence[tuple[str, int]],
        worker: int,
        shards: Sequence[Sequence[nn.Parameter]],
        step: int,
        connect_timeout: float,
        timeout: float,
        token: bytes,
        resume: bool = False,
        backups: bool = False,
    ) -> None:
        """`resume`: take back this worker's place, which the shards gave up when it was lost, at `step` (the
        clock `probe` found on every shard). `backups`: a lost shard is waited for, up to `timeout`, and this
        worker's place taken back at its replacement (ps_backup), instead of giving up."""
        self.worker, self.shards, self.token = worker, shards, token
        self.addrs, self.timeout, self.backups = list(addrs), timeout, backups
        self.healed: list[int] = []  # shards lost and taken back at their replacements, since last looked at
        self.socks: list[socket.socket] = []
        self.flats = [torch.empty(sum(p.numel() for p in s), dtype=s[0].dtype if s else torch.float32) for s in shards]
        self.wait_seconds = 0.0  # time spent waiting for the shards' replies (includes staleness waits)
        self.stop_heard = False  # a shard's reply carried Flag.STOP: pass it on to shard 0
        self.stop_at: int | None = None  # the step shard 0 named (STOP_AT)
        self.rejoined = False  # shard 0 said a lost worker's replacement took its place (Flag.REJOINED)
        try:
            for i in range(len(addrs)):
                self.socks.append(self._open(i, step, resume, connect_timeout))
            for i in range(len(addrs)):
                self._receive(i, step)
        except BaseException:
            self.close()
            raise

    def _open(self, i: int, step: int, resume: bool, connect_timeout: float) -> socket.socket:
        """A proven connection to shard `i`, its HELLO sent (taking this worker's place back with `resume`)."""
        host, port = self.addrs[i]
        sock = wire.connect(host, port, connect_timeout, self.timeout)
        try:
            auth.initiate(sock, self.token, context(i))
            flat = self.flats[i]
            hello = {"shard": i, "numel": flat.numel(), "dtype": str(flat.dtype)}
            wire.send_json(sock, Op.HELLO, self.worker, step, hello | ({"resume": True} if resume else {}))
        except auth.AuthError as e:
            sock.close()
            raise PeerLost(f"shard {i} at {host}:{port}: {e}") from e
        except BaseException:
            sock.close()
            raise
        return sock

    def _receive(self, i: int, step: int) -> int:
        """Shard `i`'s parameters into the model; the clock it sent them at (`step` unless taking a place back)."""
        sock = self.socks[i]
        header = wire.recv_header(sock)
        if header.op == Op.STOP_AT and i == 0 and self.stop_at is None:
            self.stop_at = header.step
            header = wire.recv_header(sock)
        wire.expect(sock, header, Op.PARAMS)
        self.stop_heard |= bool(header.flags & Flag.STOP)
        self.rejoined |= bool(header.flags & Flag.REJOINED)
        wire.recv_tensor_into(sock, header, self.flats[i])
        with torch.no_grad():
            for p, v in zip(self.shards[i], flat_views(self.flats[i], self.shards[i]), strict=True):
                p.copy_(v)
        return header.step

    def _push(self, i: int, step: int, flags: Flag) -> None:
        """This step's gradients of shard `i`'s parameters, sent."""
        # The wire carries host memory: .cpu() is free on CPU and one copy on GPU.
        grads = [
            p.grad.reshape(-1).cpu() if p.grad is not None else torch.zeros(p.numel(), dtype=p.dtype)
            for p in self.shards[i]
        ]
        if grads:
            torch.cat(grads, out=self.flats[i])
        wire.send(self.socks[i], Op.PUSH, self.worker, step, wire.tensor_bytes(self.flats[i]), flags)

    def _take_back(self, i: int, step: int, flags: Flag, lost: PeerLost) -> None:
        """Shard `i` was lost during `step` (`lost`): take this worker's place back at its replacement, which
        serves from the backup, pushing the step again if the lost shard had not applied it. PeerLost (`lost`'s
        text) without backups, or when no replacement answers within the timeout."""
        if not self.backups:
            raise lost
        self.socks[i].close()
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.socks[i] = self._open(i, step, True, min(2.0, max(0.1, deadline - time.monotonic())))
                clock = self._receive(i, step)
                if clock == step:  # the update had not been applied: push it again
                    self._push(i, step, flags)
                    clock = self._receive(i, step + 1)
                if clock != step + 1:
                    raise PeerLost(f"shard {i} took worker {self.worker} back at step {clock}, not {step}")
                self.healed.append(i)
                return
            except (PeerLost, TimeoutError, OSError) as e:
                self.socks[i].close()
                if time.monotonic() >= deadline:
                    raise PeerLost(f"{lost}; and shard {i} did not take worker {self.worker} back within "
                                   f"{self.timeout:g} s: {e}") from e  # fmt: skip
                time.sleep(0.2)

    def push_pull(self, step: int, stop: bool = False) -> None:
        """Push this step's gradients (with Flag.STOP when this worker was asked to stop, or a shard's reply
        said one was), take the new parameters, and `stop_at` once shard 0 names it. A shard lost (or not
        answering in time) makes every other shard give up too (ERROR): they would otherwise wait for this
        worker's replacement while the job starts again from the checkpoint."""
        try:
            self._push_pull(step, stop)
        except PeerLost as e:
            for sock in self.socks:
                wire.send_error(sock, f"worker {self.worker} lost a shard: {e}")
            raise

    def _push_pull(self, step: int, stop: bool) -> None:
        flags = Flag.STOP if stop or self.stop_heard else Flag.NONE
        lost: dict[int, PeerLost] = {}
        for i in range(len(self.socks)):
            try:
                self._push(i, step, flags)
            except PeerLost as e:
                lost[i] = e
        t0 = time.perf_counter()
        for i in range(len(self.socks)):
            if i not in lost:
                try:
                    self._receive(i, step + 1)
                    continue
                except PeerLost as e:
                    lost[i] = e
            self._take_back(i, step, flags, lost[i])
        self.wait_seconds += time.perf_counter() - t0

    def done(self, stop: bool = False) -> None:
        """Tell every shard this worker is finished (or, with `stop`, stopped at its current step)."""
        for sock in self.socks:
            wire.send(sock, Op.DONE, self.worker, 0, flags=Flag.STOP if stop else Flag.NONE)
        for sock in self.socks:
            wire.expect(sock, wire.recv_header(sock), Op.DONE)
        self.close()

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks = []


def probe(addrs: Sequence[tuple[str, int]], worker: int, token: bytes, timeout: float) -> list[dict[str, Any]] | None:
    """Every shard's answer for `worker` (STATE: its clock there, whether the shard lost it, whether the shard
    gives a lost worker's place back) when every shard is serving; None when one is not (nothing listens: the
    job is starting, or every rank is starting again). One attempt per shard, each bounded by `timeout`."""
    answers = []
    for i, addr in enumerate(addrs):
        answer = ps_backup.ask(addr, i, token, timeout, {"shard": i, "probe": True}, Op.STATE, worker=worker)
        if answer is None:
            return None
        answers.append(answer)
    return answers
