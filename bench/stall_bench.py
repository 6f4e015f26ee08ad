"""Stalls: what the per-rank export costs a step, and how soon a hung rank makes its job Stalled.

    python -m bench.stall_bench export [--baseline REF] [--pairs 5] [--steps 400] [--workers 2]
    python -m bench.stall_bench hang [--reps 3] [--deadline 30] [--how hang|sigstop]
    python -m bench.stall_bench classify [--reps 5]
    python -m bench.stall_bench recorder [--workers 2] [--collectives 3000] [--reads 2000]

`export` (CPU processes, no cluster): every rank now sets its step gauge at every step and stamps each exchange
it enters and leaves (ringleader_trainer.metrics), and DDP's buckets go through a Python comm hook that stamps
them (torch's own allreduce_hook). Two figures:

- the calls alone: the median time of one step's export (a step gauge set, an exchange entered and left) over
  100,000 repetitions, against the digits MLP's median step time: a lower bound that no noise blurs;
- in one process: the strategy's own code with the export and with it switched off, alternating blocks of
  100 steps (`in_process`): the gradient hooks and gauges as they run, without two processes' scheduling noise;
- what a user waits for: the digits MLP (the smallest step, where a per-step cost shows most) under allreduce,
  this checkout's trainer against the trainer of `--baseline` (a commit before the export; checked out into a
  temporary worktree), `--pairs` runs each, back to back, the first of each pair alternating; the median step
  time of the run, the ratio's median over pairs with a 95 % bootstrap interval (bench/stats.py), judged
  against the goal (<= 1 %).

`hang` (the dev cluster and its operator, started if needed): `--reps` fresh jobs of 3 workers (the digits MLP,
checkpoints every 20 steps, runPolicy.progressDeadlineSeconds `--deadline`) where worker 1 hangs after step 50
(`--hang-at-step 50:1`). Measured: from the hang (the trainer's `hang` event, its Unix time) to the moment the
job is seen Stalled (polled every 0.2 s), against the goal (<= deadline + 10 s); and from the hang to the job's
Succeeded. With `--how sigstop` the worker is stopped by SIGSTOP instead, once the job's step is past 100 (its
page then takes connections and sends nothing): measured from the signal. Results go to
bench/results/stall_hang.json (stall_hang_sigstop.json); nothing is asserted.

`recorder` (CPU processes, no cluster): what reading torch's flight recorder costs a page served
(ringleader_trainer.flightrecorder.read, the process groups' numbers on every rank's page): a world of
`--workers` gloo processes that made `--collectives` allreduces; worker 0 times `--reads` reads. Its cost per
step is none by construction (torch records every collective anyway; the read happens when a page is served:
worker 0's every 5 s, every rank's only when a job is overdue or stragglers are watched).
bench/results/stall_recorder.json.

`classify` (the dev cluster): `--reps` jobs of 2 workers whose worker 1 raises ValueError 3 s in, after printing
its Unix time: from that moment to the job's status.lastFailure seen naming it (polled every 0.1 s), against the
goal (<= 5 s). bench/results/stall_classify.json.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.record import step_times, write_result
from bench.stats import Interval, at_most, paired_interval, spread
from tests.support.launch import job_spec, launch

REPO = Path(__file__).resolve().parents[1]
GOAL_EXPORT = 0.01
GOAL_SLACK_S = 10.0
# The last commit before the per-rank export: the trainer it is compared with.
BASELINE = "0474db6"


# ---- export -----------------------------------------------------------------------------------------------
def call_cost(reps: int = 100_000) -> float:
    """Seconds one step's export calls take (median of `reps` timed batches of one)."""
    from ringleader_trainer.metrics import TrainerMetrics

    m = TrainerMetrics()
    samples = []
    for step in range(reps):
        t0 = time.perf_counter()
        m.entered_exchange()
        m.left_exchange()
        m.reached(step)
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def in_process(blocks: int = 40, steps: int = 100, control: bool = False) -> Interval:
    """The export's cost in the strategy's own code, one process (a world of one worker, gloo): the digits MLP
    stepped through AllreduceStrategy as the trainer does (distributed model and optimizer, `report` every
    step), against a second instance of the same strategy with the export switched off (no gradient hooks,
    exchange stamps and step noted made no-ops), in alternating blocks of `steps` steps; the per-block step
    times paired block by block. A world of one has the cheapest exchange, so the share is the largest.
    `control`: both instances with the export (an A/A run: what the order and the pairing alone give)."""
    import torch
    import torch.distributed as dist
    from ringleader_api import Role
    from ringleader_operator.rank_env import rank_env
    from ringleader_trainer.env import from_env as read_env
    from ringleader_trainer.examples.models import digits_mlp
    from ringleader_trainer.strategies.allreduce import AllreduceStrategy
    from ringleader_trainer.strategy import Options

    from tests.support.ranks import free_port

    torch.set_num_threads(1)
    env = rank_env(job_spec("export", "allreduce", 1), Role.WORKER, 0) | {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{env['MASTER_PORT']}", rank=0, world_size=1)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def build(export: bool) -> tuple[Any, Any, Any]:
        s = AllreduceStrategy(read_env(env), Options(log_every=10**9))
        if not export:
            s._stamp_exchange = lambda ddp: None  # type: ignore[method-assign]
            noop = lambda *_: None  # noqa: E731
            s.metrics.entered_exchange = s.metrics.left_exchange = s.metrics.reached = noop  # type: ignore[method-assign]
        torch.manual_seed(0)
        model = s.distributed_model(digits_mlp())
        return s, model, s.distributed_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model)

    subjects = {"export": build(True), "off": build(control)}
    times: dict[str, list[float]] = {k: [] for k in subjects}
    for block in range(blocks):
        for name in list(subjects) if block % 2 == 0 else list(reversed(subjects)):
            s, model, opt = subjects[name]
            t0 = time.perf_counter()
            for step in range(steps):
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                s.report(step + 1, loss.item(), 32)
            times[name].append((time.perf_counter() - t0) / steps)
    dist.destroy_process_group()
    ratio = paired_interval(list(zip(times["export"], times["off"], strict=True)))
    assert ratio is not None
    return ratio


def baseline_tree(ref: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), ref], check=True,
                   capture_output=True)  # fmt: skip
    return into


def step_time(trainer: Path, workers: int, steps: int, logdir: Path) -> float:
    """The median step time worker 0 logged, running the digits MLP with the trainer package under `trainer`."""
    argv = ["--example", "digits-mlp", "--steps", str(steps), "--log-every", "20"]
    pythonpath = f"{trainer}:{REPO / 'operator'}:{REPO}"
    job = launch(job_spec("export", "allreduce", workers), argv, logdir, env_overrides={"PYTHONPATH": pythonpath})
    codes = job.wait(timeout=900)
    if codes != [0] * workers:
        raise SystemExit(f"[bench] a run failed: {codes}\n{job.logs()}")
    return statistics.median(step_times(job.workers[0].events(), batch=32, workers=workers))


def export(args: argparse.Namespace) -> dict[str, Any]:
    cost = call_cost()
    print(f"[bench] one step's export calls: {cost * 1e6:.2f} us (median of 100,000)", flush=True)
    inproc, control = in_process(), in_process(control=True)
    print(f"[bench] in one process, the strategy with the export vs without: {(inproc.mid - 1) * 100:+.2f} % "
          f"({(inproc.lo - 1) * 100:+.2f}..{(inproc.hi - 1) * 100:+.2f} %) step time over {inproc.n} block pairs: "
          f"{at_most(inproc, 1 + GOAL_EXPORT).value} (goal <= {GOAL_EXPORT:.0%}); the same strategy against "
          f"itself {(control.mid - 1) * 100:+.2f} % ({(control.lo - 1) * 100:+.2f}..{(control.hi - 1) * 100:+.2f} %)",
          flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as d:
        base = baseline_tree(args.baseline, Path(d) / "baseline")
        try:
            subjects = {"export": REPO / "trainer-image", "baseline": base / "trainer-image"}
            runs: dict[str, list[float]] = {k: [] for k in subjects}
            for pair in range(args.pairs):
                order = list(subjects) if pair % 2 == 0 else list(reversed(subjects))
                for name in order:
                    s = step_time(subjects[name], args.workers, args.steps, Path(d) / f"{name}-{pair}")
                    runs[name].append(s)
                    print(f"[bench] pair {pair + 1}/{args.pairs} {name}: median step {s * 1e3:.3f} ms", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
    delta = paired_interval(list(zip(runs["export"], runs["baseline"], strict=True)))
    assert delta is not None
    step = statistics.median(runs["export"])
    verdict = at_most(delta, 1 + GOAL_EXPORT)
    print(f"[bench] step time with the export vs {args.baseline}: {(delta.mid - 1) * 100:+.2f} % "
          f"({(delta.lo - 1) * 100:+.2f}..{(delta.hi - 1) * 100:+.2f} %) over {args.pairs} pairs: {verdict.value} "
          f"(goal <= {GOAL_EXPORT:.0%}); the calls alone {cost / step * 100:.3f} % of a {step * 1e3:.2f} ms step",
          flush=True)  # fmt: skip
    return {"baseline": args.baseline, "pairs": args.pairs, "workers": args.workers, "steps": args.steps,
            "step_s": runs, "delta": delta.as_delta(), "verdict": verdict.value, "goal": GOAL_EXPORT,
            "call_cost_s": cost, "call_share": cost / step, "in_process": inproc.as_delta(),
            "in_process_control": control.as_delta(),
            "in_process_verdict": at_most(inproc, 1 + GOAL_EXPORT).value,
            "step": spread(runs["export"]).as_dict()}  # fmt: skip


# ---- hang ------------------------------------------------------------------------------------------------
GOAL_CLASSIFY_S = 5.0


def stop_rank(core: Any, custom: Any, ns: str, name: str) -> float:
    """Once the job's step is past 100, SIGSTOP worker 1's processes (on the process node: this machine's); when."""
    import os
    import signal

    from tests.support.cluster import wait_for
    from tests.support.jobs import get, rank_processes

    def training() -> bool:
        return (((get(custom, ns, name).get("status") or {}).get("progress") or {}).get("step") or 0) >= 100

    wait_for("step 100", training, timeout=600)
    pids = rank_processes(ns, name, "worker", 1)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return time.time()


def one_hang(core: Any, custom: Any, ns: str, name: str, deadline: int, how: str = "hang") -> dict[str, Any]:
    """A fresh job whose worker 1 hangs after step 50 (or is stopped by SIGSTOP past step 100): seconds from the
    hang to Stalled seen, and to Succeeded."""
    from kubernetes import client

    from tests.support.cluster import wait_for
    from tests.support.jobs import GROUP, PLURAL, VERSION, condition, digits_job, get, trainer_events

    def hang_logged() -> list[dict[str, Any]] | None:
        try:
            return trainer_events(core, ns, f"{name}-worker-1", "hang") or None
        except client.ApiException:  # no pod or container yet
            return None

    def seen(kind: str) -> float | None:
        c = condition(get(custom, ns, name), kind)
        return time.time() if c and c["status"] == "True" else None

    with tempfile.TemporaryDirectory() as d:
        steps = 200 if how == "hang" else 900
        body = digits_job(name, 3, steps, Path(d), runPolicy={"progressDeadlineSeconds": deadline})
        if how == "hang":
            body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"] += [
                "--hang-at-step", "50:1", "--timeout", "60"]  # fmt: skip
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        try:
            if how == "hang":  # read from the hung pod before the operator replaces it (its log goes with it)
                hung = float(wait_for("the hang", hang_logged, timeout=600)[0]["at"])
            else:
                hung = stop_rank(core, custom, ns, name)
            stalled = wait_for("Stalled", lambda: seen("Stalled"), timeout=600, every=0.2)
            message = (condition(get(custom, ns, name), "Stalled") or {}).get("message", "")
            done = wait_for("Succeeded", lambda: seen("Succeeded"), timeout=600, every=0.5)
        finally:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    return {"hang_to_stalled_s": stalled - hung, "hang_to_succeeded_s": done - hung, "message": message}


@contextlib.contextmanager
def on_cluster() -> Iterator[tuple[Any, Any, str]]:
    """(core API, custom objects API, a fresh namespace) on the dev cluster with its operator (both started if
    needed); the namespace is deleted afterwards."""
    from kubernetes import client, config
    from ringleader_devcluster import cluster, operatorprocess
    from ringleader_devcluster.layout import Layout

    from bench.common import delete_namespace, new_namespace

    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    operatorprocess.operator_up()
    config.load_kube_config(str(Layout.from_env().kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = new_namespace(core)
    try:
        yield core, custom, ns
    finally:
        delete_namespace(core, ns)


def hang(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    with on_cluster() as (core, custom, ns):
        for rep in range(args.reps):
            row = one_hang(core, custom, ns, f"hang{rep}", args.deadline, args.how)
            rows.append(row)
            print(
                f"[bench] rep {rep + 1}/{args.reps}: Stalled {row['hang_to_stalled_s']:.1f} s after the hang "
                f"(deadline {args.deadline} s), Succeeded {row['hang_to_succeeded_s']:.1f} s after it",
                flush=True,
            )
    latency = [r["hang_to_stalled_s"] for r in rows]
    goal = args.deadline + GOAL_SLACK_S
    verdict = "met" if max(latency) <= goal else "missed"
    print(
        f"[bench] hang -> Stalled: median {statistics.median(latency):.1f} s, max {max(latency):.1f} s over "
        f"{len(rows)} jobs: {verdict} (goal <= deadline + {GOAL_SLACK_S:g} s = {goal:g} s)",
        flush=True,
    )
    return {"deadline_s": args.deadline, "reps": args.reps, "rows": rows, "goal_s": goal, "verdict": verdict,
            "stalled": spread(latency).as_dict()}  # fmt: skip


RAISES = (
    "import os, time\n"
    "if os.environ['RANK'] == '1':\n"
    "    time.sleep(3)\n"
    "    print(f'failing at {time.time()}', flush=True)\n"
    "    raise ValueError('bad shape (3, 4)')\n"
    "time.sleep(60)\n"
)


def one_failure(core: Any, custom: Any, ns: str, name: str) -> dict[str, Any]:
    """A fresh job whose worker 1 raises: seconds from its last line to status.lastFailure seen naming it."""
    from tests.support.cluster import logs, wait_for
    from tests.support.jobs import GROUP, PLURAL, VERSION, get, training_job

    body = training_job(name, RAISES, workers=2)
    body["spec"]["workers"]["restartPolicy"] = "Never"
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
    try:

        def classed() -> tuple[float, dict[str, Any]] | None:
            last = (get(custom, ns, name).get("status") or {}).get("lastFailure")
            return (time.time(), last) if last else None

        seen, last = wait_for("lastFailure", classed, timeout=300, every=0.1)
        said = logs(core, ns, f"{name}-worker-1", container="trainer")
        failed = float(next(x for x in said.splitlines() if x.startswith("failing at ")).split()[-1])
    finally:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    return {"failure_to_class_s": seen - failed, "class": last.get("class"), "evidence": last.get("evidence")}


def classify(args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    with on_cluster() as (core, custom, ns):
        for rep in range(args.reps):
            row = one_failure(core, custom, ns, f"raises{rep}")
            rows.append(row)
            print(f"[bench] rep {rep + 1}/{args.reps}: {row['class']} in status {row['failure_to_class_s']:.2f} s "
                  f"after the exception ({row['evidence']})", flush=True)  # fmt: skip
    latency = [r["failure_to_class_s"] for r in rows]
    verdict = "met" if max(latency) <= GOAL_CLASSIFY_S else "missed"
    print(f"[bench] failure -> class in status: median {statistics.median(latency):.2f} s, max {max(latency):.2f} s "
          f"over {len(rows)} jobs: {verdict} (goal <= {GOAL_CLASSIFY_S:g} s)", flush=True)  # fmt: skip
    return {"reps": args.reps, "rows": rows, "goal_s": GOAL_CLASSIFY_S, "verdict": verdict,
            "latency": spread(latency).as_dict()}  # fmt: skip


# ---- recorder ---------------------------------------------------------------------------------------------
def _recorder_rank(rank: int, port: int, args: argparse.Namespace, out: Any) -> None:
    """One process of the `recorder` world; worker 0 puts its read times (seconds) and what it read on `out`."""
    import torch
    import torch.distributed as dist
    from ringleader_trainer import flightrecorder

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.workers)
    t = torch.ones(4)
    for _ in range(args.collectives):
        dist.all_reduce(t)
    if rank == 0:
        times = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            groups = flightrecorder.read()
            times.append(time.perf_counter() - t0)
        out.put((times, [tuple(g) for g in groups]))
    dist.barrier()
    dist.destroy_process_group()


def recorder(args: argparse.Namespace) -> dict[str, Any]:
    import multiprocessing

    from tests.support.ranks import free_port

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_recorder_rank, args=(r, port, args, out)) for r in range(args.workers)]
    for proc in procs:
        proc.start()
    times, groups = out.get(timeout=600)
    for proc in procs:
        proc.join(timeout=60)
    reads = spread(times)
    print(f"[bench] one read of the flight recorder's numbers: median {reads.mid * 1e6:.1f} us "
          f"({reads.lo * 1e6:.1f}..{reads.hi * 1e6:.1f} us) over {args.reads} reads; read {groups}; per step: "
          f"none (read when a page is served)", flush=True)  # fmt: skip
    return {"read_s": reads.as_dict(), "groups": groups, "per_step_s": 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    e = sub.add_parser("export")
    e.add_argument("--baseline", default=BASELINE)
    e.add_argument("--pairs", type=int, default=5)
    e.add_argument("--steps", type=int, default=400)
    e.add_argument("--workers", type=int, default=2)
    h = sub.add_parser("hang")
    h.add_argument("--reps", type=int, default=3)
    h.add_argument("--deadline", type=int, default=30)
    h.add_argument("--how", choices=("hang", "sigstop"), default="hang")
    c = sub.add_parser("classify")
    c.add_argument("--reps", type=int, default=5)
    r = sub.add_parser("recorder")
    r.add_argument("--workers", type=int, default=2)
    r.add_argument("--collectives", type=int, default=3000)
    r.add_argument("--reads", type=int, default=2000)
    args = p.parse_args()
    print(f"[bench] settings: {vars(args)}", flush=True)
    result = {"export": export, "hang": hang, "classify": classify, "recorder": recorder}[args.part](args)
    sigstop = "_sigstop" if getattr(args, "how", "hang") == "sigstop" else ""  # its own file beside the hang's
    write_result(f"stall_{args.part}{sigstop}", {"settings": vars(args), **result})


if __name__ == "__main__":
    main()
