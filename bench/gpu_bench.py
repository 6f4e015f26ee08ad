"""What the trainer costs on one GPU: step time per strategy with every rank on the one device, and our ring on
CUDA tensors (summed through host memory) against the same ring on CPU tensors, same run.

    python -m bench.gpu_bench [--reps 5] [--steps 60] [--log-every 10] [--ring-sizes 1M 16M 64M]

Needs CUDA; imports nothing of the cluster's (it runs where only torch is installed: pydantic is the one other
package, for the operator's rank environment). Each strategy configuration runs the built-in `wide-mlp`
example (~25M parameters, the GPU example's model) as plain processes sharing the GPU; configurations run in
turn `--reps` times, interleaved, and a configuration's figure is the median over runs of each run's median
window (the first window, warm-up, left out), with the runs' range. NCCL refuses two ranks of one
communicator on one device, so allreduce over NCCL runs at one worker; several workers run the parameter
server and local SGD over our ring, whose bytes cross TCP through host memory as they would between nodes.
Results go to bench/results/gpu.json; nothing is asserted.
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

from bench.allreduce_bench import parse_size
from bench.record import range_verdict, step_times, write_result
from tests.support.launch import job_spec, launch
from tests.support.ranks import run_ranks

BATCH = 64  # the wide-mlp example's default
SYNC = {"parameterServer": {"mode": "synchronous"}}
RING = ["--allreduce", "ring"]
CONFIGS: list[tuple[str, str, int, int, dict[str, Any], list[str]]] = [
    # name, strategy, workers, parameter servers, spec, trainer arguments
    ("allreduce, NCCL, 1 worker", "allreduce", 1, 0, {}, []),
    ("ps synchronous, 1 worker, 1 shard", "parameter-server", 1, 1, SYNC, []),
    ("ps synchronous, 2 workers, 1 shard", "parameter-server", 2, 1, SYNC, []),
    ("local-sgd tau=8, ring, 2 workers", "local-sgd", 2, 0, {"localSGD": {"period": 8}}, RING),
    ("local-sgd tau=1 (every step), ring, 2 workers", "local-sgd", 2, 0, {"localSGD": {"period": 1}}, RING),
]


def run_config(i: int, steps: int, log_every: int, logdir: Path) -> float:
    """One run of configuration `i`; its median window step time (seconds)."""
    name, strategy, workers, ps, spec, extra = CONFIGS[i]
    args = ["--example", "wide-mlp", "--steps", str(steps), "--log-every", str(log_every), *extra]
    job = launch(job_spec("gpu-bench", strategy, workers, ps, **spec), args, logdir)
    if job.wait(timeout=900) != [0] * len(job.ranks):
        raise SystemExit(f"{name} failed:\n{job.logs()}")
    if ", on cuda" not in job.workers[0].stderr:
        raise SystemExit(f"{name}: worker 0 did not train on the GPU:\n{job.logs()}")
    return statistics.median(step_times(job.workers[0].events(), BATCH, workers))


def timed(t: torch.Tensor) -> float:
    dist.barrier()
    if t.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    ring_allreduce(t)
    dist.barrier()
    return time.perf_counter() - t0


def ring_on_rank(rank: int, world: int, sizes: list[int], reps: int, out: str) -> None:
    rows = []
    for size in sizes:
        tensors = {"cpu": torch.ones(size // 4), "cuda": torch.ones(size // 4, device="cuda")}
        runs: dict[str, list[float]] = {k: [] for k in tensors}
        for t in tensors.values():
            timed(t)  # warm-up: the ring's links, the CUDA context
        for _ in range(reps):
            for k, t in tensors.items():
                runs[k].append(timed(t))
        rows.append({"bytes": size, "ranks": world, "runs_s": runs,
                     "median_s": {k: statistics.median(v) for k, v in runs.items()},
                     "verdict": range_verdict(runs)})  # fmt: skip
    if rank == 0:
        Path(out).write_text(json.dumps(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--ring-sizes", nargs="+", default=["1M", "16M", "64M"])
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench.gpu_bench: no CUDA device visible")
    gpu = torch.cuda.get_device_name(0)
    print(f"[bench] {gpu}; wide-mlp, batch {BATCH} per worker, {args.steps} steps, windows of {args.log_every} "
          f"steps, {args.reps} interleaved runs per configuration", flush=True)  # fmt: skip
    runs: dict[str, list[float]] = {c[0]: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for i, config in enumerate(CONFIGS):
                runs[config[0]].append(run_config(i, args.steps, args.log_every, Path(tmp) / f"{rep}-{i}"))
                print(f"[bench] run {rep + 1}/{args.reps} {config[0]:40s}: {runs[config[0]][-1] * 1000:7.1f} ms/step",
                      flush=True)  # fmt: skip
        ring_out = Path(tmp) / "ring.json"
        sizes = [parse_size(s) for s in args.ring_sizes]
        run_ranks(2, ring_on_rank, sizes, args.reps, str(ring_out))
        ring = json.loads(ring_out.read_text())
    base = statistics.median(runs[CONFIGS[0][0]])
    rows = []
    for name, times in runs.items():
        med = statistics.median(times)
        rows.append({"config": name, "median_step_s": med, "min_s": min(times), "max_s": max(times), "runs_s": times,
                     "vs_allreduce_nccl": med / base})  # fmt: skip
        print(f"[bench] {name:40s}: median {med * 1000:7.1f} ms/step (runs {min(times) * 1000:.1f}-"
              f"{max(times) * 1000:.1f}), {med / base:5.1f}x the one-worker NCCL step", flush=True)  # fmt: skip
    for r in ring:
        cpu, cuda = r["median_s"]["cpu"], r["median_s"]["cuda"]
        print(f"[bench] ring, 2 ranks, {r['bytes']:>11,} B: cpu tensors {cpu * 1000:7.2f} ms, cuda tensors "
              f"{cuda * 1000:7.2f} ms ({cuda / cpu:.2f}x): {r['verdict']}", flush=True)  # fmt: skip
    write_result("gpu", {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
                         "nccl": ".".join(map(str, torch.cuda.nccl.version())), "model": "wide-mlp",
                         "batch_per_worker": BATCH, "steps": args.steps, "log_every": args.log_every,
                         "reps": args.reps, "strategies": rows, "ring_cuda_vs_cpu": ring})  # fmt: skip


if __name__ == "__main__":
    main()
