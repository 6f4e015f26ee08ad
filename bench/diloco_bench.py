"""DiLoCo beside local SGD: the loss and test accuracy after a fixed number of steps, and the step time.

    python -m bench.diloco_bench [--reps 5] [--steps 600] [--pairs 5]

Part 1, training (digits-mlp, 4 workers, batch 32 each, SGD lr 0.1 with momentum 0.9, `--steps` steps): local SGD
and DiLoCo at the same sync period (8 and 32 inner steps, so the same bytes sent), DiLoCo with an outer momentum
of 0.5 and with the paper's 0.9, each run `--reps` times with seeds 0, 1, ... (the seed sets the model's start
and the data order); the subjects interleaved, their order rotating each repetition. The figures: worker 0's
training loss, the mean of its losses logged over the last 50 steps; the final model's test accuracy; the
median step time over the logged windows after the first. Loss and accuracy are reported as median (min-max)
over the repetitions, with "not distinguishable" where DiLoCo's range overlaps local SGD's at the same period.

Part 2, step time where communication counts (wide-mlp, ~25M parameters, 2 workers, 48 steps, period 8):
`--pairs` pairs of local SGD and DiLoCo runs back to back, the first of each pair alternating; DiLoCo's step time
over local SGD's as the median over pairs with a 95 % bootstrap interval (bench/stats.py).

Results go to bench/results/diloco.json; nothing is asserted.
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

WORKERS, BATCH, LOG_EVERY, TAIL_STEPS = 4, 32, 10, 50
SUBJECTS: list[tuple[str, str, dict[str, Any]]] = [
    ("local-sgd tau=8", "local-sgd", {"localSGD": {"period": 8}}),
    ("diloco H=8, outer 0.7 / 0.5", "diloco", {"diloco": {"period": 8, "outerMomentum": 0.5}}),
    ("diloco H=8, outer 0.7 / 0.9 (paper)", "diloco", {"diloco": {"period": 8}}),
    ("local-sgd tau=32", "local-sgd", {"localSGD": {"period": 32}}),
    ("diloco H=32, outer 0.7 / 0.5", "diloco", {"diloco": {"period": 32, "outerMomentum": 0.5}}),
    ("diloco H=32, outer 0.7 / 0.9 (paper)", "diloco", {"diloco": {"period": 32}}),
]
WIDE = {"workers": 2, "batch": 64, "steps": 48, "period": 8}


def train(name: str, strategy: str, spec: dict[str, Any], seed: int, steps: int, logdir: Path) -> dict[str, Any]:
    """One run of the digits example: its loss over the last TAIL_STEPS steps, test accuracy and step time."""
    args = ["--example", "digits-mlp", "--steps", str(steps), "--seed", str(seed), "--log-every", str(LOG_EVERY)]
    job = launch(job_spec("dl", strategy, WORKERS, **spec), args, logdir)
    if job.wait(timeout=1800) != [0] * WORKERS:
        raise SystemExit(f"{name} (seed {seed}) failed:\n{job.logs()}")
    events = job.workers[0].events()
    tail = [e["loss"] for e in events if "loss" in e and e["step"] > steps - TAIL_STEPS]
    done = job.workers[0].events("done")[0]
    step = statistics.median(step_times(events, BATCH, WORKERS))
    run = {"seed": seed, "loss": statistics.fmean(tail), "test_accuracy": done["test_accuracy"],
           "median_step_s": step, "rounds": done["rounds"]}  # fmt: skip
    print(f"[bench] {name:38s} seed {seed}: loss {run['loss']:.4f}, accuracy {run['test_accuracy']:.4f}, "
          f"step {run['median_step_s'] * 1000:.1f} ms", flush=True)  # fmt: skip
    return run


def wide_step(strategy: str, spec: dict[str, Any], logdir: Path) -> float:
    """The median step time of one wide-mlp run (windows of one period each, the first left out)."""
    args = ["--example", "wide-mlp", "--steps", str(WIDE["steps"]), "--log-every", str(WIDE["period"])]
    job = launch(job_spec("dl", strategy, WIDE["workers"], **spec), args, logdir)
    if job.wait(timeout=1800) != [0] * WIDE["workers"]:
        raise SystemExit(f"wide-mlp {strategy} failed:\n{job.logs()}")
    return statistics.median(step_times(job.workers[0].events(), WIDE["batch"], WIDE["workers"]))


def summarized(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"subject": name, "runs": runs} | {
        key: spread([r[key] for r in runs]).as_dict() for key in ("loss", "test_accuracy", "median_step_s")
    }


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return a["lo"] <= b["hi"] and b["lo"] <= a["hi"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--pairs", type=int, default=5)
    args = p.parse_args()
    print(f"[bench] settings: digits-mlp, {WORKERS} workers x batch {BATCH}, SGD lr 0.1 momentum 0.9, {args.steps} "
          f"steps, {args.reps} seeds; wide-mlp {WIDE}, {args.pairs} pairs", flush=True)  # fmt: skip
    started = time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in SUBJECTS}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.reps):
            for i in range(len(SUBJECTS)):
                name, strategy, spec = SUBJECTS[(i + rep) % len(SUBJECTS)]  # the order rotates
                runs[name].append(train(name, strategy, spec, rep, args.steps, Path(tmp) / f"{rep}-{i}"))
        pairs = []
        lsgd: tuple[str, dict[str, Any]] = ("local-sgd", {"localSGD": {"period": WIDE["period"]}})
        diloco: tuple[str, dict[str, Any]] = ("diloco", {"diloco": {"period": WIDE["period"], "outerMomentum": 0.5}})
        for pair in range(args.pairs):  # back to back, the first alternating
            first, second = (lsgd, diloco) if pair % 2 == 0 else (diloco, lsgd)
            times = {s[0]: wide_step(s[0], s[1], Path(tmp) / f"wide-{pair}-{s[0]}") for s in (first, second)}
            pairs.append((times["diloco"], times["local-sgd"]))
            print(f"[bench] wide-mlp pair {pair}: diloco {times['diloco'] * 1000:.0f} ms, local-sgd "
                  f"{times['local-sgd'] * 1000:.0f} ms", flush=True)  # fmt: skip
    rows = [summarized(name, r) for name, r in runs.items()]
    by_name = {r["subject"]: r for r in rows}
    for r in rows:
        if r["subject"].startswith("diloco"):
            base = by_name[f"local-sgd tau={r['subject'].split('H=')[1].split(',')[0]}"]
            r["loss_verdict"] = (
                "not distinguishable"
                if overlap(r["loss"], base["loss"])
                else ("lower" if r["loss"]["median"] < base["loss"]["median"] else "higher")
            )
    ratio = paired_interval(pairs)
    wide = {"settings": WIDE, "pairs_s": pairs}
    if ratio is not None:
        wide |= {"diloco_vs_local_sgd": ratio.as_dict(), "verdict": time_verdict(ratio)}
        print(f"[bench] wide-mlp step time, diloco / local-sgd: {ratio.text()} -> {time_verdict(ratio)}", flush=True)
    write_result("diloco", {
        "settings": {"example": "digits-mlp", "workers": WORKERS, "batch_per_worker": BATCH, "steps": args.steps,
                     "reps": args.reps, "inner": "SGD lr 0.1 momentum 0.9 weight decay 1e-3",
                     "loss": f"worker 0's mean logged loss over the last {TAIL_STEPS} steps", "pairs": args.pairs},
        "rows": rows, "wide_mlp": wide, "wall_s": time.perf_counter() - started,
    })  # fmt: skip


if __name__ == "__main__":
    main()
