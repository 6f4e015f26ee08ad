"""GPipe's bubble: the idle share of a pipeline step against micro-batch count, measured and from the formula.

    python -m bench.pipeline_bench [--stages 2 4] [--micro-batches 1 2 4 8 16] [--steps 12]

Each configuration runs the trainer's pipeline strategy (strategies/pipeline.py: the stage split, GPipe's
schedule from torch.distributed.pipelining, gloo between the stage processes) on a model of `stages` layers
whose compute is a fixed wait: every micro-batch's forward pass through a layer takes `--forward-ms` and its
backward pass `--backward-ms`, as sleeps. The stages then overlap exactly as the schedule lets them, whatever
the cores the processes share (on a machine of 2 cores, 4 stages computing at once would otherwise slow each
other and measure the machine, not the schedule). A step's useful time is M x (forward + backward) per
stage; its bubble is 1 - useful / step time, against GPipe's (S - 1) / (M + S - 1) for S stages and M
micro-batches. What the measurement adds to the formula is the schedule's own cost: sends and receives
between stages, and Python per micro-batch. Step times are stage 0's, the first two steps left out;
each row gives the median bubble with the range over steps.

Results go to bench/results/pipeline.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from ringleader_api import Role
from ringleader_operator.rank_env import rank_env
from ringleader_trainer.env import from_env
from ringleader_trainer.strategies.pipeline import PipelineStrategy
from ringleader_trainer.strategy import Options
from torch import nn

from bench.record import write_result
from bench.stats import spread
from tests.support.launch import job_spec
from tests.support.ranks import run_ranks

WIDTH = 8


class _Wait(torch.autograd.Function):
    """Identity whose forward and backward each take a fixed time: a layer's compute, as a sleep."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, forward_s: float, backward_s: float) -> torch.Tensor:
        ctx.backward_s = backward_s
        time.sleep(forward_s)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        time.sleep(ctx.backward_s)
        return grad, None, None


class TimedLayer(nn.Module):
    def __init__(self, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)
        self.forward_s, self.backward_s = forward_s, backward_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Wait.apply(self.linear(x), self.forward_s, self.backward_s)  # type: ignore[no-any-return]


def stage(
    rank: int, stages: int, micro_batches: int, steps: int, forward_s: float, backward_s: float, out: str
) -> None:
    """One stage's process: `steps` GPipe steps; stage 0 writes each step's wall time."""
    torch.set_num_threads(1)
    job = job_spec("bubble", "pipeline", stages, pipeline={"microBatches": micro_batches})
    env = rank_env(job, Role.WORKER, rank) | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    strategy = PipelineStrategy(from_env(env), Options())
    torch.manual_seed(0)
    model = strategy.distributed_model(nn.Sequential(*[TimedLayer(forward_s, backward_s) for _ in range(stages)]))
    x, y = torch.randn(2 * micro_batches, WIDTH), torch.randn(2 * micro_batches, WIDTH)
    times = []
    for _ in range(steps):
        torch.distributed.barrier()
        t0 = time.perf_counter()
        strategy.forward_backward(model, x, y, nn.functional.mse_loss)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(times))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--stages", type=int, nargs="+", default=[2, 4])
    p.add_argument("--micro-batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--forward-ms", type=float, default=10.0)
    p.add_argument("--backward-ms", type=float, default=20.0)
    args = p.parse_args()
    settings = {"stages": args.stages, "micro_batches": args.micro_batches, "steps": args.steps, "warmup_steps": 2,
                "forward_ms": args.forward_ms, "backward_ms": args.backward_ms, "schedule": "GPipe",
                "transport": "gloo over loopback"}  # fmt: skip
    print(f"[bench] settings: {settings}", flush=True)
    per_micro_batch = (args.forward_ms + args.backward_ms) / 1000
    rows = []
    with tempfile.TemporaryDirectory(prefix="pipeline-bench-") as tmp:
        for stages in args.stages:
            for m in args.micro_batches:
                out = Path(tmp) / f"{stages}-{m}.json"
                print(f"[bench] {stages} stages, {m} micro-batches", flush=True)
                run_ranks(stages, stage, m, args.steps, args.forward_ms / 1000, args.backward_ms / 1000, str(out))
                times = json.loads(out.read_text())[2:]
                bubbles = spread([1 - m * per_micro_batch / t for t in times])
                formula = (stages - 1) / (m + stages - 1)
                rows.append({"stages": stages, "micro_batches": m, "median_step_s": statistics.median(times),
                             "step_times_s": times, "bubble": bubbles.mid, "bubble_range": [bubbles.lo, bubbles.hi],
                             "formula": formula, "excess": bubbles.mid - formula})  # fmt: skip
                print(f"[bench]   step {statistics.median(times) * 1000:.0f} ms, bubble {bubbles.mid:.3f} "
                      f"({bubbles.lo:.3f}-{bubbles.hi:.3f}), GPipe formula {formula:.3f}", flush=True)  # fmt: skip
    write_result("pipeline", {"settings": settings, "rows": rows})


if __name__ == "__main__":
    main()
