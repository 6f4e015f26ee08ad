"""A worker's side of the parameter server (`ShardClient`: push this step's gradients to every shard, take the
parameters they answer) and the probe a lost worker's replacement asks every shard where it was with."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.strategies.parameter_server.layout import flat_views
from ringleader_trainer.transport import auth, wire
from ringleader_trainer.transport.wire import Flag, Op, PeerLost, context


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
