"""torchft 0.2.0's fault-tolerant data parallelism on CPU (gloo): the goodput benchmark's peer.

One process is one replica group (group world size 1), as torchft's train_ddp.py for 0.2.0 does it: a Manager
over ProcessGroupGloo and torchft's Optimizer; optimizer.zero_grad() starts the step's quorum and
optimizer.step() commits the step only if the quorum agrees. The gradients are averaged by `Manager.allreduce`
(one flat tensor a step): torchft's DistributedDataParallel wrapper fails an assertion in its comm hook
(ddp.py, `assert fut._fut`) when a peer is lost during the allreduce, ending the survivors, which the manager's
own allreduce survives (the step is then not committed). A replica group that (re)joins behind
the others heals from a live peer over the manager's HTTP transport; nothing is written to disk. It trains the
built-in trainer's example (`--example`: the same model, data shard and SGD settings as our workers; needs
trainer-image on PYTHONPATH), so the benchmark compares like with like.

Run in the torchft venv (setup.sh), with a lighthouse up (`torchft_lighthouse`), one process per group:
    REPLICA_GROUP_ID=i NUM_REPLICA_GROUPS=n TORCHFT_LIGHTHOUSE=http://localhost:PORT python train_torchft.py

stdout carries JSON lines only: {"ts", "replica", "step", "participants", "committed", "loss"} after every
iteration, {"event": "healed", "step"} when the manager loaded a peer's state (it calls `load_state_dict` only
then), {"event": "start"}. torchft's own logs go to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
from ringleader_trainer.examples import data
from ringleader_trainer.examples.train import EXAMPLES
from torch import nn
from torch.distributed import TCPStore  # type: ignore[attr-defined]
from torchft import Manager, Optimizer, ProcessGroupGloo


def emit(**fields: Any) -> None:
    print(json.dumps({"ts": round(time.time(), 6), **fields}), flush=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--example", default="digits-mlp", choices=sorted(EXAMPLES))
    p.add_argument("--min-replica-size", type=int, default=1, help="Manager(min_replica_size=)")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds replica group 0 sleeps a step")
    p.add_argument("--pg-timeout", type=float, default=5.0, help="gloo collective timeout, seconds")
    p.add_argument("--timeout", type=float, default=30.0, help="Manager(timeout=), seconds")
    p.add_argument("--quorum-timeout", type=float, default=60.0, help="Manager(quorum_timeout=), seconds")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    return p.parse_args()


def batches(example: str, replica: int, groups: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This replica group's share of the example's data, epoch after epoch (as our workers read it)."""
    settings = EXAMPLES[example]
    split = settings.dataset(0)
    for epoch in itertools.count():
        yield from data.shard_loader(split.train, replica, groups, settings.batch_size, 0, epoch)


def average(manager: Manager, params: list[nn.Parameter]) -> None:
    """The parameters' gradients averaged over the replica groups in the quorum, in one allreduce (a lost peer
    leaves them corrupt, and the manager then does not commit the step)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    manager.allreduce(flat).wait()
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
        offset += p.numel()


def main() -> int:
    args = parse_args()
    torch.set_num_threads(args.threads)
    replica, groups = int(os.environ.get("REPLICA_GROUP_ID", "0")), int(os.environ.get("NUM_REPLICA_GROUPS", "2"))
    settings = EXAMPLES[args.example]
    torch.manual_seed(0)  # every group starts from the same weights (init_sync=False, as torchft advises)
    model = settings.model(settings.dataset(0))
    inner = torch.optim.SGD(model.parameters(), lr=settings.lr, momentum=0.9, weight_decay=settings.weight_decay)
    healed: list[int] = []

    def load_state_dict(state: dict[str, Any]) -> None:  # the manager calls it only to apply a peer's state
        model.load_state_dict(state["model"])
        inner.load_state_dict(state["optim"])
        healed.append(manager.current_step())

    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)  # this one-process group's own
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout)), min_replica_size=args.min_replica_size,
        load_state_dict=load_state_dict, state_dict=lambda: {"model": model.state_dict(), "optim": inner.state_dict()},
        replica_id=f"train_torchft_{replica}", rank=0, world_size=1, store_addr="localhost", store_port=store.port,
        hostname="localhost", timeout=timedelta(seconds=args.timeout),
        quorum_timeout=timedelta(seconds=args.quorum_timeout), init_sync=False,
    )  # fmt: skip
    optimizer, loss_fn = Optimizer(manager, inner), nn.CrossEntropyLoss()
    params = [p for p in model.parameters() if p.requires_grad]
    emit(replica=replica, event="start", pid=os.getpid(), torch=torch.__version__)
    for x, y in batches(args.example, replica, groups):
        optimizer.zero_grad()  # starts this step's quorum
        loss = loss_fn(model(x), y)
        loss.backward()
        average(manager, params)  # over the groups in the quorum
        before = manager.current_step()
        optimizer.step()  # commits the step if the quorum agrees
        if healed:
            emit(replica=replica, event="healed", step=healed.pop(), participants=manager.num_participants())
        emit(replica=replica, step=manager.current_step(), participants=manager.num_participants(),
             committed=manager.current_step() > before, loss=round(float(loss.item()), 5))  # fmt: skip
        if replica == 0 and args.step_sleep:
            time.sleep(args.step_sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
