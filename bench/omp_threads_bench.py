"""Step time of ranks that share a node's cores, with the OMP_NUM_THREADS the operator writes against torch's own
default (a thread per core, whatever the pod's share).

    python -m bench.omp_threads_bench [--workers 4] [--steps 300] [--pairs 5]

`--workers` ranks of the built-in digits-mlp example (the demo's) run as plain processes on this machine with the
operator's environment (tests/support/launch.py), once with OMP_NUM_THREADS as the operator now sets it for
pods asking for no CPU (1; `rank_env.cpu_threads`) and once with it unset, the two back to back in `--pairs`
pairs, the first of each pair alternating. Each run's figure is worker 0's median step time over its log windows
after the first; the comparison is the median over pairs of operator's / unset, with a 95 % bootstrap interval
(bench/stats.py). The wall time from start to every rank's exit is reported too: what a user waits for. Results
go to bench/results/omp_threads.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import step_times, write_result
from bench.stats import paired_interval, spread, time_verdict
from tests.support.launch import job_spec, launch

BATCH = 32  # the digits-mlp example's default
SETTINGS = {"operator (1)": "1", "unset (torch's default)": ""}  # "" blanks the variable out (launch)


def run(setting: str, workers: int, steps: int, log_every: int, logdir: Path) -> dict[str, float]:
    args = ["--example", "digits-mlp", "--steps", str(steps), "--log-every", str(log_every)]
    t0 = time.perf_counter()
    job = launch(job_spec("omp", "allreduce", workers), args, logdir, {"OMP_NUM_THREADS": SETTINGS[setting]})
    codes = job.wait(timeout=1200)
    wall = time.perf_counter() - t0
    if codes != [0] * len(job.ranks):
        raise SystemExit(f"{setting} failed:\n{job.logs()}")
    step = statistics.median(step_times(job.workers[0].events(), BATCH, workers))
    print(f"[bench] OMP_NUM_THREADS {setting:24s}: median step {step * 1000:7.1f} ms, wall {wall:5.1f} s", flush=True)
    return {"step_s": step, "wall_s": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--pairs", type=int, default=5)
    args = p.parse_args()
    print(f"[bench] digits-mlp, {args.workers} workers (allreduce, gloo), {args.steps} steps, batch {BATCH}, "
          f"{args.pairs} pairs, order alternating", flush=True)  # fmt: skip
    ours, default = list(SETTINGS)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for setting in (ours, default) if pair % 2 == 0 else (default, ours):
                logdir = Path(tmp) / f"{pair}-{setting.split()[0]}"
                runs[setting].append(run(setting, args.workers, args.steps, args.log_every, logdir))
    result: dict[str, Any] = {"settings": vars(args) | {"batch": BATCH, "example": "digits-mlp"}, "runs": runs}
    for metric in ("step_s", "wall_s"):
        ratio = paired_interval([(o[metric], d[metric]) for o, d in zip(runs[ours], runs[default], strict=True)])
        assert ratio is not None
        result[f"{metric}_operator_over_unset"] = ratio.as_dict()
        for name in SETTINGS:
            result[f"{metric}_{name.split()[0]}"] = spread([r[metric] for r in runs[name]]).as_dict()
        print(f"[bench] {metric}: operator's / unset = {ratio.text(unit='x')}: with the operator's setting "
              f"{time_verdict(ratio)}", flush=True)  # fmt: skip
    write_result("omp_threads", result)


if __name__ == "__main__":
    main()
