"""Rendezvous: every rank joins one process group (workers, then shards), within the rendezvous timeout, and
again after a recovery. Its failure is a RendezvousError (exit 200, retryable)."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import torch
import torch.distributed as dist

from ringleader_trainer.env import RankEnv
from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line
from ringleader_trainer.logs import log_json


class RendezvousError(TrainerError):
    """The master or a peer was not reachable within the rendezvous timeout."""

    exit_code = ExitCode.RENDEZVOUS_TIMEOUT


INCARNATION_KEY = "ringleader/incarnation"
CONNECT_SECONDS = 5.0


def formed_key(incarnation: str) -> str:
    return f"ringleader/{incarnation}/formed"


def rendezvous(env: RankEnv, rendezvous_timeout: float, timeout: float) -> None:
    """Join the process group of every rank within `rendezvous_timeout`.

    Worker 0 hosts the store and names the group it forms with a fresh id, once per process; every rank
    builds the group under that prefix, and worker 0 marks it formed once all have joined. A rank joins
    only a group that is not formed yet and that it has not tried before: after a recovery (`recovery`:
    survivors start a fresh process, the dead rank's pod is replaced) a rank that reaches the previous
    worker 0's store before that process has gone sees a formed group and waits for the store to go away,
    then reconnects to the new worker 0 and joins its group. Worker 0 does not retry: its failure to form
    the group is a rendezvous timeout (exit 200), and the others wait for its replacement."""
    backend = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"
    deadline = time.monotonic() + rendezvous_timeout
    is_host = env.global_rank == 0
    where = f"rendezvous with {env.master_addr}:{env.master_port} as rank {env.global_rank} of {env.global_world_size}"
    tried: set[str] = set()
    store: Any = None
    waiting_since = 0.0
    while True:
        remaining = deadline - time.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError(f"no group to join in {rendezvous_timeout:g} s")
            if store is None:
                # A client gives each connection attempt a few seconds and then resolves worker 0's name
                # again: while worker 0's pod is replaced its name still points at the old address for a
                # while, where a connect would otherwise sit out the kernel's SYN retries (about 2 min).
                store = dist.TCPStore(  # type: ignore[attr-defined]
                    env.master_addr, env.master_port, env.global_world_size, is_master=is_host,
                    timeout=datetime.timedelta(seconds=remaining if is_host else min(CONNECT_SECONDS, remaining)),
                    wait_for_workers=False,
                )  # fmt: skip
                store.set_timeout(datetime.timedelta(seconds=remaining))
                if is_host:
                    store.set(INCARNATION_KEY, uuid.uuid4().hex)
            incarnation = store.get(INCARNATION_KEY).decode()
            if incarnation in tried or store.check([formed_key(incarnation)]):
                if not waiting_since:
                    waiting_since = time.monotonic()
                    log_json(role=env.role, index=env.index, event="rendezvous-wait", group=incarnation)
                time.sleep(0.5)  # the store's host is going away (or gone): the next call fails, then reconnect
                continue
            tried.add(incarnation)
            dist.init_process_group(
                backend, store=dist.PrefixStore(f"ringleader/{incarnation}/", store),  # type: ignore[attr-defined]
                rank=env.global_rank, world_size=env.global_world_size,
                timeout=datetime.timedelta(seconds=timeout),
            )  # fmt: skip
            if is_host:  # gloo connected worker 0 to every rank: the group takes no one new from now on
                store.set(formed_key(incarnation), "1")
            return
        except (dist.DistError, RuntimeError, OSError, TimeoutError) as e:
            if dist.is_initialized():
                dist.destroy_process_group()
            if is_host or time.monotonic() >= deadline:
                raise RendezvousError(f"{where} failed within {rendezvous_timeout:g} s: {one_line(e)}") from e
            log_json(role=env.role, index=env.index, event="rendezvous-retry", reason=one_line(e))
            store = None  # reconnect: worker 0 may be a new process by now
            waiting_since = 0.0
            time.sleep(0.5)
