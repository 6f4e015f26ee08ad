"""Run a function on N ranks of a gloo process group over loopback, as separate processes."""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
from ringleader_trainer.exitcodes import exit_now
from torch.multiprocessing.spawn import spawn

TIMEOUT = datetime.timedelta(seconds=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=TIMEOUT)
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()
    # As the trainer leaves (exitcodes.exit_now): torch's threads can abort the interpreter's teardown. An
    # exception above still reaches spawn, which reports it.
    exit_now(0)


def run_ranks(world: int, fn: Callable[..., None], *args: Any) -> None:
    """Run fn(rank, world, *args) on every rank; an exception on any rank fails the caller."""
    spawn(_entry, args=(world, free_port(), fn, args), nprocs=world, join=True)
