"""One parameter-server shard (`ShardServer`): it admits the workers' connections, applies their gradients in
the job's mode (synchronous, asynchronous, bounded staleness), decides a stop's step (shard 0) and gives a lost
worker's slot back to its replacement. The protocol is the package's docstring."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.strategies.parameter_server.hello import admit
from ringleader_trainer.strategies.parameter_server.layout import shard_buffers
from ringleader_trainer.strategies.parameter_server.shard_records import (
    ASYNCHRONOUS,
    BOUNDED,
    SYNCHRONOUS,
    Backups,
    ServerStats,
    ShardFailed,
    ShardHooks,
)
from ringleader_trainer.transport import wire
from ringleader_trainer.transport.gate import Gate
from ringleader_trainer.transport.wire import Flag, Op, PeerLost


class ShardServer:
    """One parameter-server shard. `serve(listener)` runs until every worker has said DONE.

    Parameters live in one flat buffer (the optimizer's parameters are views into it), so replies go out
    without a copy. The strategy hears of progress, losses and rejections through its `ShardHooks`.
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
        hooks: ShardHooks | None = None,
    ) -> None:
        """`rejoin`: a lost worker's slot is given back and its replacement takes it (the others go on); else a
        lost worker ends the shard. `backups` (with `rejoin`): this shard's state is kept on the next shard and
        it keeps the previous shard's (ps_backup). `hooks`: what it tells its strategy and asks it."""
        if mode not in (SYNCHRONOUS, ASYNCHRONOUS, BOUNDED):
            raise ValueError(f"unknown parameter-server mode {mode!r}")
        if mode == BOUNDED and not max_staleness:
            raise ValueError("bounded-staleness needs max_staleness >= 1")
        self.shard, self.mode, self.max_staleness, self.hooks = shard, mode, max_staleness or 0, hooks or ShardHooks()
        self.num_workers, self.timeout, self.token, self.rejoin = num_workers, timeout, token, rejoin
        self.flat, self.grad, self.optimizer = shard_buffers(model_params, optimizer)
        self.cond = threading.Condition()
        self.clock = [start_step] * num_workers
        self.done: set[int] = set()
        self.pending: dict[int, torch.Tensor] = {}
        self.failure: str | None = None
        self.finished = False  # every worker said DONE; hooks.progress is being called a last time
        self.stop_heard = False  # a worker asked to stop (Flag.STOP on a push)
        self.stop_at: int | None = None  # shard 0: the step every worker stops at, once decided
        self.stopping = False  # a worker said DONE with Flag.STOP: the workers stopped, not finished
        self.stats = ServerStats()
        self._conns: list[socket.socket] = []
        self.lost: dict[int, float] = {}  # worker -> when its connection was lost (rejoin), until replaced
        self.rejoins = 0  # replacements taken in
        self._gate: Gate | None = None
        self._by_worker: dict[int, socket.socket] = {}  # each admitted worker's connection
        self.returning: set[int] = set()  # workers to take back after this shard was restored from its backup
        self.replica: ps_backup.Replica | None = None
        self.link: ps_backup.BackupLink | None = None
        if backups is not None and rejoin:
            self.replica = ps_backup.Replica(backups.of, lambda: shard_buffers(backups.of_params, optimizer))
            self.link = ps_backup.BackupLink(
                shard, backups.to, backups.addr, token, timeout, self.flat.numel(), self.whole_state, self.cond,
                self.hooks.backup,
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
        return self.stop_heard or self.hooks.asked_to_stop()

    @property
    def slowest(self) -> int:
        active = [c for w, c in enumerate(self.clock) if w not in self.done]
        return min(active) if active else max(self.clock)

    # ---- serving ------------------------------------------------------------------------------------
    def serve(self, listener: socket.socket, accept_timeout: float) -> None:
        """Admit one proven connection per worker and serve them; return when all are DONE. Raise PeerLost if
        not every worker connected within `accept_timeout` or a worker's connection fails (after closing the
        others so their workers fail fast too)."""
        gate = self._gate = Gate(listener, lambda conn: admit(self, conn), self.hooks.reject)
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
            self.hooks.progress(self.slowest)

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
        self.hooks.lost(worker, why)

    def _fail(self, message: str) -> None:
        with self.cond:
            if self.failure is None:
                self.failure = message
                for c in self._conns:
                    with contextlib.suppress(OSError):
                        c.shutdown(socket.SHUT_RDWR)
            self.cond.notify_all()

    def end_stale(self, worker: int) -> None:
        """End `worker`'s connection here (rejoin): its process is gone, which a node lost never says."""
        with self.cond:
            stale = self._by_worker.get(worker) if self.rejoin else None
        if stale is not None:
            with contextlib.suppress(OSError):
                stale.shutdown(socket.SHUT_RDWR)

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
            self.hooks.rejoined(worker, self.clock[worker])
        try:
            wire.send(conn, Op.PARAMS, worker, self.clock[worker], wire.tensor_bytes(snapshot))
            inbox, outbox = torch.empty_like(self.grad), torch.empty_like(self.flat)
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
                flags = Flag.STOP if self.hooks.asked_to_stop() else Flag.NONE
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
            self.hooks.backup("primary-lost", f"shard {self.replica.of}: {e}")
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
        self.hooks.apply[0]()
        self.grad.copy_(grad)
        self.optimizer.step()
        self.stats.updates += 1
        self.hooks.apply[1]()

    def _advance(self, worker: int, clock: int) -> None:
        before = self.slowest
        self.clock[worker] = clock
        after = self.slowest
        for step in range(before + 1, after + 1):
            self.hooks.progress(step)

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
