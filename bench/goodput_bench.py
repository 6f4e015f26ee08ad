"""Goodput under repeated failures, by how survivors recover: one random worker SIGKILLed every `--every`
seconds, the subjects in one invocation, interleaved (their order alternating from one repetition to the next).

    python -m bench.goodput_bench [--seconds 120] [--every 20] [--reps 3] [--workers 4] [--model digits-mlp]
                                  [--subjects ...] [--no-lose-node] [--more] [--keep-logs DIR]

Subjects (the built-in trainer, allreduce, `--workers` ranks as processes on this machine, tests.support.launch):
- `checkpoint`: `--recover-from checkpoint`, checkpoints every 100 steps: the survivors start a fresh process
  and every rank resumes from the newest checkpoint (what the trainer did before it healed).
- `heal`: `--recover-from peer`: the survivors keep their state and serve it to the replacement (elastic/healing.py).
- `heal-short`: as `heal`, with `minReplicas` one less than the workers: the survivors train on while the
  replacement starts, and take it in at a step boundary; the job's coordinator hosts the rendezvous
  (elastic/coordinator.py, started as the operator starts one for a job with minReplicas), so that worker 0's loss
  stops nobody.
- `torchft`: torchft 0.2.0 from PyPI (bench/peer/torchft: its own venv, built by setup.sh on first use), each
  worker a replica group of one process training the same example (model, data share, SGD settings) with
  torchft's Manager, DDP and Optimizer, a lighthouse with min_replicas one less than the workers (as
  `heal-short`): the survivors train on, and the restarted group heals from a live peer. Replica group 0 sleeps
  as worker 0 does.

The bench is the operator: a killed rank is started again at once as a plain new process (importing torch, as
a new pod's container does: its start-up is part of every figure). With `--lose-node` (the default) the kill
nearest the middle of a run is a node's loss instead (`drive`). Worker 0 sleeps 20 ms a step so that one step
at a time can be logged and timed. Per run, after a warm-up: the full-strength rate (`measure`), and per kill
the steps lost (the step logged last before the kill less the step the job continued from: the replacement's
`healed` step, the `resume` step, or 0 before the first checkpoint), the time from the kill to full strength
(to the replacement's first step), the job's steps a second meanwhile, and whom it hit (`victims`). Goodput is
the steps the job kept over what it would have made at full strength in the same wall time. Medians with
bootstrap intervals (bench/stats.py); nothing is asserted. Results: bench/results/goodput.json
(`goodput-<model>.json` for another model), written after every run; `--more` adds repetitions to those of
the same settings; `--keep-logs DIR` keeps each run's logs for reading (the bench removes them otherwise).

Subjects are chosen with `--subjects` (default all four; `torchft` needs PyPI on the first run, for its venv).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.record import RESULTS, commit_of, import_seconds, write_result
from bench.stats import Interval, ratio_interval, spread
from tests.support.launch import LocalJob, Process, Rank, job_spec, kill_tree, launch, start
from tests.support.ranks import free_port

SUBJECTS = {"checkpoint": ["--recover-from", "checkpoint"], "heal": ["--recover-from", "peer"],
            "heal-short": ["--recover-from", "peer"], "torchft": []}  # fmt: skip
TORCHFT = Path(__file__).parent / "peer" / "torchft"
STRAGGLE_SECONDS = 0.02  # worker 0 (replica group 0) sleeps this long a step
WARM_UP_SECONDS = 10.0  # before the first kill: every rank has imported torch and trains
DYING_SECONDS = 1.0  # a victim's lines this soon after its kill are its dying process's, not its replacement's
INTERVAL = 100  # checkpoint interval, steps
MIN_RUNS = 3  # of each subject, for a verdict on their goodput
SETTLE_SECONDS = 2.0  # after a replacement's first step, before the job's rate counts as full strength


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
    for `args.seconds`; the run's figures (`measure`). With `args.lose_node`, the kill nearest the middle of the
    run is a node's loss instead: the victim's processes are stopped, not killed (no connection is ever closed),
    and its replacement starts at once. That victim is never worker 0: on one machine a replacement cannot take
    the address (the rendezvous port) its stopped predecessor still holds."""
    rng = random.Random(seed)
    kills: list[tuple[int, float, str]] = []  # (worker, when, how)
    node_at = round(args.seconds / args.every / 2) if args.lose_node else -1  # which kill loses a node
    stopped: list[Process] = []
    try:
        started = time.time()
        while time.time() - started < WARM_UP_SECONDS:
            _check(local)
            time.sleep(0.1)
        next_kill = time.time()
        while time.time() - started < WARM_UP_SECONDS + args.seconds:
            _check(local)
            if time.time() >= next_kill:
                if len(kills) == node_at:
                    victim = rng.randrange(1, args.workers)
                    stopped.append(local.workers[victim].lose())
                    kills.append((victim, time.time(), "node"))
                else:
                    victim = rng.randrange(args.workers)
                    rank = local.workers[victim]
                    rank.proc.kill()
                    kills.append((victim, time.time(), "kill"))
                    rank.proc.wait()
                    rank.restart()  # the operator's part: a new pod for the same rank
                next_kill += args.every
            time.sleep(0.05)
        ended = time.time()
    finally:
        for proc in stopped:
            kill_tree(proc)
        local.kill()
    return measure(local, kills, started + WARM_UP_SECONDS, ended)


def _check(local: LocalJob) -> None:
    ended = [r for r in local.ranks if r.proc.poll() is not None]
    if ended:
        raise RuntimeError(f"a rank ended on its own: {local.ended()}")


def rejoined(events: list[dict[str, Any]], at: float, until: float, before: int) -> tuple[int, dict[str, Any]] | None:
    """The step the job continued from after the kill at `at` (step `before` logged last), and the victim's first
    step line since, both before `until` (the next kill); None if it logged none. The replacement says where it
    continued (`healed`, `resume`), except where there was no checkpoint yet to resume from: then the job began
    again, its first step from 1."""
    # The killed process's child may log a last line or two as it dies (a step, even a heal's): a replacement's
    # first line comes after a new interpreter imported torch, seconds after the kill.
    since = [e for e in events if at + DYING_SECONDS < e["ts"] < until]
    stepped = [e for e in since if "step" in e and "event" not in e]
    said = next((e for e in since if e.get("event") in ("healed", "resume")), None)
    if said is not None:
        # Its first step after it joined.
        first = next((e for e in stepped if e["ts"] > said["ts"]), None)
        return None if first is None else (said["step"], first)
    again = next((e for e in stepped if e["step"] <= before), None)  # began again: the first step that went back
    return None if again is None else (again["step"] - 1, again)


def measure(local: LocalJob, kills: list[tuple[int, float, str]], start: float, end: float) -> dict[str, Any]:
    """The run's figures from the ranks' logs (their lines carry `ts`, every step logged).

    The full-strength rate is the job's steps a second over every stretch at full strength: the last half of
    the warm-up, and from `SETTLE_SECONDS` after each replacement's first step to the next kill; steps redone
    after going back to a checkpoint count as made (the job ran at full strength doing them)."""
    steps = sorted((e["ts"], e["step"]) for r in local.ranks for e in r.events() if "step" in e and "event" not in e)

    def step_at(t: float) -> int:  # the furthest step any rank logged before t: the job's progress by then
        return max((s for ts, s in steps if ts < t), default=0)

    def latest(t: float) -> int:  # the step logged last before t: where the job was (it may have gone back)
        return next((s for ts, s in reversed(steps) if ts < t), 0)

    lost, to_full, during, node, victims = [], [], [], {}, []
    calm = [(start - WARM_UP_SECONDS / 2, kills[0][1] if kills else end)]
    for i, (victim, at, how) in enumerate(kills):
        before = latest(at)
        until = kills[i + 1][1] if i + 1 < len(kills) else end
        joined = rejoined(local.workers[victim].events(), at, until, before)
        if joined is None:
            continue  # the run ended before the replacement joined
        continued, first = joined
        lost.append(max(0, before - continued))
        victims.append(f"{'node of ' if how == 'node' else ''}worker {victim}")
        to_full.append(first["ts"] - at)
        during.append(max(0, latest(first["ts"]) - before) / max(first["ts"] - at, 1e-9))
        if how == "node":
            node = {"worker": victim, "steps_lost": lost[-1], "kill_to_full_s": to_full[-1]}
        calm.append((first["ts"] + SETTLE_SECONDS, until))
    calm = [(a, b) for a, b in calm if b - a >= 1.0]
    span = sum(b - a for a, b in calm)
    # The steps made in each stretch (no kill falls inside one, so the job does not go back in it): counted from
    # the furthest step ever logged instead, a job that redoes lost steps had its rate, and so the ideal its
    # goodput is judged by, lowered by every step it redid (the checkpoint subject on wide-mlp: 0.1 steps/s).
    rate = sum(max(0, latest(b) - latest(a)) for a, b in calm) / span if span else 0.0
    kept = step_at(end) - step_at(start)
    ideal = rate * (end - start)
    return {
        "rate": rate, "rate_over_s": span, "steps_kept": kept, "goodput": kept / ideal if ideal else 0.0,
        "kills": len(kills), "steps_lost": lost, "kill_to_full_s": to_full, "steps_per_s_while_replaced": during,
        "victims": victims,
        "node_lost": node, "commit": commit_of(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=120.0, help="seconds of each run after its warm-up")
    p.add_argument("--every", type=float, default=20.0, help="seconds between two kills")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--model", default="digits-mlp")
    p.add_argument("--subjects", default=",".join(SUBJECTS), help="comma-separated, of " + ", ".join(SUBJECTS))
    p.add_argument("--lose-node", action=argparse.BooleanOptionalAction, default=True,
                   help="the kill nearest the middle of each run is a node's loss (SIGSTOP)")  # fmt: skip
    p.add_argument("--more", action="store_true",
                   help="add the repetitions to the result file's, if it holds runs of the same settings")  # fmt: skip
    p.add_argument("--keep-logs", type=Path, metavar="DIR",
                   help="keep each run's logs (the ranks', the coordinator's) under DIR/<subject>-rep<N>")  # fmt: skip
    args = p.parse_args()
    subjects = [s for s in args.subjects.split(",") if s]
    if unknown := set(subjects) - set(SUBJECTS):
        raise SystemExit(f"--subjects: unknown {', '.join(sorted(unknown))}")
    if "torchft" in subjects:  # its own venv, built once (about 10 s; then a check of a few seconds)
        subprocess.run([str(TORCHFT / "setup.sh")], check=True)
    name = "goodput" if args.model == "digits-mlp" else f"goodput-{args.model}"
    settings = {k: v for k, v in vars(args).items() if k not in ("reps", "more", "keep_logs")}
    settings |= {"warm_up_s": WARM_UP_SECONDS, "checkpoint_interval": INTERVAL, "settle_s": SETTLE_SECONDS}
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in subjects}
    if args.more:
        runs = earlier_runs(name, settings) or runs
    done = min(len(r) for r in runs.values())
    print(f"[bench] goodput: {args.workers} allreduce workers, {args.model}, a random worker killed every "
          f"{args.every:g} s for {args.seconds:g} s after {WARM_UP_SECONDS:g} s"
          f"{', the middle kill a node lost' if args.lose_node else ''}, checkpoints every {INTERVAL} steps, "
          f"{args.reps} repetitions of {', '.join(subjects)}, interleaved"
          f"{f' (after {done} earlier ones)' if done else ''}", flush=True)  # fmt: skip
    for rep in range(done, done + args.reps):
        order = subjects if rep % 2 == 0 else subjects[::-1]  # each subject first as often
        for subject in order:
            probe = import_seconds()  # the machine's speed now: every kill's replacement imports torch
            with run_root(args.keep_logs, subject, rep) as root:
                result = run_torchft(args, root, rep) if subject == "torchft" else run(subject, args, root, rep)
            runs[subject].append(result | {"torch_import_s": round(probe, 2)})
            print(f"[bench] {subject} rep {rep + 1} (import torch {probe:.1f} s): goodput {result['goodput']:.3f}, "
                  f"steps lost {result['steps_lost']}, kill to full strength "
                  f"{[round(x, 2) for x in result['kill_to_full_s']]} s, node lost {result['node_lost'] or '-'}",
                  flush=True)  # fmt: skip
            save(name, settings | {"reps": rep + 1}, runs)  # every run kept: a long invocation may be cut


@contextlib.contextmanager
def run_root(keep: Path | None, subject: str, rep: int) -> Iterator[Path]:
    """Where a run writes its checkpoints and logs: a temporary directory, removed after the run; with `keep`
    (--keep-logs), `keep/<subject>-rep<N>`, emptied first, whose logs stay for reading (its checkpoints go)."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix=f"goodput-{subject}-") as temporary:
            yield Path(temporary)
        return
    root = keep / f"{subject}-rep{rep + 1}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        yield root
    finally:
        shutil.rmtree(root / "ckpt", ignore_errors=True)


def earlier_runs(name: str, settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]] | None:
    """The runs of bench/results/<name>.json if they were made with `settings` (else None, said)."""
    path = RESULTS / f"{name}.json"
    if not path.exists():
        return None
    earlier = json.loads(path.read_text())
    same = {k: v for k, v in earlier.get("settings", {}).items() if k != "reps"} == settings
    if not same or set(earlier["runs"]) != set(settings["subjects"].split(",")):
        print(f"[bench] {path.name} holds runs of other settings: starting afresh", flush=True)
        return None
    runs: dict[str, list[dict[str, Any]]] = earlier["runs"]
    fewest = min(len(r) for r in runs.values())
    return {s: r[:fewest] for s, r in runs.items()}  # whole repetitions only


def save(name: str, settings: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    """The result file, from the runs so far (printing the summary and comparisons)."""
    summary = {s: summarize(r) for s, r in runs.items() if r}
    for s, figures in summary.items():
        print(f"[bench] {s}: " + "; ".join(f"{k} {v.text('{:.3f}')}" for k, v in figures.items()), flush=True)
    write_result(name, {
        "settings": settings,
        "runs": runs,
        "summary": {s: {k: v.as_dict() for k, v in f.items()} for s, f in summary.items()},
        "goodput_over_checkpoint": compare(runs, "checkpoint"),
        "goodput_over_torchft": compare(runs, "torchft"),
    })  # fmt: skip


def compare(runs: dict[str, list[dict[str, Any]]], base: str) -> dict[str, Any]:
    """Each other subject's goodput over `base`'s (a ratio of medians with its interval) and the verdict, printed;
    {} when `base` did not run."""
    if not runs.get(base):
        return {}
    ratios: dict[str, Any] = {}
    for s, results in runs.items():
        if s == base or not results:
            continue
        ratio = ratio_interval([r["goodput"] for r in results], [r["goodput"] for r in runs[base]])
        fewest = min(len(results), len(runs[base]))
        if fewest < MIN_RUNS:  # a bootstrap over one or two runs is a point, not an interval
            verdict = f"no verdict: {fewest} run(s) each, {MIN_RUNS} needed"
        elif ratio is None or ratio.lo <= 1 <= ratio.hi:
            verdict = "not distinguishable"
        else:
            verdict = f"{s} keeps more" if ratio.lo > 1 else f"{base} keeps more"
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
    for key in ("steps_lost", "kill_to_full_s"):
        node = [r["node_lost"][key] for r in runs if r.get("node_lost")]
        if node:
            out[f"node_lost_{key}"] = spread(node)
    return out


if __name__ == "__main__":
    main()
