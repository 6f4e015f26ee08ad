"""BENCHMARKS.md and the plots under bench/plots/ from the results in bench/results/ (run by `make bench`).

    python -m bench.report

Every section states what it was measured on (machine, commit, date, repetitions) and each goal of the issue as
met or missed with the figure that decides it; a benchmark that has no result yet says so and names the make
target that produces it. Tables and plots are built from the JSON alone, so the report can be regenerated
without measuring again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ringleader_devcluster.layout import REPO_ROOT

from bench import control_plane_plan as cp
from bench.record import point_order, range_verdict
from bench.report_plots import PLOTTERS, Result
from bench.stats import Interval, at_most, ratio_interval, spread, time_verdict

RESULTS = REPO_ROOT / "bench" / "results"
PLOTS = REPO_ROOT / "bench" / "plots"
REPORT = REPO_ROOT / "BENCHMARKS.md"


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def size(n: float) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


def provenance(result: Result, reps: str) -> str:
    m = result.get("machine", {})
    return (
        f"_Measured {m.get('date', '?')} at commit `{m.get('commit', '?')}` on {m.get('cpus', '?')} x "
        f"{m.get('cpu_model', '?')}, {m.get('memory_gb', '?')} GB; {reps}._"
    )


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


CP_METRICS = [("created_s", "created (s)", "{:.2f}"), ("running_s", "all Running (s)", "{:.2f}"),
              ("requests_per_job", "API requests / job", "{:.1f}"), ("cpu_s", "operator CPU (s)", "{:.1f}"),
              ("peak_rss_mb", "operator peak RSS (MB)", "{:.0f}"),
              ("cluster_cpu_s", "control plane CPU (s)", "{:.1f}")]  # fmt: skip


def control_plane(result: Result) -> list[str]:
    """Per configuration a table: each operator's median (min-max) per scenario and metric, and Ringleader /
    training-operator with its 95 % bootstrap interval; then the goals, judged on those intervals."""
    if not result.get("rows") or "config" not in result["rows"][0]:
        return ["_The result file is of an earlier format (no configurations): run `make bench-cluster`._"]
    rows = [cp.row_from(r) for r in result["rows"]]
    reps = (
        f"{result['reps']} repetitions per one-job scenario and {result['burst_reps']} of the burst, interleaved; "
        "median (min-max) of the runs; the ratio's interval is a 95 % bootstrap interval of the ratio of medians"
    )
    commits = sorted({str(r["commit"]) for r in result.get("runs", []) if r.get("commit")})
    if len(commits) > 1:  # runs kept from earlier invocations (--keep)
        reps += "; the runs span commits " + ", ".join(f"`{c}`" for c in commits) + " (each run names its own)"
    out = [provenance(result, reps), "", "Settings (printed by the benchmark before its runs):", ""]
    out += [f"- {line}" for line in result.get("settings", [])]
    for name in dict.fromkeys(r.config for r in rows):
        title = cp.CONFIGS[name].title if name in cp.CONFIGS else name
        out += ["", f"### `{name}`: {title}", ""]
        body = []
        for row in (r for r in rows if r.config == name):
            for key, label, fmt in CP_METRICS:
                figures = [row.operators.get(op, {}).get(key) for op in cp.OPERATORS]
                if not any(figures):  # a metric runs of an earlier format lack
                    continue
                cells = [f.text(fmt) if f else "-" for f in figures]
                ratio = row.ratio.get(key)
                body.append([cp.scenario_name(row.jobs, row.workers), label, *cells,
                             ratio.text(unit="x") if ratio else "-"])  # fmt: skip
        out += table(["scenario", "metric", "training-operator", "Ringleader", "Ringleader / TO"], body)
    out += ["", "Goals (at `matched` budgets; met only when the whole interval is inside the goal):"]
    out += [f"- {j.line()}" for j in cp.judge(rows)]
    return out


def allreduce(result: Result) -> list[str]:
    goal = 0.9
    rows = [
        [
            str(r["ranks"]),
            size(r["bytes"]),
            f"{r['gloo']['busbw_GBps']:.3f}",
            f"{r['ring']['busbw_GBps']:.3f}",
            f"{r['ring_over_gloo']:.2f}x",
        ]
        for r in result["rows"]
    ]
    out = [provenance(result, f"median of {result['reps']} timed runs per size"), ""]
    out += table(["ranks", "message", "gloo busbw (GB/s)", "ring busbw (GB/s)", "ring / gloo"], rows)
    big = [r["ring_over_gloo"] for r in result["rows"] if r["bytes"] >= 16 << 20]
    if big:
        out += ["", f"Goal: ring >= {goal}x gloo at >= 16 MB. Lowest ratio there {min(big):.2f}x: "
                    f"{verdict(min(big) >= goal)}"]  # fmt: skip
    return out


def strategies(result: Result) -> list[str]:
    rows = [
        [
            str(r["workers"]),
            r["config"],
            f"{r['median_step_s'] * 1000:.0f}",
            f"{r['samples_per_s']:.0f}" if "samples_per_s" in r else "-",
            f"{r['vs_allreduce_gloo']:.2f}x" if "vs_allreduce_gloo" in r else "-",
        ]
        for r in result["rows"]
    ]
    reps = f"median over the logged windows of {result.get('steps', '?')} steps, one run per configuration"
    if "pairs" in result:
        reps += (f" except the baseline and the trainer's allreduce (gloo): {result['pairs']} pairs of runs back to "
                 "back, the first alternating; their rows are the median of the runs' medians")  # fmt: skip
    elif result.get("reps", 1) > 1:
        reps += f" except the baseline and the trainer's allreduce (gloo): median of {result['reps']} interleaved runs"
    out = [provenance(result, reps), ""]
    out += table(["workers", "configuration", "step (ms)", "samples/s", "vs allreduce (gloo)"], rows)
    overheads = result.get("overhead_vs_baseline") or {}
    goal = result.get("goal_overhead", 0.05)
    for workers, o in overheads.items():
        out.append("")
        what = f"Goal: the trainer's allreduce within {goal:.0%} of a plain torchrun DDP script ({workers} workers)"
        if isinstance(o, dict):  # paired runs, two-sided
            out.append(f"{what}, two-sided: {o['median']:+.1%} step time ({o['lo']:+.1%} to {o['hi']:+.1%}, 95 % "
                       f"bootstrap interval over {o['n']} pairs): **{o['verdict']}**")  # fmt: skip
        else:  # an earlier result: one number, no interval
            out.append(f"{what}: {o:+.1%} step time (an earlier result without pairs: not judged; run "
                       "`make bench-trainer`)")  # fmt: skip
    return out


def recovery(result: Result) -> list[str]:
    goal = result["goal_s"]
    rows = [
        [
            r["case"],
            r["victim"],
            str(len(r["recovery_s"])),
            f"{r['median_s']:.2f}",
            f"{r['max_s']:.2f}",
            verdict(r["median_s"] <= goal),
        ]
        for r in result["rows"]
    ]
    out = [provenance(result, f"{result['kills']} kills per case, each in a fresh job"), ""]
    return out + table(["strategy", "killed", "kills", "median (s)", "max (s)", f"goal <= {goal:g} s"], rows)


def goodput(result: Result) -> list[str]:
    s = result["settings"]
    reps = (
        f"{s['reps']} runs per subject, interleaved: {s['workers']} allreduce workers ({s['model']}) as processes, a "
        f"random worker SIGKILLed every {s['every']:g} s for {s['seconds']:g} s and started again at once"
        + (", the middle kill a node's loss (its processes stopped, nothing closed)" if s.get("lose_node") else "")
    )

    def mid(fig: dict[str, float] | None, fmt: str) -> str:
        if fig is None:
            return "-"
        return f"{fmt.format(fig['median'])} ({fmt.format(fig['lo'])}-{fmt.format(fig['hi'])})"

    def kept(name: str) -> str:  # the steps the job kept a second, median over the runs: what users wait for
        rates = sorted(r["steps_kept"] / s["seconds"] for r in result["runs"][name])
        return f"{rates[len(rates) // 2]:.1f} ({rates[0]:.1f}-{rates[-1]:.1f})"

    rows = [
        [name, mid(f["goodput"], "{:.3f}"), kept(name), mid(f.get("steps_lost"), "{:.0f}"),
         mid(f.get("kill_to_full_s"), "{:.2f}"), mid(f.get("steps_per_s_while_replaced"), "{:.1f}"),
         f"{f['rate']['median']:.1f}", mid(f.get("node_lost_kill_to_full_s"), "{:.2f}")]
        for name, f in result["summary"].items()
    ]  # fmt: skip
    out = [provenance(result, reps), ""]
    out += table(["subject", "goodput", "steps kept / s", "steps lost / kill", "kill to full strength (s)",
                  "steps/s while replaced", "steps/s at full strength", "node lost: to full strength (s)"],
                 rows)  # fmt: skip
    out.append("")
    probes = {name: [r.get("torch_import_s") for r in runs] for name, runs in result["runs"].items()}
    if any(p is not None for runs in probes.values() for p in runs):  # a shared host's speed varies by the day
        said = "; ".join(f"{name} " + ", ".join("-" if p is None else f"{p:.1f}" for p in runs)
                         for name, runs in probes.items())  # fmt: skip
        out.append(f"- the machine's speed before each run, in run order (seconds of a fresh `import torch`; - not "
                   f"measured): {said}")  # fmt: skip
    for base in ("checkpoint", "torchft"):
        for name, r in result.get(f"goodput_over_{base}", {}).items():
            ratio = r["ratio"]
            said = f"{ratio['median']:.2f}x ({ratio['lo']:.2f}-{ratio['hi']:.2f}x)" if ratio else "n/a"
            out.append(f"- goodput {name} / {base}: {said}: {r['verdict']}")
    return out


def recovery_nodes(result: Result) -> list[str]:
    goal = result["goal_s"]
    rows = [
        [r["case"], f"{r['node']} node", r["victim"], str(len(r["recovery_s"])), f"{r['median_s']:.2f}",
         f"{min(r['recovery_s']):.2f}", f"{r['max_s']:.2f}", verdict(r["median_s"] <= goal)]
        for r in result["rows"]
    ]  # fmt: skip
    reps = f"{result['kills']} kills per node kind, alternating between them, each in a fresh job"
    header = ["strategy", "node", "killed", "kills", "median (s)", "min (s)", "max (s)", f"goal <= {goal:g} s"]
    verdicts = []
    for case in dict.fromkeys(r["case"] for r in result["rows"]):
        runs = {f"the {r['node']} node": r["recovery_s"] for r in result["rows"] if r["case"] == case}
        verdicts.append(f"{case}: {range_verdict(runs, 'faster to recover')}")
    return [provenance(result, reps), "", *table(header, rows), "", "; ".join(verdicts) + "."]


def checkpoint(result: Result) -> list[str]:
    """Both ways: the save's share of step time, and the wall-clock delta with its interval (judged)."""
    goal = result["goal_share"]
    if "pairs" not in result:
        return ["_The result file is of an earlier format (one run, no wall-clock pairs): run `make bench-trainer`._"]
    rows = []
    for r in result["rows"]:
        lo, hi = r["overhead_share_range"]
        w = r["wall_delta"]
        rows.append([r["example"], str(r["workers"]), str(r["interval"]), f"{r['checkpoint_bytes'] / 1e6:.0f}",
                     f"{r['median_step_s'] * 1000:.1f}", f"{r['median_save_s'] * 1000:.0f}",
                     f"{r['overhead_share']:.2%} ({lo:.2%}-{hi:.2%})",
                     f"{w['median']:+.1%} ({w['lo']:+.1%} to {w['hi']:+.1%})", f"**{r['verdict']}**"])  # fmt: skip
    reps = (f"{result['pairs']} pairs of runs with and without checkpoints, back to back; the wall-clock delta's "
            "interval is a 95 % bootstrap interval over the pairs")  # fmt: skip
    head = ["model", "workers", "interval (steps)", "checkpoint (MB)", "step (ms)", "save (ms)",
            "save / step time", "wall clock with / without", f"goal <= {goal:.0%} (wall clock)"]  # fmt: skip
    return [provenance(result, reps), "", *table(head, rows)]


def stop(result: Result) -> list[str]:
    """Steps lost when every rank is signalled at once, the lossless stop against a kill, and the stop's times."""
    rows = []
    for how, r in result["summary"].items():
        lo, hi = r["exit_s_range"]
        save = r["median_stop_save_s"]
        runs = [", ".join(str(n) for n in r[k]) for k in ("resumed_from", "steps_lost")]
        times = [f"{r['median_exit_s']:.2f} ({lo:.2f}-{hi:.2f})", "-" if save is None else f"{save:.2f}"]
        rows.append([how, *runs, *times])
    reps = (f"{result['reps']} repetitions of each signal, alternating; {result['example']}, {result['workers']} "
            f"workers, checkpoints every {result['interval']} steps, every rank signalled at worker 0's step "
            f"{result['at']}")  # fmt: skip
    head = ["signal", "resumes from, each run", "steps lost, each run", "signal to every rank gone (s)",
            "save at the stop (s)"]  # fmt: skip
    return [provenance(result, reps), "", *table(head, rows)]


def _delta(d: dict[str, float]) -> str:
    return f"{d['median']:+.2%} ({d['lo']:+.2%} to {d['hi']:+.2%})"


def stall_export(result: Result) -> list[str]:
    """The per-rank export's cost: the calls alone, in one process against itself switched off, and two
    processes against the trainer before it."""
    goal, step = result["goal"], result["step"]["median"]
    rows = [
        ["the calls alone (median of 100,000)", f"{result['call_cost_s'] * 1e6:.2f} us", f"{result['call_share']:.3%}",
         "-"],
        ["one process, one worker, blocks of 100 steps: with the export vs without", "-",
         _delta(result["in_process"]), f"**{result['in_process_verdict']}**"],
        ["the same, the strategy against itself (what the method alone gives)", "-",
         _delta(result["in_process_control"]), "-"],
        [f"{result['workers']} workers as processes, {result['steps']} steps: this trainer vs `{result['baseline']}`",
         f"{step * 1e3:.2f} ms step", _delta(result["delta"]), f"**{result['verdict']}**"],
    ]  # fmt: skip
    reps = (f"digits MLP under allreduce; {result['pairs']} pairs of runs back to back, order alternating, 95 % "
            "bootstrap intervals over the pairs")  # fmt: skip
    return [provenance(result, reps), "", *table(["measured", "cost", "step time", f"goal <= {goal:.0%}"], rows)]


def stall_hang(result: Result) -> list[str]:
    """How soon a hung rank makes its job Stalled, against the deadline."""
    s = result["stalled"]
    rows = [[f"{result['deadline_s']}", f"{s['median']:.1f} ({s['lo']:.1f}-{s['hi']:.1f})",
             ", ".join(f"{r['hang_to_succeeded_s']:.0f}" for r in result["rows"]), f"{result['goal_s']:g}",
             f"**{result['verdict']}**"]]  # fmt: skip
    reps = (f"{result['reps']} fresh jobs of 3 workers (digits MLP, checkpoints every 20 steps), worker 1 hung "
            "after step 50 by `--hang-at-step 50:1`, the job polled every 0.2 s")  # fmt: skip
    head = ["progressDeadlineSeconds", "hang to Stalled (s)", "hang to Succeeded, each job (s)", "goal (s)", "verdict"]
    return [provenance(result, reps), "", *table(head, rows), "", f"Stalled said: {result['rows'][0]['message']}"]


def stall_recorder(result: Result) -> list[str]:
    """What reading torch's flight recorder costs a page served."""
    r, settings = result["read_s"], result["settings"]
    rows = [[f"{r['median'] * 1e6:.1f}", f"{r['lo'] * 1e6:.1f}-{r['hi'] * 1e6:.1f}", str(r["n"]), "none"]]
    reps = (f"{settings['workers']} gloo processes after {settings['collectives']} allreduces; worker 0 timed "
            f"{settings['reads']} reads")  # fmt: skip
    return [provenance(result, reps), "", *table(["median (us)", "min-max (us)", "reads", "per step"], rows)]


def launchers(result: Result) -> list[str]:
    runs = result["create_to_all_initialized_s"]
    rows = [
        [name, str(r["summary"]["n"]), f"{r['summary']['median']:.2f}", f"{r['summary']['min']:.2f}",
         f"{r['summary']['max']:.2f}"]
        for name, r in runs.items()
    ]  # fmt: skip
    settings = result["settings"]
    out = [
        provenance(result, f"{settings['reps']} jobs of {settings['workers']} workers per launcher, alternating"),
        "",
    ]
    out += table(["launcher", "jobs", "median (s)", "min (s)", "max (s)"], rows)
    line = f"torchrun / trainer: {result['ratio_torchrun_over_trainer']:.2f}x; {result['verdict']}."
    torchrun, trainer = (runs.get(k, {}).get("runs") for k in ("torchrun", "trainer"))
    if torchrun and trainer and (ratio := ratio_interval(torchrun, trainer)) is not None:
        line += (f" The ratio's 95 % bootstrap interval: {ratio.lo:.2f}-{ratio.hi:.2f}x (torchrun "
                 f"{time_verdict(ratio)}).")  # fmt: skip
    return [*out, "", line]


def devcluster(result: Result) -> list[str]:
    goals, start = result["goals"], result["warm_start_s"]["summary"]
    rows = [
        ["warm `make dev-cluster`", str(start["n"]), f"{start['median']:.2f} s", f"{start['max']:.2f} s",
         f"<= {goals['warm_start_s']:g} s", verdict(start["max"] <= goals["warm_start_s"])],
    ]  # fmt: skip
    for node, goal in (("process", goals["pod_running_p99_s"]), ("real", goals["real_node_pod_running_p99_s"])):
        lat = result["pod_create_to_running_s"][node]["summary"]
        rows.append(
            [f"pod create -> Running, {node} node", str(lat["n"]), f"{lat['median'] * 1000:.0f} ms",
             f"{lat['p99'] * 1000:.0f} ms (p99)", f"p99 <= {goal:g} s", verdict(lat["p99"] <= goal)]
        )  # fmt: skip
    settings = result["settings"]
    reps = f"node kinds interleaved in {settings['rounds']} rounds, {settings['concurrency']} pods in flight"
    return [provenance(result, reps), "", *table(["what", "n", "median", "worst", "goal", ""], rows)]


def image_rebuild(result: Result) -> list[str]:
    push, running, goal = result["build_push_s"], result["change_to_running_s"], result["goal_s"]
    rows = [
        ["build and push", str(push["n"]), f"{push['median']:.1f} s", f"{push['max']:.1f} s", "", ""],
        ["change -> pod running the new code", str(running["n"]), f"{running['median']:.1f} s",
         f"{running['max']:.1f} s", f"<= {goal:g} s", verdict(running["max"] <= goal)],
    ]  # fmt: skip
    reps = f"{result['settings']['reps']} changes ({result['settings']['change']}), each after the last"
    return [provenance(result, reps), "", *table(["what", "n", "median", "worst", "goal", ""], rows)]


def gpu(result: Result) -> list[str]:
    """The one-GPU figures (bench.gpu_bench), measured where a GPU was lent, so on another machine than the rest."""
    rows = [
        [r["config"], f"{r['median_step_s'] * 1000:.1f}", f"{r['min_s'] * 1000:.1f}-{r['max_s'] * 1000:.1f}",
         f"{r['vs_allreduce_nccl']:.1f}x"]
        for r in result["strategies"]
    ]  # fmt: skip
    ring = [
        [size(r["bytes"]), f"{r['median_s']['cpu'] * 1000:.2f}", f"{r['median_s']['cuda'] * 1000:.2f}",
         f"{r['median_s']['cuda'] / r['median_s']['cpu']:.2f}x", r["verdict"]]
        for r in result["ring_cuda_vs_cpu"]
    ]  # fmt: skip
    reps = (
        f"{result['gpu']}, torch {result['torch']}, NCCL {result['nccl']}; every rank on the one GPU; "
        f"{result['model']}, batch {result['batch_per_worker']} per worker, {result['steps']} steps; median of "
        f"{result['reps']} interleaved runs, each run's median window"
    )
    out = [provenance(result, reps), ""]
    out += table(["configuration", "step (ms)", "runs (ms)", "vs allreduce, NCCL, 1 worker"], rows)
    out += ["", "Our ring, 2 ranks, CUDA tensors (summed through host memory) against CPU tensors, same run:", ""]
    out += table(["size", "cpu tensors (ms)", "cuda tensors (ms)", "cuda / cpu", "verdict"], ring)
    return out


def gpu_tier(result: Result) -> list[str]:
    """The last run of tests/gpu_tier.sh on a lent GPU: what ran there and how each test ended (a test record,
    not a timing: CI has no GPU, so this is the only place its outcome is kept)."""
    m = result["machine"]
    counts: dict[str, int] = {}
    for t in result["tests"]:
        counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
    head = (
        f"_Ran {m['date']} at commit `{m['commit']}` on {result['gpu']} ({result['gpu_memory_mib']} MiB, driver "
        f"{result['driver']}), torch {result['torch']}, CUDA {result['cuda']}, NCCL {result['nccl']}; "
        f"`{result['command']}`, {result['pytest_workers']} tests at a time: {summary} in {result['seconds']:.0f} s._"
    )
    rows = [[f"`{t['test'].removeprefix('tests/integration/trainer/')}`", t["outcome"]] for t in result["tests"]]
    return [head, "", *table(["test", "outcome"], rows)]


def omp_threads(result: Result) -> list[str]:
    settings = result["settings"]
    rows = [
        [what, f"{result[f'step_s_{key}']['median'] * 1000:.1f} ms", f"{result[f'wall_s_{key}']['median']:.1f} s"]
        for what, key in (("OMP_NUM_THREADS as the operator sets it (1)", "operator"), ("unset", "unset"))
    ]
    step, wall = result["step_s_operator_over_unset"], result["wall_s_operator_over_unset"]
    rows.append(["operator's / unset (95 % interval over pairs)", _ratio(step), _ratio(wall)])
    reps = (
        f"{settings['example']}, {settings['workers']} workers (allreduce, gloo) on this machine's cores, "
        f"{settings['steps']} steps, {settings['pairs']} interleaved pairs"
    )
    return [provenance(result, reps), "", *table(["setting", "median step", "run, start to end"], rows)]


def _ratio(d: dict[str, float] | None) -> str:
    return f"{d['median']:.2f}x ({d['lo']:.2f}-{d['hi']:.2f})" if d else "-"


def sharded(result: Result) -> list[str]:
    """Memory per worker and step time of each ZeRO stage against allreduce, at each worker count."""
    s = result["settings"]
    rows = [
        [str(r["workers"]), r["subject"], f"{r['memory_mib']:.0f}", _ratio(r["memory_vs_allreduce"]),
         f"<= {r['memory_goal']:.2f}x: **{r['memory_verdict']}**" if r["memory_goal"] else "",
         f"{r['median_step_s'] * 1000:.0f}", _ratio(r["step_vs_allreduce"]), r["step_verdict"]]
        for r in result["rows"]
    ]  # fmt: skip
    reps = (f"{s['repeats']} repetitions of every subject, interleaved in an order that rotates; {s['example']}, "
            f"{s['optimizer']}, batch {s['batch_per_worker']} per worker, {s['steps']} steps; intervals are 95 % "
            "bootstrap intervals of the ratio of medians")  # fmt: skip
    head = ["workers", "subject", "memory / worker (MiB)", "vs allreduce", "goal (stage 3: 1/N + 15 %)",
            "step (ms)", "vs allreduce", "step time"]  # fmt: skip
    return [provenance(result, reps), "", *table(head, rows)]


def pipeline(result: Result) -> list[str]:
    """The measured bubble against GPipe's formula for each stage and micro-batch count."""
    s = result["settings"]
    rows = [
        [str(r["stages"]), str(r["micro_batches"]), f"{r['median_step_s'] * 1000:.0f}",
         f"{r['bubble']:.3f} ({r['bubble_range'][0]:.3f}-{r['bubble_range'][1]:.3f})", f"{r['formula']:.3f}",
         f"{r['excess']:+.3f}"]
        for r in result["rows"]
    ]  # fmt: skip
    reps = (f"{s['steps'] - s['warmup_steps']} steps per configuration after {s['warmup_steps']} of warm-up, "
            f"layers of {s['forward_ms']:g} ms forward and {s['backward_ms']:g} ms backward per micro-batch "
            "(sleeps), gloo between stage processes; the bubble's range is over steps")  # fmt: skip
    head = ["stages S", "micro-batches M", "step (ms)", "bubble measured", "(S-1)/(M+S-1)", "measured - formula"]
    return [provenance(result, reps), "", *table(head, rows)]


def diloco(result: Result) -> list[str]:
    """Loss, accuracy and step time of DiLoCo beside local SGD at the same sync period; the wide model's step time."""
    s = result["settings"]

    def cell(d: dict[str, float], fmt: str, scale: float = 1.0) -> str:
        return f"{fmt.format(d['median'] * scale)} ({fmt.format(d['lo'] * scale)}-{fmt.format(d['hi'] * scale)})"

    rows = [
        [r["subject"], cell(r["loss"], "{:.4f}"), r.get("loss_verdict", "-"), cell(r["test_accuracy"], "{:.4f}"),
         cell(r["median_step_s"], "{:.1f}", 1000)]
        for r in result["rows"]
    ]  # fmt: skip
    reps = (f"{s['example']}, {s['workers']} workers x batch {s['batch_per_worker']}, {s['inner']}, {s['steps']} "
            f"steps, {s['reps']} seeds per subject, interleaved in a rotating order; loss: {s['loss']}; median "
            "(min-max) over the seeds; the verdict compares DiLoCo's loss range with local SGD's at the same "
            "period")  # fmt: skip
    head = ["subject", "loss", "vs local SGD, same period", "test accuracy", "step (ms)"]
    out = [provenance(result, reps), "", *table(head, rows)]
    wide = result.get("wide_mlp", {})
    if "diloco_vs_local_sgd" in wide:
        w, r = wide["settings"], wide["diloco_vs_local_sgd"]
        out += ["", f"Step time where communication counts (wide-mlp, {w['workers']} workers, {w['steps']} steps, "
                f"period {w['period']}): DiLoCo / local SGD {r['median']:.3f}x ({r['lo']:.3f}-{r['hi']:.3f}, 95 % "
                f"bootstrap interval over {r['n']} pairs run back to back): **{wide['verdict']}**."]  # fmt: skip
    return out


def gang_backends(result: Result) -> list[str]:
    """Capacity freed -> the next gang Running, per way of admitting gangs."""
    s = result["settings"]
    rows = []
    for name, label in (("gates", "operator's own gate"), ("kueue", "Kueue v0.17 (+ the gate)"),
                        ("workload-api", "Workload API (kube-scheduler)")):  # fmt: skip
        b = result["backends"].get(name)
        if b is None:
            continue
        sec, vs = b["seconds"], b.get("vs_gates")
        ratio = f"{vs['median']:.2f}x ({vs['lo']:.2f}-{vs['hi']:.2f}x)" if vs else ""
        rows.append([label, str(sec["n"]), f"{sec['median']:.2f} ({sec['lo']:.2f}-{sec['hi']:.2f})", ratio,
                     b.get("verdict", "")])  # fmt: skip
    reps = (f"{s['jobs']} jobs of {s['workers_per_job']} workers x 1 GPU queued on 4 kwok nodes of 4 GPUs "
            f"({s['jobs_at_once']} run at once), {s['frees_per_round']} frees per backend in each of {s['rounds']} "
            "rounds, backends in rotating order")  # fmt: skip
    head = ["backend", "frees", "freed -> next gang Running, s (range)", "vs own gate", "verdict"]
    return [provenance(result, reps), "", *table(head, rows)]


def topology(result: Result) -> list[str]:
    """Racks per gang with no placement, Preferred and Required."""
    s = result["settings"]
    rows = []
    for mode, m in result["modes"].items():
        share = m["multi_pod_one_domain_share"]
        rows.append([mode, str(m["gangs"]), f"{m['domains_median']:g}", f"{m['domains_mean']:.2f}",
                     f"{share * 100:.0f} %" if share is not None else "", str(m["waited"])])  # fmt: skip
    reps = (f"{s['racks']} racks x {s['nodes_per_rack']} kwok nodes x {s['gpus_per_node']} GPUs; the gang sequence "
            f"{s['gangs']} (pods of {s['gpus_per_pod']} GPUs) per mode, {s['reps']} repetitions, modes in rotating "
            "order")  # fmt: skip
    head = ["placement", "gangs", "racks per gang (median)", "mean", "multi-pod gangs in one rack", "waited"]
    return [provenance(result, reps), "", *table(head, rows)]


def elastic_admission(result: Result) -> list[str]:
    """An elastic job's start and its time to full size on a 3/4-full cluster, waiting for all vs auto-elastic."""
    s = result["settings"]
    rows = []
    for mode, m in result["modes"].items():
        cells = [mode, str(m["start_s"]["n"])]
        for metric in ("start", "full_size"):
            sec, vs = m[f"{metric}_s"], m.get(f"{metric}_vs_fixed")
            ratio = f"{vs['median']:.3g}x ({vs['lo']:.3g}-{vs['hi']:.3g})" if vs else ""
            cells += [f"{sec['median']:.2f} ({sec['lo']:.2f}-{sec['hi']:.2f})",
                      f"{ratio} {m.get(f'{metric}_verdict', '')}" if vs else ""]  # fmt: skip
        rows.append(cells)
    reps = (f"kwok nodes {s['fake_nodes']}; a filler of {s['filler']} ends {s['filler_ends_after_s']:g} s after the "
            f"subject ({s['subject']}) is created; auto-elastic: {s['auto_elastic']}; {s['reps']} repetitions, modes "
            "in rotating order; nothing trains on kwok nodes (the steps a growth re-does are not counted)")  # fmt: skip
    head = ["mode", "runs", "created -> first worker Running, s", "vs fixed", "created -> full size Running, s",
            "vs fixed"]  # fmt: skip
    return [provenance(result, reps), "", *table(head, rows)]


# Issue 29's goals, judged at the largest one-job point: (figure, goal, what it says)
SCALE_GOALS = [
    ("object_bytes", 100.0, "object <= 100 KB"),
    ("idle_cpu_s_per_min", 0.6, "idle <= 0.6 CPU-s a minute (first minute)"),
    ("late_idle_cpu_s_per_min", 0.6, "idle <= 0.6 CPU-s a minute (late window: when, the settings say)"),
    ("running_vs_floor", 1.15, "all Running <= 1.15x the floor"),
    ("cpu_ms_per_pod", 3.0, "operator CPU to all Running <= 3 ms a pod"),
    ("peak_rss_mb", 250.0, "peak RSS <= 250 MB"),
]
SCALE_COLUMNS = [
    ("created_s", "created (s)", "{:.1f}"), ("running_s", "all Running (s)", "{:.1f}"),
    ("cpu_ms_per_pod", "CPU to Running (ms/pod)", "{:.2f}"), ("idle_cpu_s_per_min", "idle CPU (s/min)", "{:.2f}"),
    ("late_idle_cpu_s_per_min", "late idle CPU (s/min)", "{:.2f}"),
    ("peak_rss_mb", "peak RSS (MB)", "{:.0f}"), ("object_bytes", "object (KB)", "{:.0f}"),
    ("status_bytes", "status (KB)", "{:.1f}"), ("requests_per_pod", "requests / pod", "{:.2f}"),
    ("cluster_cpu_s", "control plane CPU (s)", "{:.0f}"),
    ("cluster_cpu_by_component_s.kube-controller-manager", "of it kube-controller-manager (s)", "{:.0f}"),
]  # fmt: skip


def scale_figures(runs: list[dict[str, Any]], key: str) -> list[float]:
    """The runs' values of a SCALE_COLUMNS key (bytes in KB; `a.b`: field b of the run's dict a), of the runs
    that recorded it."""
    field, _, part = key.partition(".")
    values = [r[field].get(part) if part else r[field] for r in runs if field in r]
    return [v / (1024 if key.endswith("_bytes") else 1) for v in values if v is not None]


FLOOR, PEER = "floor", cp.PEER  # the scale benchmark's subjects besides Ringleader's


def scale(result: Result) -> list[str]:
    """Per point (jobs x workers) and subject, the medians (min-max) of each figure, all Running against the
    floor's with its 95 % bootstrap interval, the runs that saw a node flap; then issue 29's goals at the largest
    one-job point, judged on the intervals."""
    runs = result["runs"]
    points = point_order({(r["jobs"], r["workers"]) for r in runs})
    subjects = list(dict.fromkeys(r["subject"] for r in runs))
    rows, figures = [], {}
    for jobs, workers in points:
        here = [r for r in runs if (r["jobs"], r["workers"]) == (jobs, workers)]
        floor = [r["running_s"] for r in here if r["subject"] == FLOOR]
        peer = [r for r in here if r["subject"] == PEER]
        for subject in subjects:
            mine = [r for r in here if r["subject"] == subject]
            if not mine:
                continue
            cells = [f"{jobs} x {workers}", subject, str(len(mine))]
            for key, _, fmt in SCALE_COLUMNS:
                values = scale_figures(mine, key)
                cells.append(spread(values).text(fmt) if values else "")
            vs = ratio_interval([r["running_s"] for r in mine], floor) if subject != FLOOR else None
            cells.append(f"{vs.text('{:.2f}', 'x')} {time_verdict(vs)}" if vs else "")
            cells.append(_against_peer(mine, peer) if subject not in (FLOOR, PEER) else "")
            cells.append(str(sum(r.get("node_flaps", 0) for r in mine)))
            rows.append(cells)
            if subject.split("/")[0] == "ringleader":  # ringleader/gates: the gate backend's file
                figures[(jobs, workers)] = (mine, vs)
    head = ["point", "subject", "runs", *(title for _, title, _ in SCALE_COLUMNS), "Running vs floor",
            "vs training-operator: Running; CPU a pod", "node flaps"]  # fmt: skip
    reps = "the runs of each row in its `runs` column, the subjects of a point in rotating order; median (min-max)"
    out = [provenance(result, reps), "", "Settings (printed by the benchmark before its runs):", ""]
    out += [f"- {line}" for line in result.get("settings", [])]
    out += ["", *table(head, rows)]
    single = [p for p in figures if p[0] == 1]
    if single:
        largest = max(single, key=lambda p: p[1])
        out += ["", f"Goals of issue 29 at one job of {largest[1]} workers (judged on the range of the runs):", ""]
        out += _judged(*figures[largest], SCALE_GOALS)
        out += _flatness(figures, single)
    for jobs, workers in (p for p in figures if p[0] > 1):
        out += ["", f"Goals of issue 29 at {jobs} jobs of {workers} workers:", ""]
        out += _judged(*figures[(jobs, workers)], [g for g in SCALE_GOALS if "idle" in g[0]])
    return out


def _against_peer(mine: list[dict[str, Any]], peer: list[dict[str, Any]]) -> str:
    """The subject's all Running and CPU a pod against the training-operator's at the same point: ratios with
    their intervals and verdicts (lower is better for both)."""
    parts = []
    for key in ("running_s", "cpu_ms_per_pod"):
        vs = ratio_interval([r[key] for r in mine if key in r], [r[key] for r in peer if key in r])
        parts.append(f"{vs.text('{:.2f}', 'x')} {time_verdict(vs)}" if vs else "")
    return "; ".join(parts) if any(parts) else ""


def _flatness(figures: dict[tuple[int, int], Any], single: list[tuple[int, int]]) -> list[str]:
    """Whether the operator's CPU a pod stays flat in n: its ratio at the largest one-job point to the smallest,
    flat when the interval reaches 1 or below (a cost linear in n, or less), growing when it lies above 1."""
    if len(single) < 2:
        return []
    small, large = min(single, key=lambda p: p[1]), max(single, key=lambda p: p[1])
    cpu = [[r["cpu_ms_per_pod"] for r in figures[p][0] if "cpu_ms_per_pod" in r] for p in (large, small)]
    vs = ratio_interval(cpu[0], cpu[1])
    if vs is None:
        return []
    verdict = "grows with n" if vs.lo > 1 else "flat"
    return [f"- operator CPU a pod at {large[1]} workers against at {small[1]}: {vs.text('{:.3g}', 'x')}: "
            f"**{verdict}**"]  # fmt: skip


def _judged(mine: list[dict[str, Any]], vs: Interval | None, goals: list[tuple[str, float, str]]) -> list[str]:
    """One line per goal: the runs' interval of its figure against it (`vs`: all Running against the floor)."""
    lines = []
    for key, goal, says in goals:
        if key == "running_vs_floor":
            interval = vs
        else:
            values = scale_figures(mine, key)
            interval = spread(values) if values else None
        if interval is None:
            lines.append(f"- {says}: not measured")
            continue
        lines.append(f"- {says}: {interval.text('{:.3g}')}: **{at_most(interval, goal).value}**")
    return lines


SECTIONS: list[tuple[str, str, str, Callable[[Result], list[str]]]] = [
    ("control-plane", "Control plane: Ringleader vs Kubeflow's training-operator", "make bench-cluster", control_plane),
    (
        "scale-gates",
        "Scale: one job of thousands of ranks, and a thousand small jobs (the operator's own gang gate, as on "
        "clusters that do not serve the Workload API)",
        "make bench-scale",
        scale,
    ),
    (
        "scale-gates-others",
        "Scale beside pods of other workloads (the operators cache every pod of the cluster; own gang gate)",
        "python -m bench.scale_bench --gang-backend gates --other-pods 20000",
        scale,
    ),
    (
        "scale-services",
        "Scale: what a headless Service over every rank costs the control plane (the floor against the floor whose "
        "Service selects worker 0 alone)",
        "python -m bench.scale_bench --subjects floor floor/worker-0-named --small-jobs 0",
        scale,
    ),
    (
        "scale",
        "Scale with the Workload API gang backend (the default, auto, on the dev cluster, which serves it)",
        "python -m bench.scale_bench",
        scale,
    ),
    ("allreduce", "Data plane: allreduce bus bandwidth, our ring vs gloo", "make bench-trainer", allreduce),
    ("strategies", "Data plane: step time per strategy (~25M-parameter wide MLP)", "make bench-trainer", strategies),
    ("recovery", "Recovery: SIGKILL of a worker to the next step at full strength", "make bench-cluster", recovery),
    (
        "goodput",
        "Goodput under repeated failures: checkpoint recovery, healing, healing short of a rank, torchft",
        "python -m bench.goodput_bench",
        goodput,
    ),
    (
        "goodput-wide-mlp",
        "Goodput under repeated failures, the ~25M-parameter wide MLP",
        "python -m bench.goodput_bench --model wide-mlp",
        goodput,
    ),
    (
        "recovery_nodes",
        "Recovery per node kind: process node vs real node (containers, trainer image)",
        "python -m bench.recovery_bench --cases allreduce --nodes process real",
        recovery_nodes,
    ),
    (
        "omp_threads",
        "Data plane: ranks sharing a node's cores, with and without the OMP_NUM_THREADS the operator writes",
        "make bench-trainer",
        omp_threads,
    ),
    ("checkpoint", "Checkpoint overhead at the default interval", "make bench-trainer", checkpoint),
    ("stop", "Stopping on SIGTERM: steps lost and the time a stop takes", "make bench-trainer", stop),
    (
        "stall_hang",
        "Stalls: a hung rank to the job's Stalled condition",
        "python -m bench.stall_bench hang",
        stall_hang,
    ),
    (
        "stall_export",
        "Stalls: what each rank's step and exchange stamps cost a step",
        "python -m bench.stall_bench export",
        stall_export,
    ),
    (
        "stall_recorder",
        "Stalls: what reading torch's flight recorder costs a rank's page",
        "python -m bench.stall_bench recorder",
        stall_recorder,
    ),
    ("launchers", "Launchers: job creation to every rank past init_process_group", "make bench-cluster", launchers),
    ("devcluster", "Dev cluster: start, and pod start per node kind", "make bench-cluster", devcluster),
    (
        "image_rebuild",
        "Trainer image: a one-line code change to a pod running it on the real node",
        "make bench-cluster",
        image_rebuild,
    ),
    ("gpu", "One GPU: step time per strategy, and our ring on CUDA tensors", "python -m bench.gpu_bench", gpu),
    ("gpu_tier", "One GPU: the GPU tier's last run", "tests/gpu_tier.sh on a lent GPU", gpu_tier),
    (
        "sharded",
        "Sharding: memory per worker and step time, ZeRO stages 1-3 vs allreduce",
        "make bench-trainer",
        sharded,
    ),
    ("pipeline", "Pipeline: GPipe's bubble against micro-batches", "make bench-trainer", pipeline),
    (
        "diloco",
        "DiLoCo beside local SGD: loss after a fixed number of steps, and step time",
        "make bench-trainer",
        diloco,
    ),
    (
        "gang_backends",
        "Gang admission backends: capacity freed to the next gang Running",
        "make bench-cluster",
        gang_backends,
    ),
    ("topology", "Topology-aware placement: racks per gang", "make bench-cluster", topology),
    (
        "elastic_admission",
        "Auto-elastic admission: an elastic job's start on a 3/4-full cluster",
        "make bench-cluster",
        elastic_admission,
    ),
]


def render(results: dict[str, Result]) -> str:
    out = [
        "# Benchmarks",
        "",
        "Generated by `python -m bench.report` (the last step of `make bench`) from `bench/results/*.json`, which",
        "hold every repetition. How each figure is measured: [docs/benchmarks.md](docs/benchmarks.md). Absolute",
        "times come from a shared 2-core machine and are context only; the ratios are measured in the same run.",
        "Plots: `bench/plots/`.",
    ]
    for name, title, target, section in SECTIONS:
        out += ["", f"## {title}", ""]
        out += section(results[name]) if name in results else [f"Not measured yet: run `{target}`."]
    return "\n".join(out) + "\n"


def load(directory: Path) -> dict[str, Result]:
    """Every <name>.json of `directory` by name."""
    return {p.stem: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def write(results: dict[str, Result], report: Path, plots: Path) -> list[Path]:
    """The report and a plot per result that has one; returns what was written."""
    report.write_text(render(results))
    plots.mkdir(parents=True, exist_ok=True)
    written = [report]
    for name, plotter in PLOTTERS.items():
        if name in results:
            plotter(results[name], plots / f"{name}.png")
            written.append(plots / f"{name}.png")
    return written


def main() -> None:
    for path in write(load(RESULTS), REPORT, PLOTS):
        print(f"[bench] wrote {path.relative_to(REPO_ROOT)}", flush=True)


if __name__ == "__main__":
    main()
