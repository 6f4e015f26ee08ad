"""Step time per strategy on the ~25M-parameter wide MLP (communication-bound), CPU processes over loopback.

    python -m bench.strategy_bench [--workers 2 4] [--steps 30] [--log-every 5]

Each configuration runs the built-in `wide-mlp` example as plain processes with the operator's environment
(tests/trainer/launch.py): allreduce (gloo, and our ring), synchronous and asynchronous parameter server
(2 shards) and local SGD (tau 8). Every worker logs its throughput every `--log-every` steps; a window's step
time is batch x workers / samples-per-second, and the figure is the median over all windows after the first
(warm-up) of worker 0. Results go to bench/results/strategies.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ringleader_devcluster.layout import REPO_ROOT

from bench.common import machine
from tests.trainer.launch import job_spec, launch

BATCH = 64  # the wide-mlp example's default
CONFIGS: list[tuple[str, str, int, dict[str, Any], list[str]]] = [
    ("allreduce (gloo)", "allreduce", 0, {}, []),
    ("allreduce (ring)", "allreduce", 0, {}, ["--allreduce", "ring"]),
    ("ps synchronous", "parameter-server", 2, {"parameterServer": {"mode": "synchronous"}}, []),
    ("ps asynchronous", "parameter-server", 2, {"parameterServer": {"mode": "asynchronous"}}, []),
    ("local-sgd tau=8", "local-sgd", 0, {"localSGD": {"period": 8}}, []),
]


def run(name: str, strategy: str, workers: int, ps: int, spec: dict[str, Any], extra: list[str], steps: int,
        log_every: int, logdir: Path) -> dict[str, Any]:  # fmt: skip
    args = ["--example", "wide-mlp", "--steps", str(steps), "--log-every", str(log_every), "--timeout", "600", *extra]
    t0 = time.perf_counter()
    job = launch(job_spec("bench", strategy, workers, ps, **spec), args, logdir)
    codes = job.wait(timeout=3600)
    wall = time.perf_counter() - t0
    if codes != [0] * len(job.ranks):
        raise SystemExit(f"{name} with {workers} workers failed:\n{job.logs()}")
    windows = [e for e in job.workers[0].events() if "samples_per_second" in e][1:]
    step_times = [BATCH * workers / e["samples_per_second"] for e in windows if e["samples_per_second"] > 0]
    row = {
        "config": name,
        "workers": workers,
        "parameter_servers": ps,
        "median_step_s": statistics.median(step_times),
        "step_times_s": step_times,
        "wall_s": wall,
        "rounds": job.workers[0].events("done")[0]["rounds"],
    }
    print(f"[bench] {workers} workers {name:18s}: median step {row['median_step_s'] * 1000:7.1f} ms "
          f"({len(step_times)} windows, {row['rounds']} rounds, {wall:.0f} s wall)", flush=True)  # fmt: skip
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--log-every", type=int, default=5)
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workers in args.workers:
            for i, (name, strategy, ps, spec, extra) in enumerate(CONFIGS):
                logdir = Path(tmp) / f"{workers}-{i}"
                rows.append(run(name, strategy, workers, ps, spec, extra, args.steps, args.log_every, logdir))
    for workers in args.workers:
        base = next(r for r in rows if r["workers"] == workers and r["config"] == "allreduce (gloo)")
        for r in rows:
            if r["workers"] == workers:
                r["vs_allreduce_gloo"] = r["median_step_s"] / base["median_step_s"]
    out = REPO_ROOT / "bench" / "results" / "strategies.json"
    out.write_text(json.dumps({"benchmark": "strategies", "model": "wide-mlp", "batch_per_worker": BATCH,
                               "machine": machine(), "rows": rows}, indent=2) + "\n")  # fmt: skip
    print(f"written to {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
