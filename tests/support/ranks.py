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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
