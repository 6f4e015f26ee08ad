"""Checkpoint overhead at the default interval (100 steps), both ways, CPU processes.

    python -m bench.checkpoint_bench [--workers 2] [--steps 400] [--interval 100] [--pairs 3]

Runs the built-in examples under allreduce as plain processes (tests/support/launch.py), `--pairs` times with
checkpoints every `--interval` steps and without, back to back, the first of each pair alternating. Two
figures per model:

- the share of step time: each save logs how long it took (state_dict, torch.save to a temporary file, fsync,
  rename); worker 0's median save time over `interval` x the median step time the same run measured between
  checkpoints (median over the runs with checkpoints, with their range);
- the wall-clock delta, what a user waits for: the run's wall time with checkpoints over the paired run's
  without, minus one, the median over pairs with a 95 % bootstrap interval (bench/stats.py). Judged against
  the goal (<= 3 %): met only when the whole interval is inside it.

Two models: the ~25M-parameter wide MLP (SGD with momentum: the checkpoint holds the parameters and one
momentum buffer; its size is measured and reported) and the small digits MLP. Results go to
bench/results/checkpoint.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import step_times, write_result
from bench.stats import at_most, paired_interval, spread
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
    size = sum(f.stat().st_size for f in (logdir / "ckpt").rglob("*") if f.is_file()) if interval else 0
    return {"wall_s": wall, "median_step_s": statistics.median(steps_s), "save_s": saves, "checkpoint_bytes": size}


def summarize(
    example: str, args: argparse.Namespace, steps: int, pairs: list[tuple[dict[str, Any], dict[str, Any]]]
) -> dict[str, Any]:
    """One model's row: the share of step time over the runs with checkpoints, the wall-clock delta over the
    pairs, and the goal's verdict on the delta's interval."""
    with_runs = [w for w, _ in pairs]
    shares = [statistics.median(w["save_s"]) / (args.interval * w["median_step_s"]) for w in with_runs]
    wall = paired_interval([(w["wall_s"], wo["wall_s"]) for w, wo in pairs])
    if wall is None:
        raise SystemExit("bench: no pairs of runs")
    share = spread(shares)
    return {
        "example": example, "workers": args.workers, "steps": steps, "interval": args.interval,
        "median_step_s": statistics.median(w["median_step_s"] for w in with_runs),
        "median_save_s": statistics.median(s for w in with_runs for s in w["save_s"]),
        "checkpoint_bytes": max(w["checkpoint_bytes"] for w in with_runs),
        "overhead_share": share.mid, "overhead_share_range": [share.lo, share.hi],
        "wall_delta": wall.as_delta(),
        "verdict": at_most(wall, 1 + GOAL_SHARE).value,
        "walls_s": [[w["wall_s"], wo["wall_s"]] for w, wo in pairs],
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--interval", type=int, default=100, help="the CRD's default checkpoint.intervalSteps")
    p.add_argument("--pairs", type=int, default=3, help="runs with and without checkpoints, back to back")
    args = p.parse_args()
    print(f"[bench] settings: {args.workers} workers, interval {args.interval} steps, {args.pairs} pairs, wide-mlp "
          f"{args.steps} steps, digits-mlp {args.steps * 10} steps, allreduce over gloo", flush=True)  # fmt: skip
    rows = []
    for example in ("wide-mlp", "digits-mlp"):
        steps = args.steps if example == "wide-mlp" else args.steps * 10
        pairs = []
        for i in range(args.pairs):
            with tempfile.TemporaryDirectory() as d:
                order = [args.interval, None] if i % 2 == 0 else [None, args.interval]
                runs = {k: run(example, args.workers, steps, k, Path(d) / str(k)) for k in order}
            pairs.append((runs[args.interval], runs[None]))
        row = summarize(example, args, steps, pairs)
        rows.append(row)
        w = row["wall_delta"]
        print(f"[bench] {example}: step {row['median_step_s'] * 1000:.1f} ms, save "
              f"{row['median_save_s'] * 1000:.0f} ms ({row['checkpoint_bytes'] / 1e6:.0f} MB) -> "
              f"{row['overhead_share'] * 100:.2f}% of step time at interval {args.interval}; wall clock "
              f"{w['median'] * 100:+.1f}% ({w['lo'] * 100:+.1f}%..{w['hi'] * 100:+.1f}%, {w['n']} pairs): "
              f"{row['verdict']}", flush=True)  # fmt: skip
    write_result("checkpoint", {"goal_share": GOAL_SHARE, "pairs": args.pairs, "rows": rows})


if __name__ == "__main__":
    main()
