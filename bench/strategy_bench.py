"""Step time per strategy on the ~25M-parameter wide MLP (communication-bound), CPU processes over loopback.

    python -m bench.strategy_bench [--workers 2 4] [--steps 40] [--log-every 5] [--pairs 10]

Each configuration runs the built-in `wide-mlp` example as plain processes with the operator's environment
(tests/support/launch.py): allreduce (DDP over gloo, and DDP with our ring), synchronous parameter server with
1 and 2 shards, asynchronous parameter server (2 shards) and local SGD (tau 8). The baseline is a plain
torchrun DDP script doing the same work (bench/ddp_baseline.py); the trainer's overhead is its allreduce
step time over the baseline's, minus one. Every worker logs its throughput every `--log-every` steps; a
window's step time is batch x workers / samples-per-second, and the figure is the median over all windows
after the first (warm-up) of worker 0. The two configurations the overhead compares (the baseline and the
trainer's allreduce over gloo) run as `--pairs` pairs, back to back, the first of each pair alternating: one run
varies by about 10 % here, mostly drift of the shared machine that both members of a pair see alike. The
overhead is the median over pairs of trainer / baseline, minus one, with a 95 % bootstrap interval over the
pairs (bench/stats.py); the goal "within 5 %" is two-sided and met only when the whole interval is inside
-5 %..+5 %. Each configuration's row is the median of its runs' medians. The other configurations run once.
Results go to bench/results/strategies.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ringleader_devcluster.layout import REPO_ROOT

from bench.record import step_times, write_result
from bench.stats import paired_interval, within
from tests.support.launch import job_spec, launch

BATCH = 64  # the wide-mlp example's default
SYNC, ASYNC = {"parameterServer": {"mode": "synchronous"}}, {"parameterServer": {"mode": "asynchronous"}}
CONFIGS: list[tuple[str, str, int, dict[str, Any], list[str]]] = [
    ("allreduce (gloo)", "allreduce", 0, {}, []),
    ("allreduce (ring)", "allreduce", 0, {}, ["--allreduce", "ring"]),
    ("ps synchronous, 1 shard", "parameter-server", 1, SYNC, []),
    ("ps synchronous, 2 shards", "parameter-server", 2, SYNC, []),
    ("ps asynchronous, 2 shards", "parameter-server", 2, ASYNC, []),
    ("local-sgd tau=8", "local-sgd", 0, {"localSGD": {"period": 8}}, []),
]
BASELINE = "torchrun DDP (plain script)"
TRAINER_VS_BASELINE = "allreduce (gloo)"  # the trainer's default: DDP over gloo, as the baseline script
GOAL_OVERHEAD = 0.05


def row(
    name: str, workers: int, ps: int, times: list[float], wall: float, rounds: int | None, median: float | None = None
) -> dict[str, Any]:
    median = statistics.median(times) if median is None else median
    out: dict[str, Any] = {"config": name, "workers": workers, "parameter_servers": ps, "median_step_s": median,
                           "samples_per_s": BATCH * workers / median, "step_times_s": times, "wall_s": wall,
                           "rounds": rounds}  # fmt: skip
    print(f"[bench] {workers} workers {name:28s}: median step {median * 1000:7.1f} ms, "
          f"{out['samples_per_s']:7.1f} samples/s ({len(times)} windows, {wall:.0f} s wall)", flush=True)  # fmt: skip
    return out


def run(name: str, strategy: str, workers: int, ps: int, spec: dict[str, Any], extra: list[str], steps: int,
        log_every: int, logdir: Path) -> dict[str, Any]:  # fmt: skip
    args = ["--example", "wide-mlp", "--steps", str(steps), "--log-every", str(log_every), "--timeout", "600", *extra]
    t0 = time.perf_counter()
    job = launch(job_spec("bench", strategy, workers, ps, **spec), args, logdir)
    codes = job.wait(timeout=3600)
    wall = time.perf_counter() - t0
    if codes != [0] * len(job.ranks):
        raise SystemExit(f"{name} with {workers} workers failed:\n{job.logs()}")
    times = step_times(job.workers[0].events(), BATCH, workers)
    return row(name, workers, ps, times, wall, job.workers[0].events("done")[0]["rounds"])


def run_baseline(workers: int, steps: int, log_every: int) -> dict[str, Any]:
    """bench/ddp_baseline.py under torchrun, one thread per process as the trainer's ranks get."""
    script = REPO_ROOT / "bench" / "ddp_baseline.py"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={workers}",
            str(script), "--steps", str(steps), "--log-every", str(log_every)]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(argv, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=3600, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"{BASELINE} with {workers} workers failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return row(BASELINE, workers, 0, step_times(events, BATCH, workers), wall, None)


def combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row for repeated runs of a configuration: the median of the runs' medians; every window kept."""
    medians = [r["median_step_s"] for r in runs]
    first = runs[0]
    times = [t for r in runs for t in r["step_times_s"]]
    out = row(first["config"], first["workers"], first["parameter_servers"], times, sum(r["wall_s"] for r in runs),
              first["rounds"], median=statistics.median(medians))  # fmt: skip
    return out | {"runs": len(runs), "run_medians_s": medians}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--pairs", type=int, default=10, help="paired runs of the baseline and the trainer's allreduce")
    args = p.parse_args()
    rows = []
    assert CONFIGS[0][0] == TRAINER_VS_BASELINE
    with tempfile.TemporaryDirectory() as tmp:

        def config(i: int, workers: int, rep: int = 0) -> dict[str, Any]:
            name, strategy, ps, spec, extra = CONFIGS[i]
            logdir = Path(tmp) / f"{workers}-{i}-{rep}"
            return run(name, strategy, workers, ps, spec, extra, args.steps, args.log_every, logdir)

        for workers in args.workers:
            baseline, trainer = [], []
            for pair in range(args.pairs):  # back to back, the first alternating: drift falls on both alike
                if pair % 2 == 0:
                    baseline.append(run_baseline(workers, args.steps, args.log_every))
                    trainer.append(config(0, workers, pair))
                else:
                    trainer.append(config(0, workers, pair))
                    baseline.append(run_baseline(workers, args.steps, args.log_every))
            rows += [combined(baseline), combined(trainer)]
            rows += [config(i, workers) for i in range(1, len(CONFIGS))]
    overheads = {}
    for workers in args.workers:
        mine = {r["config"]: r for r in rows if r["workers"] == workers}
        for r in mine.values():
            r["vs_allreduce_gloo"] = r["median_step_s"] / mine[TRAINER_VS_BASELINE]["median_step_s"]
        overheads[str(workers)] = overhead(mine[TRAINER_VS_BASELINE]["run_medians_s"], mine[BASELINE]["run_medians_s"])
        o = overheads[str(workers)]
        print(f"[bench] {workers} workers: the trainer's allreduce vs {BASELINE}: {o['median'] * 100:+.1f}% step time "
              f"({o['lo'] * 100:+.1f}%..{o['hi'] * 100:+.1f}%, {o['n']} pairs; goal within {GOAL_OVERHEAD:.0%}): "
              f"{o['verdict']}", flush=True)  # fmt: skip
    write_result("strategies", {"model": "wide-mlp", "batch_per_worker": BATCH, "steps": args.steps,
                                "log_every": args.log_every, "pairs": args.pairs, "goal_overhead": GOAL_OVERHEAD,
                                "overhead_vs_baseline": overheads, "rows": rows})  # fmt: skip


def overhead(trainer: list[float], baseline: list[float]) -> dict[str, Any]:
    """The trainer's step time over the baseline's, paired run by run (the i-th of each ran back to back), minus
    one: median and bootstrap interval over the pairs, and the two-sided verdict against GOAL_OVERHEAD."""
    interval = paired_interval(list(zip(trainer, baseline, strict=True)))
    if interval is None:
        raise SystemExit("bench: no pairs of runs to compare")
    verdict = within(interval, 1 - GOAL_OVERHEAD, 1 + GOAL_OVERHEAD)
    return {**interval.as_delta(), "verdict": verdict.value}


if __name__ == "__main__":
    main()
