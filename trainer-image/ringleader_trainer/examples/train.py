"""The built-in examples: `python -m ringleader_trainer --example digits-mlp [options]`.

The training loop below uses only the public strategy API, exactly as a user's script would; it is the
complete example docs/trainer.md walks through. Exit codes: docs/exit-codes.md (`exit_code_for`).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from ringleader_trainer import exitrecord
from ringleader_trainer.elastic import healing, recovery
from ringleader_trainer.elastic.stopping import Stopped
from ringleader_trainer.examples import data, memory, models
from ringleader_trainer.examples.data import Split
from ringleader_trainer.exitcodes import ExitCode, TrainerError, one_line
from ringleader_trainer.logs import emit, log_json
from ringleader_trainer.startup import from_env
from ringleader_trainer.strategies import strategy_class
from ringleader_trainer.strategy import ALLREDUCE_IMPLEMENTATIONS, Strategy


@dataclass(frozen=True)
class Example:
    dataset: Callable[[int], Split]
    model: Callable[[Split], nn.Module]
    steps: int
    batch_size: int
    lr: float
    weight_decay: float = 0.0
    # Built on the meta device when the strategy allocates it (sharded: each worker allocates only its shard).
    meta: bool = False


EXAMPLES = {
    "digits-mlp": Example(
        dataset=lambda seed: data.digits(seed=seed),
        model=lambda split: models.digits_mlp(split.features, split.classes),
        steps=600,
        batch_size=32,
        lr=0.1,
        weight_decay=1e-3,  # with lr 0.1: 97.8-98.6% over five seeds (4 workers x 32)
    ),
    "wide-mlp": Example(
        dataset=lambda seed: data.synthetic(seed=seed),
        model=lambda split: models.wide_mlp(split.features, split.classes),
        steps=50,
        batch_size=64,
        lr=0.01,
    ),
    # The model where sharding shows: 16 residual blocks of 2048 x 2048 (about 69M parameters; with Adam 1.1 GB of
    # parameters, gradients and optimizer state per worker under allreduce, a quarter of that per worker at
    # stage 3 on four).
    "large-mlp": Example(
        dataset=lambda seed: data.synthetic(seed=seed, samples=4096),
        model=lambda split: models.deep_mlp(split.features, split.classes),
        steps=20,
        batch_size=32,
        lr=0.001,
        meta=True,
    ),
}
OPTIMIZERS = ("sgd", "adam")


class ConfigError(TrainerError):
    """Invalid trainer arguments."""

    exit_code = ExitCode.BAD_CONFIG


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would exit 2, which means BAD_ENVIRONMENT here
        raise ConfigError(message)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _Parser(prog="python -m ringleader_trainer", description="Ringleader's built-in training examples.")
    p.add_argument("--example", required=True, help=f"one of {', '.join(EXAMPLES)}")
    p.add_argument("--steps", type=int, help="optimizer steps per worker (default: the example's)")
    p.add_argument("--batch-size", type=int, help="samples per worker per step")
    p.add_argument("--lr", type=float, help="learning rate")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd", help="sgd (with --momentum) or adam")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, help="L2 penalty (default: the example's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--allreduce", choices=ALLREDUCE_IMPLEMENTATIONS, default="native",
                   help="native: torch.distributed (gloo/NCCL); ring: Ringleader's own ring")  # fmt: skip
    p.add_argument("--log-every", type=int, default=20, help="steps between JSON log lines")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds any one exchange may take")
    p.add_argument("--rendezvous-timeout", type=float, default=300.0, help="seconds to reach every rank")
    p.add_argument("--max-recoveries", type=int, default=10,
                   help="times a rank heals or re-joins in place after losing a peer before it exits 201")  # fmt: skip
    p.add_argument("--recover-from", choices=("peer", "checkpoint"), default="peer",
                   help="after losing a peer, continue from a live peer's state where the strategy heals (allreduce, "
                        "local SGD), or always from the newest checkpoint")  # fmt: skip
    p.add_argument("--save-final", type=Path, help="worker 0 writes the final model's state_dict here")
    p.add_argument("--straggler", metavar="INDEX:SECONDS",
                   help="worker INDEX sleeps SECONDS every step (to study staleness)")  # fmt: skip
    p.add_argument("--start-delay", type=float, default=0.0, metavar="SECONDS",
                   help="every worker waits SECONDS before its first step, its page served (a slow start-up: a "
                        "large checkpoint to load), to test the start-up deadline")  # fmt: skip
    p.add_argument("--hang-at-step", metavar="STEP:INDEX",
                   help="worker INDEX stops for good after step STEP, in its pod's first attempt only "
                        "(RINGLEADER_ATTEMPT 0): a hung rank, to test stall detection")  # fmt: skip
    args = p.parse_args(argv)
    if args.example not in EXAMPLES:
        raise ConfigError(f"--example {args.example!r} is not one of {', '.join(EXAMPLES)}")
    example = EXAMPLES[args.example]
    args.steps = example.steps if args.steps is None else args.steps
    args.batch_size = args.batch_size or example.batch_size
    args.lr = args.lr or example.lr
    args.weight_decay = example.weight_decay if args.weight_decay is None else args.weight_decay
    for name in ("steps", "batch_size", "log_every"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    if not 0 <= args.start_delay <= 86400:
        raise ConfigError(f"--start-delay {args.start_delay} is not between 0 and 86400 seconds")
    args.straggler = _pair(args.straggler, "--straggler", "INDEX:SECONDS", int, float)
    args.hang_at_step = _pair(args.hang_at_step, "--hang-at-step", "STEP:INDEX", int, int)
    return args


def _pair(value: str | None, flag: str, form: str, first: type, second: type) -> tuple[Any, Any] | None:
    """`A:B` of a fault flag as (first(A), second(B)); None when the flag is not given."""
    if value is None:
        return None
    try:
        a, b = value.split(":")
        return first(a), second(b)
    except ValueError as e:
        raise ConfigError(f"{flag} {value!r} is not {form}") from e


def hang(strategy: Strategy, step: int) -> NoReturn:
    """Stop here for good, as a rank stuck in a kernel or a read would: no exit, no error, the metrics page
    still served (by its own thread). SIGTERM does not end it either (with checkpoints it only asks to stop
    at the next step boundary, which never comes); the pod's grace period does."""
    log_json(role="worker", index=strategy.rank, event="hang", step=step, at=round(time.time(), 3))
    while True:
        time.sleep(3600)


def accuracy(strategy: Strategy, model: nn.Module, test: torch.utils.data.TensorDataset) -> float:
    x, y = test.tensors
    return strategy.evaluate(model, x, lambda out: float((out.argmax(dim=1).cpu() == y).float().mean()))


def build_optimizer(args: argparse.Namespace, model: nn.Module) -> torch.optim.Optimizer:
    """The optimizer the command line names, over `model`'s parameters."""
    if args.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum, weight_decay=args.weight_decay)


def train(args: argparse.Namespace, strategy: Strategy) -> None:
    example = EXAMPLES[args.example]
    torch.manual_seed(args.seed)  # every rank builds the same initial model
    split = example.dataset(args.seed)
    baseline = memory.in_use(strategy.device)  # before the model: what training adds is measured from here
    with torch.device("meta") if example.meta and strategy.materializes_meta else contextlib.nullcontext():
        model = example.model(split)
    optimizer = build_optimizer(args, model)
    if strategy.is_server:
        strategy.serve(model, optimizer)
        return
    strategy.set_total_steps(args.steps)
    model = strategy.distributed_model(model)
    optimizer = strategy.distributed_optimizer(optimizer, model)
    checkpoints = strategy.checkpointer(model, optimizer)
    checkpoints.restore()
    time.sleep(args.start_delay)
    rank, shard, shards = strategy.rank, strategy.data_rank, strategy.data_parallel_size
    steps_per_epoch = len(split.train) // (shards * args.batch_size)
    if steps_per_epoch < 1:
        raise ConfigError(f"--batch-size {args.batch_size} x {shards} data shards exceeds the {len(split.train)} "
                          "samples")  # fmt: skip
    step = strategy.steps_done
    while step < args.steps:
        epoch, offset = divmod(step, steps_per_epoch)
        loader = data.shard_loader(split.train, shard, shards, args.batch_size, args.seed, epoch)
        for x, y in itertools.islice(loader, offset, None):  # a resumed run continues mid-epoch
            optimizer.zero_grad()
            loss = strategy.forward_backward(model, x, y, nn.functional.cross_entropy)
            optimizer.step()
            step += 1
            strategy.report(step, loss, args.batch_size, epoch=epoch)
            checkpoints.maybe_save(step, {"epoch": epoch})
            if args.straggler and args.straggler[0] == rank:
                time.sleep(args.straggler[1])
            if args.hang_at_step == (step, rank) and strategy.env.attempt == 0:
                hang(strategy, step)
            if step >= args.steps:
                break
    peak = memory.peak(strategy.device)
    checkpoints.save(step, {"epoch": step // steps_per_epoch})
    strategy.finish()
    acc = accuracy(strategy, strategy.final_model(model), split.test)
    log_json(role="worker", index=rank, event="done", step=step, test_accuracy=round(acc, 4),
             rounds=strategy.communication_rounds, memory_baseline_bytes=baseline,
             memory_peak_bytes=peak)  # fmt: skip
    if args.save_final:
        final = strategy.full_state_dict(model)  # every worker takes part (sharded gathers it)
        if rank == 0:
            torch.save({k: v.cpu() for k, v in final.items()}, args.save_final)


def exit_code_for(exc: BaseException) -> ExitCode:
    """The documented exit code (docs/exit-codes.md) for an exception that ends the trainer."""
    if isinstance(exc, TrainerError):
        return exc.exit_code
    return ExitCode.PEER_LOST if healing.peer_lost(exc) else ExitCode.CRASH


def preload() -> None:
    """What every training process of the built-in examples imports, imported once by the supervisor
    (`recovery.supervise`) before it forks them: torch.optim loads torch._dynamo when the first optimizer
    is built (about 2.7 s of CPU), which a recovered process would otherwise pay again; and the module of the
    strategy RINGLEADER_STRATEGY names (a name no strategy has is left for the child to report)."""
    import torch._dynamo  # noqa: F401

    with contextlib.suppress(KeyError):
        strategy_class(os.environ.get("RINGLEADER_STRATEGY", ""))


def main(argv: Sequence[str] | None = None) -> int:
    strategy = None
    max_recoveries = 0
    try:
        args = parse_args(argv)
        max_recoveries = args.max_recoveries
        strategy = from_env(
            rendezvous_timeout=args.rendezvous_timeout, timeout=args.timeout, allreduce=args.allreduce,
            log_every=args.log_every, max_recoveries=args.max_recoveries, heal=args.recover_from == "peer",
        )  # fmt: skip
        train(args, strategy)
        strategy.close()
        return ExitCode.OK
    except Exception as e:
        code = exit_code_for(e)
        message = one_line(e)
        stopping = strategy is not None and strategy.stop.requested  # the pod is going: no recovery in it
        if (code == ExitCode.PEER_LOST and not stopping) or (isinstance(e, Stopped) and not e.signalled):
            # A peer's stop (its pod goes, this one stays): resume from that checkpoint with its replacement.
            recovery.reexec(message, max_recoveries)  # returns only when the recoveries are used up
        if code == ExitCode.OK:  # TrainingEnded: the job's training ended before this rank could join it
            emit(f"ringleader-trainer: done: {message} (exit 0 OK)", sys.stderr)
            return code
        kind = "stopped" if code == ExitCode.STOPPED else "error"
        emit(f"ringleader-trainer: {kind}: {message} (exit {int(code)} {code.name})", sys.stderr)
        if code == ExitCode.CRASH:
            raise  # an unexpected error: keep the traceback (the supervisor writes the exit record after it)
        if isinstance(e, Stopped):
            exitrecord.write(code, saved_step=e.step)
        else:
            exitrecord.write(code, e)
        return code
