"""Allreduce bus bandwidth on CPU processes over loopback: our ring (`ringleader_trainer.strategies.ring`, over its
own TCP links between neighbours) vs gloo's all_reduce, same run.

    python -m bench.allreduce_bench [--ranks 2 4] [--sizes 1K 64K 1M 16M 64M 256M] [--reps 5]

For each rank count and message size both implementations run alternately (warm-up first), each timed
between barriers; the median over `--reps` gives algbw = bytes / time and busbw = algbw * 2(n-1)/n, the
NCCL-tests convention. Results with every repetition go to bench/results/allreduce.json; nothing is asserted.
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
import torch.distributed as dist
from ringleader_trainer.strategies.ring import ring_allreduce

from bench.record import write_result
from tests.support.ranks import run_ranks

GOAL_RATIO_AT_16M = 0.9
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def timed(fn: Any, t: torch.Tensor) -> float:
    dist.barrier()
    t0 = time.perf_counter()
    fn(t)
    dist.barrier()
    return time.perf_counter() - t0


def on_rank(rank: int, world: int, sizes: list[int], reps: int, out: str) -> None:
    impls = {"gloo": dist.all_reduce, "ring": ring_allreduce}
    rows = []
    for size in sizes:
        t = torch.ones(max(1, size // 4), dtype=torch.float32)
        times: dict[str, list[float]] = {name: [] for name in impls}
        for fn in impls.values():  # warm-up
            timed(fn, t)
        for _ in range(reps):
            for name, fn in impls.items():
                times[name].append(timed(fn, t))
        row: dict[str, Any] = {"bytes": t.numel() * 4, "ranks": world}
        for name, ts in times.items():
            med = statistics.median(ts)
            algbw = row["bytes"] / med / 1e9
            row[name] = {
                "median_s": med,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * 2 * (world - 1) / world,
                "runs": ts,
            }
        row["ring_over_gloo"] = row["gloo"]["median_s"] / row["ring"]["median_s"]
        rows.append(row)
        if rank == 0:
            print(
                f"[bench] {world} ranks {row['bytes']:>11,} B: gloo busbw {row['gloo']['busbw_GBps']:.3f} GB/s, "
                f"ring {row['ring']['busbw_GBps']:.3f} GB/s, ring/gloo {row['ring_over_gloo']:.2f}",
                flush=True,
            )
    if rank == 0:
        Path(out).write_text(json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    p.add_argument("--sizes", nargs="+", default=["1K", "64K", "1M", "16M", "64M", "256M"])
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    sizes = [parse_size(s) for s in args.sizes]
    results = []
    for world in args.ranks:
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            run_ranks(world, on_rank, sizes, args.reps, f.name)
            results += json.loads(Path(f.name).read_text())
    big = [r["ring_over_gloo"] for r in results if r["bytes"] >= 16 << 20]
    write_result("allreduce", {"reps": args.reps, "goal": f"ring >= {GOAL_RATIO_AT_16M}x gloo at >= 16 MB",
                               "rows": results})  # fmt: skip
    if big:
        print(
            f"ring/gloo at >= 16 MB: min {min(big):.2f}, median {statistics.median(big):.2f} "
            f"(goal >= {GOAL_RATIO_AT_16M})"
        )


if __name__ == "__main__":
    main()
