"""Run a function on N ranks of a gloo process group over loopback, as separate processes."""

from __future__ import annotations

import datetime
import os
import secrets
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from ringleader_trainer.exitcodes import exit_now
from torch.multiprocessing.spawn import spawn

TIMEOUT = datetime.timedelta(seconds=60)
# Ports handed to the trainers under test: below the kernel's ephemeral range (32768-60999 by default) and
# Kubernetes' NodePorts (30000-32767). A port bound to 0 and released comes from the ephemeral range, where any
# outgoing connection (the dev cluster's clients, torch's stores) may take it before the trainer binds it: two
# tests of one CI run failed so ("Address already in use") on a busy machine.
LISTEN_PORTS = range(20000, 30000)
_PICK = secrets.SystemRandom()  # not `random`: hypothesis seeds that alike in every test process
_handed: set[int] = set()


def free_port() -> int:
    """A port of LISTEN_PORTS nothing is bound to now (on any address, as a parameter server binds) and this
    process has not handed out before."""
    for _ in range(1000):
        port = _PICK.choice(LISTEN_PORTS)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        _handed.add(port)
        return port
    raise RuntimeError(f"no free port in {LISTEN_PORTS.start}-{LISTEN_PORTS.stop - 1} after 1000 tries")


def _entry(rank: int, world: int, port: int, token: str, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RINGLEADER_TOKEN_FILE=token)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()
    # As the trainer leaves (exitcodes.exit_now): torch's threads can abort the interpreter's teardown. An
    # exception above still reaches spawn, which reports it.
    exit_now(0)


def run_ranks(world: int, fn: Callable[..., None], *args: Any) -> None:
    """Run fn(rank, world, *args) on every rank, all holding one job token (RINGLEADER_TOKEN_FILE); an
    exception on any rank fails the caller."""
    with tempfile.TemporaryDirectory() as tmp:
        token = Path(tmp) / "token"
        token.write_text(secrets.token_hex(32))
        spawn(_entry, args=(world, free_port(), str(token), fn, args), nprocs=world, join=True)
