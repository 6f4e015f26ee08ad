"""Checkpoint overhead as a share of step time at the default interval (100 steps), CPU processes.

    python -m bench.checkpoint_bench [--workers 2] [--steps 400] [--interval 100]

Runs the built-in examples under allreduce as plain processes (tests/support/launch.py) with checkpoints
every `--interval` steps. Each save logs how long it took (state_dict, torch.save to a temporary file, fsync,
rename); the overhead is the median save time of worker 0 divided by `interval` x the median step time
measured by the same run between checkpoints. Two models: the ~25M-parameter wide MLP (a 300 MB checkpoint
with Adam state) and the small digits MLP. A run without checkpoints gives the wall-clock comparison.
Results go to bench/results/checkpoint.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import step_times, write_result
from tests.support.launch import job_spec, launch

GOAL_SHARE = 0.03
BATCHES = {"wide-mlp": 64, "digits-mlp": 32}


def run(example: str, workers: int, steps: int, interval: int | None, logdir: Path) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if interval is not None:
        spec["checkpoint"] = {"directory": str(logdir / "ckpt"), "intervalSteps": interval}
    args = ["--example", example, "--steps", str(steps), "--log-every", "10", "--timeout", "600"]
    what = f"checkpoints every {interval} steps" if interval is not None else "no checkpoints"
    print(f"[bench] {example}: {workers} workers, {steps} steps, {what}", flush=True)  # each run takes minutes
    t0 = time.perf_counter()
    job = launch(job_spec("ckpt", "allreduce", workers, 0, **spec), args, logdir)
    codes = job.wait(timeout=3600)
    wall = time.perf_counter() - t0
    if codes != [0] * len(job.ranks):
        raise SystemExit(f"{example} failed:\n{job.logs()}")
    events = job.workers[0].events()
    steps_s = step_times(events, BATCHES[example], workers)
    saves = [e["seconds"] for e in events if e.get("event") == "checkpoint"]
    return {"wall_s": wall, "median_step_s": statistics.median(steps_s), "save_s": saves}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--interval", type=int, default=100, help="the CRD's default checkpoint.intervalSteps")
    args = p.parse_args()
    rows = []
    for example in ("wide-mlp", "digits-mlp"):
        steps = args.steps if example == "wide-mlp" else args.steps * 10
        with tempfile.TemporaryDirectory() as d:
            with_ckpt = run(example, args.workers, steps, args.interval, Path(d) / "with")
            without = run(example, args.workers, steps, None, Path(d) / "without")
        save = statistics.median(with_ckpt["save_s"])
        share = save / (args.interval * with_ckpt["median_step_s"])
        row = {
            "example": example,
            "workers": args.workers,
            "steps": steps,
            "interval": args.interval,
            "median_step_s": with_ckpt["median_step_s"],
            "median_save_s": save,
            "saves_s": with_ckpt["save_s"],
            "overhead_share": share,
            "wall_with_s": with_ckpt["wall_s"],
            "wall_without_s": without["wall_s"],
        }
        rows.append(row)
        print(f"[bench] {example}: step {row['median_step_s'] * 1000:.1f} ms, save {save * 1000:.0f} ms "
              f"({len(row['saves_s'])} saves) -> {share * 100:.2f}% of step time at interval {args.interval} "
              f"(wall {row['wall_with_s']:.0f} s with, {row['wall_without_s']:.0f} s without)", flush=True)  # fmt: skip
    write_result("checkpoint", {"goal_share": GOAL_SHARE, "rows": rows})


if __name__ == "__main__":
    main()
