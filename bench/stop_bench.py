"""What a stop costs and what it saves, CPU processes: a suspend (every rank signalled at once) at an arbitrary step.

    python -m bench.stop_bench [--example wide-mlp] [--workers 2] [--at 37] [--interval 100] [--reps 3]

Each repetition runs the example under allreduce as plain processes (tests/support/launch.py) with checkpoints
every `--interval` steps, twice, the order alternating: once SIGTERM goes to every rank when worker 0 has logged
step `--at` (the trainer's lossless stop), once SIGKILL (a rank that cannot save: what a SIGTERM did before the
stop existed, and what a pod past its grace period gets). Measured per run:

- the step worker 0 had reached when signalled, and the step a restart resumes from (the newest complete
  checkpoint): steps lost = the first minus the second when it is larger; a stop trains on to the step the
  ranks agree on (one or two more), which it then keeps;
- with SIGTERM, the save at the stop (worker 0's `checkpoint` event with reason `stop`) and the time from the
  signal to the last rank's exit: what the pod's grace period must cover.

Results go to bench/results/stop.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ringleader_trainer.checkpoints import store as ckpt

from bench.record import write_result
from tests.support.launch import job_spec, launch

SIGNALS = {"stop (SIGTERM)": signal.SIGTERM, "kill (SIGKILL)": signal.SIGKILL}


def run(args: argparse.Namespace, how: str, logdir: Path) -> dict[str, Any]:
    directory = logdir / "ckpt"
    spec = {"checkpoint": {"directory": str(directory), "intervalSteps": args.interval}}
    argv = ["--example", args.example, "--steps", str(args.at * 10), "--log-every", "1", "--timeout", "600"]
    job = launch(job_spec("stop", "allreduce", args.workers, 0, **spec), argv, logdir)
    deadline = time.monotonic() + 600
    while (reached := job.workers[0].last_step()) < args.at:
        if time.monotonic() > deadline or any(r.proc.poll() is not None for r in job.ranks):
            job.kill()
            raise SystemExit(f"bench: the run ended or stalled before step {args.at}:\n{job.logs()}")
        time.sleep(0.005)
    t0 = time.perf_counter()
    for r in job.ranks:
        r.proc.send_signal(SIGNALS[how])
    codes = job.wait(timeout=600)
    exit_s = time.perf_counter() - t0
    time.sleep(1.0)  # a killed supervisor's child dies of PDEATHSIG a moment later: its ports free by the next run
    complete = ckpt.complete_steps(directory, ckpt.expected_files(args.workers, 0))
    resumed = complete[0] if complete else 0
    saves = [e["seconds"] for e in job.workers[0].events("checkpoint") if e.get("reason") == "stop"]
    lost = max(0, reached - resumed)
    out = {"how": how, "codes": codes, "reached": reached, "resumed_from": resumed, "steps_lost": lost,
           "exit_s": exit_s, "stop_save_s": saves[0] if saves else None}  # fmt: skip
    print(f"[bench] {how}: signalled at step {reached}, resumes from {resumed} ({lost} steps lost), "
          f"all ranks gone {exit_s:.2f} s after the signal" + (f", save {saves[0]:.2f} s" if saves else ""),
          flush=True)  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--example", default="wide-mlp", help="wide-mlp: ~25M parameters; digits-mlp: small")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--at", type=int, default=37, help="worker 0's step when the signal goes out")
    p.add_argument("--interval", type=int, default=100, help="checkpoint.intervalSteps (the CRD's default)")
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    print(f"[bench] {args.example}, {args.workers} workers under allreduce, checkpoints every {args.interval} steps, "
          f"signal at step {args.at}, {args.reps} repetitions of each signal, alternating", flush=True)  # fmt: skip
    runs = []
    with tempfile.TemporaryDirectory(prefix="stop-bench-") as tmp:
        for rep in range(args.reps):
            order = list(SIGNALS) if rep % 2 == 0 else list(reversed(SIGNALS))
            for how in order:
                runs.append(run(args, how, Path(tmp) / f"{rep}-{how.split()[0]}"))
    summary = {}
    for how in SIGNALS:
        mine = [r for r in runs if r["how"] == how]
        saves = [r["stop_save_s"] for r in mine if r["stop_save_s"] is not None]
        summary[how] = {
            "steps_lost": [r["steps_lost"] for r in mine],
            "resumed_from": [r["resumed_from"] for r in mine],
            "median_exit_s": statistics.median(r["exit_s"] for r in mine),
            "exit_s_range": [min(r["exit_s"] for r in mine), max(r["exit_s"] for r in mine)],
            "median_stop_save_s": statistics.median(saves) if saves else None,
        }
    write_result("stop", {"example": args.example, "workers": args.workers, "at": args.at,
                          "interval": args.interval, "reps": args.reps, "summary": summary, "runs": runs})  # fmt: skip


if __name__ == "__main__":
    main()
