"""What a shard admits on a new connection (`admit`, its gate's handshake): the job-token proof, then the hello:
a worker taking its slot (or its slot back, after a loss), a replacement's probe of where its worker was, the
previous shard linking its backup here, or that shard's replacement asking for the copy."""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

import torch

from ringleader_trainer.strategies.parameter_server import backup as ps_backup
from ringleader_trainer.strategies.parameter_server.shard_records import ShardHooks
from ringleader_trainer.transport import auth, wire
from ringleader_trainer.transport.gate import Answered, Refused
from ringleader_trainer.transport.wire import Op, PeerLost, context


class Shard(Protocol):
    """What `admit` reads of the shard it admits for (`shards.ShardServer` is one)."""

    shard: int
    num_workers: int
    timeout: float
    token: bytes
    rejoin: bool
    flat: torch.Tensor
    cond: threading.Condition
    clock: list[int]
    lost: dict[int, float]
    replica: ps_backup.Replica | None
    hooks: ShardHooks

    def end_stale(self, worker: int) -> None: ...


def admit(shard: Shard, conn: socket.socket) -> int:
    """Authenticate a new connection and read its hello; the worker index it claims. Refused (after telling
    the peer why, once it has proven the token) for a hello this shard cannot serve."""
    conn.settimeout(shard.timeout)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    auth.accept(conn, shard.token, context(shard.shard))
    header = wire.recv_header(conn)
    wire.expect(conn, header, Op.HELLO)
    info = wire.recv_json(conn, header)
    worker = header.worker
    problem = None
    if shard.replica is not None and ("backup_of" in info or "restore" in info):
        return _backup_hello(shard, conn, info)
    if worker >= shard.num_workers:
        problem = f"worker index {worker} is out of range for {shard.num_workers} workers"
    elif info.get("shard") != shard.shard:
        problem = f"this is shard {shard.shard}, not shard {info.get('shard')}"
    elif info.get("probe") is True:  # a replacement asks where its worker was: answer, then hang up
        with shard.cond:
            state = {"clock": shard.clock[worker], "lost": worker in shard.lost, "rejoin": shard.rejoin}
        shard.end_stale(worker)  # its predecessor is gone (a node lost sends no FIN)
        wire.send_json(conn, Op.STATE, worker, state["clock"], state)  # the clock read under the lock
        raise Answered()
    elif info.get("numel") != shard.flat.numel() or info.get("dtype") != str(shard.flat.dtype):
        problem = (
            f"shard {shard.shard} holds {shard.flat.numel()} {shard.flat.dtype} values, worker {worker} expects "
            f"{info.get('numel')} {info.get('dtype')}: do all ranks build the same model?"
        )
    elif info.get("resume") is True:
        if worker not in shard.lost:
            problem = f"worker {worker} is not lost on shard {shard.shard}: there is no place to take back"
    elif header.step != shard.clock[worker]:
        problem = f"worker {worker} resumes at step {header.step}, shard {shard.shard} at {shard.clock[worker]}"
    if problem:
        wire.send_error(conn, problem)  # the peer proved the token: it is one of this job's ranks
        raise Refused(problem)
    return worker


def _backup_hello(shard: Shard, conn: socket.socket, info: dict[str, Any]) -> int:
    """The previous shard links its backup here (its slot, after the workers'), or its replacement asks for
    the copy (answered, no slot)."""
    assert shard.replica is not None
    if info.get("restore") == shard.replica.of:
        probe = info.get("probe") is True
        try:
            shard.replica.hand_over(conn, probe)
        except PeerLost as e:
            wire.send_error(conn, str(e))
            raise Refused(str(e)) from e
        if not probe:
            shard.hooks.backup("backup-handed-over", f"to shard {shard.replica.of}'s replacement")
        raise Answered()
    if info.get("backup_of") != shard.replica.of or info.get("numel") != shard.replica.flat.numel():
        problem = (
            f"shard {shard.shard} keeps the backup of shard {shard.replica.of} ({shard.replica.flat.numel()} values)"
        )
        wire.send_error(conn, problem)
        raise Refused(problem)
    return shard.num_workers
