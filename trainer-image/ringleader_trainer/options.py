"""`Options`: what a script may set on its strategy besides the environment contract (`from_env(**options)`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    rendezvous_timeout: float = 300.0  # seconds to reach the master and every peer at start
    timeout: float = 300.0  # seconds any one collective or parameter-server exchange may take
    allreduce: str = "native"  # "native": torch.distributed (gloo on CPU, NCCL on GPU); "ring": ours
    log_every: int = 20  # steps between JSON log lines (`report`)
    max_recoveries: int = 10  # times a rank heals or recovers in place after losing a peer before it exits 201
    heal: bool = True  # where the strategy heals, continue from a live peer's state; else from the newest checkpoint
