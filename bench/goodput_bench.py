"""Goodput under repeated failures, by how survivors recover: one random worker SIGKILLed every `--every`
seconds, the subjects in one invocation, interleaved (their order alternating from one repetition to the next).

    python -m bench.goodput_bench [--seconds 120] [--every 20] [--reps 3] [--workers 4] [--model digits-mlp]

Subjects (the built-in trainer, allreduce, `--workers` ranks as processes on this machine, tests.support.launch):
- `checkpoint`: `--recover-from checkpoint`, checkpoints every 100 steps: the survivors start a fresh process
  and every rank resumes from the newest checkpoint (what the trainer did before it healed).
- `heal`: `--recover-from peer`: the survivors keep their state and serve it to the replacement (healing.py).
- `heal-short`: as `heal`, with `minReplicas` one less than the workers: the survivors train on while the
  replacement starts, and take it in at a step boundary.
- `torchft`: torchft 0.2.0 from PyPI (bench/peer/torchft: its own venv, built by setup.sh on first use), each
  worker a replica group of one process training the same example (model, data share, SGD settings) with
  torchft's Manager, DDP and Optimizer, a lighthouse with min_replicas one less than the workers (as
  `heal-short`): the survivors train on, and the restarted group heals from a live peer. Replica group 0 sleeps
  as worker 0 does.

The bench is the operator: a killed rank is started again at once as a plain new process (importing torch, as
a new pod's container does: its start-up is part of every figure). Worker 0 sleeps 20 ms a step so that one
step at a time can be logged and timed. Per run, after a warm-up: the full-strength rate (worker 0's steps a
second before the first kill), and per kill the steps lost (the newest step any rank logged before the kill
less the step the job continued from: the replacement's `healed` step, or the `resume` step), the time from the
kill to full strength (to the replacement's first step) and the job's steps a second meanwhile. Goodput is
the steps the job kept over what it would have made at full strength in the same wall time. Medians with
bootstrap intervals (bench/stats.py); nothing is asserted. Results: bench/results/goodput.json.

Subjects are chosen with `--subjects` (default all four; `torchft` needs PyPI on the first run, for its venv).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.record import write_result
from bench.stats import Interval, ratio_interval, spread
from tests.support.launch import LocalJob, Rank, job_spec, launch, start
from tests.support.ranks import free_port

SUBJECTS = {"checkpoint": ["--recover-from", "checkpoint"], "heal": ["--recover-from", "peer"],
            "heal-short": ["--recover-from", "peer"], "torchft": []}  # fmt: skip
TORCHFT = Path(__file__).parent / "peer" / "torchft"
STRAGGLE_SECONDS = 0.02  # worker 0 (replica group 0) sleeps this long a step
WARM_UP_SECONDS = 10.0  # before the first kill: every rank has imported torch and trains
INTERVAL = 100  # checkpoint interval, steps


def run(subject: str, args: argparse.Namespace, root: Path, seed: int) -> dict[str, Any]:
    """One run of `subject`: train, kill a random worker every `args.every` seconds, stop after `args.seconds`."""
    directory = root / "ckpt"
    job = job_spec("g", "allreduce", args.workers, checkpoint={"directory": str(directory), "intervalSteps": INTERVAL})
    if subject == "heal-short":
        job.spec.workers.min_replicas = args.workers - 1
    argv = ["--example", args.model, "--steps", "100000000", "--log-every", "1", "--straggler",
            f"0:{STRAGGLE_SECONDS}", "--timeout", "60", "--max-recoveries", "1000", *SUBJECTS[subject]]  # fmt: skip
    return drive(launch(job, argv, root / "logs"), args, seed)


def run_torchft(args: argparse.Namespace, root: Path, seed: int) -> dict[str, Any]:
    """One run of torchft: a lighthouse and `args.workers` replica groups, driven as `run` drives our ranks."""
    venv = Path(os.environ.get("RINGLEADER_CACHE", Path.home() / ".cache" / "ringleader")) / "torchft-venv"
    port, least = free_port(), str(args.workers - 1)
    logs = root / "logs"
    logs.mkdir(parents=True)
    with (logs / "lighthouse.err").open("wb") as err:
        lighthouse = subprocess.Popen(
            [str(venv / "bin" / "torchft_lighthouse"), "--bind", f"[::]:{port}", "--min_replicas", least,
             "--quorum_tick_ms", "100", "--join_timeout_ms", "2000"], stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    trainer = Path(__file__).parents[1] / "trainer-image"
    command = [str(venv / "bin" / "python"), str(TORCHFT / "train_torchft.py"), "--example", args.model,
               "--min-replica-size", least, "--step-sleep", str(STRAGGLE_SECONDS)]  # fmt: skip
    common = os.environ | {"PYTHONPATH": str(trainer), "NUM_REPLICA_GROUPS": str(args.workers),
                           "TORCHFT_LIGHTHOUSE": f"http://localhost:{port}"}  # fmt: skip
    ranks = []
    for i in range(args.workers):
        env, out, err_path = common | {"REPLICA_GROUP_ID": str(i)}, logs / f"worker-{i}.out", logs / f"worker-{i}.err"
        ranks.append(Rank("worker", i, start(command, env, out, err_path), out, err_path, command, env))
    try:
        return drive(LocalJob(ranks), args, seed)
    finally:
        lighthouse.kill()
        lighthouse.wait()


def drive(local: LocalJob, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Kill a random worker of `local` every `args.every` seconds after the warm-up, starting it again at once,
    for `args.seconds`; the run's figures (`measure`)."""
    rng = random.Random(seed)
    kills: list[tuple[int, float]] = []  # (worker, when)
    try:
        started = time.time()
        while time.time() - started < WARM_UP_SECONDS:
            _check(local)
            time.sleep(0.1)
        next_kill = time.time()
        while time.time() - started < WARM_UP_SECONDS + args.seconds:
            _check(local)
            if time.time() >= next_kill:
                victim = rng.randrange(args.workers)
                rank = local.workers[victim]
                rank.proc.kill()
                kills.append((victim, time.time()))
                rank.proc.wait()
                rank.restart()  # the operator's part: a new pod for the same rank
                next_kill += args.every
            time.sleep(0.05)
        ended = time.time()
    finally:
        local.kill()
    return measure(local, kills, started + WARM_UP_SECONDS, ended)


def _check(local: LocalJob) -> None:
    ended = [r for r in local.ranks if r.proc.poll() is not None]
    if ended:
        raise RuntimeError(f"a rank ended on its own: {local.ended()}")


def measure(local: LocalJob, kills: list[tuple[int, float]], start: float, end: float) -> dict[str, Any]:
    """The run's figures from the ranks' logs (their lines carry `ts`, every step logged)."""
    steps = [(e["ts"], e["step"]) for r in local.ranks for e in r.events() if "step" in e and "event" not in e]
    first_kill = kills[0][1] if kills else end
    warm = sorted(s for s in steps if start - WARM_UP_SECONDS / 2 <= s[0] < first_kill)
    rate = (warm[-1][1] - warm[0][1]) / (warm[-1][0] - warm[0][0]) if len(warm) > 1 else 0.0
    at_start = max((s for t, s in steps if t < start), default=0)
    at_end = max((s for t, s in steps if t < end), default=0)
    lost, to_full, during = [], [], []
    for victim, at in kills:
        before = max((s for t, s in steps if t < at), default=0)
        rank = local.workers[victim]
        joined = [e for e in rank.events() if e.get("event") in ("healed", "resume") and e["ts"] > at]
        if not joined:
            continue  # the run ended before the replacement joined
        # Its first step after it joined (the killed process's child may log a last step as it dies).
        first = next((e for e in rank.events() if "step" in e and "event" not in e and e["ts"] > joined[0]["ts"]), None)
        if first is None:
            continue
        lost.append(max(0, before - joined[0]["step"]))
        to_full.append(first["ts"] - at)
        made = max((s for t, s in steps if at <= t < first["ts"]), default=before) - before
        during.append(max(0, made) / max(first["ts"] - at, 1e-9))
    kept = at_end - at_start
    ideal = rate * (end - start)
    return {
        "rate": rate, "steps_kept": kept, "goodput": kept / ideal if ideal else 0.0, "kills": len(kills),
        "steps_lost": lost, "kill_to_full_s": to_full, "steps_per_s_while_replaced": during,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="seconds of each run after its warm-up")
    p.add_argument("--every", type=float, default=20.0, help="seconds between two kills")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--model", default="digits-mlp")
    p.add_argument("--subjects", default=",".join(SUBJECTS), help="comma-separated, of " + ", ".join(SUBJECTS))
    args = p.parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    if unknown := set(subjects) - set(SUBJECTS):
        raise SystemExit(f"--subjects: unknown {', '.join(sorted(unknown))}")
    if "torchft" in subjects:  # its own venv, built once (about 10 s; then a check of a few seconds)
        subprocess.run([str(TORCHFT / "setup.sh")], check=True)
    print(f"[bench] goodput: {args.workers} allreduce workers, {args.model}, a random worker killed every "
          f"{args.every:g} s for {args.seconds:g} s after {WARM_UP_SECONDS:g} s, checkpoints every {INTERVAL} steps, "
          f"{args.reps} repetitions of {', '.join(subjects)}, interleaved", flush=True)  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}
    for rep in range(args.reps):
        order = subjects if rep % 2 == 0 else subjects[::-1]  # each subject first as often
        for subject in order:
            with tempfile.TemporaryDirectory(prefix=f"goodput-{subject}-") as root:
                if subject == "torchft":
                    result = run_torchft(args, Path(root), rep)
                else:
                    result = run(subject, args, Path(root), rep)
            runs[subject].append(result)
            print(f"[bench] {subject} rep {rep + 1}: goodput {result['goodput']:.3f}, steps lost "
                  f"{result['steps_lost']}, kill to full strength {[round(x, 2) for x in result['kill_to_full_s']]} s",
                  flush=True)  # fmt: skip
    summary = {s: summarize(r) for s, r in runs.items()}
    for s, figures in summary.items():
        print(f"[bench] {s}: " + "; ".join(f"{k} {v.text('{:.3f}')}" for k, v in figures.items()), flush=True)
    write_result("goodput", {
        "settings": vars(args) | {"warm_up_s": WARM_UP_SECONDS, "checkpoint_interval": INTERVAL},
        "runs": runs,
        "summary": {s: {k: v.as_dict() for k, v in f.items()} for s, f in summary.items()},
        "goodput_over_checkpoint": compare(runs, "checkpoint"),
        "goodput_over_torchft": compare(runs, "torchft"),
    })  # fmt: skip


def compare(runs: dict[str, list[dict[str, Any]]], base: str) -> dict[str, Any]:
    """Each other subject's goodput over `base`'s (a ratio of medians with its interval) and the verdict, printed;
    {} when `base` did not run."""
    if base not in runs:
        return {}
    ratios: dict[str, Any] = {}
    for s, results in runs.items():
        if s == base:
            continue
        ratio = ratio_interval([r["goodput"] for r in results], [r["goodput"] for r in runs[base]])
        verdict = "not distinguishable" if ratio is None or ratio.lo <= 1 <= ratio.hi else (
            f"{s} keeps more" if ratio.lo > 1 else f"{base} keeps more")  # fmt: skip
        print(f"[bench] goodput {s} / {base}: {ratio.text() if ratio else 'n/a'}: {verdict}", flush=True)
        ratios[s] = {"ratio": ratio.as_dict() if ratio else None, "verdict": verdict}
    return ratios


def summarize(runs: list[dict[str, Any]]) -> dict[str, Interval]:
    """Each figure's median and range over the runs (per-kill figures pooled over the runs' kills)."""
    out = {"goodput": spread([r["goodput"] for r in runs]), "rate": spread([r["rate"] for r in runs])}
    for key in ("steps_lost", "kill_to_full_s", "steps_per_s_while_replaced"):
        pooled = [x for r in runs for x in r[key]]
        if pooled:
            out[key] = spread(pooled)
    return out


if __name__ == "__main__":
    main()
