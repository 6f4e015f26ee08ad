"""The plots of BENCHMARKS.md (bench/plots/*.png), drawn from the results' JSON alone (bench/report.py)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from bench import control_plane_plan as cp

Result = dict[str, Any]


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_control_plane(result: Result, path: Path) -> None:
    """All pods created and all Running per scenario: a panel per configuration, bars at the medians, whiskers
    from the fastest to the slowest run."""
    if not result.get("rows") or "config" not in result["rows"][0]:
        return
    rows = [cp.row_from(r) for r in result["rows"]]
    configs = list(dict.fromkeys(r.config for r in rows))
    fig, axes = plt.subplots(len(configs), 2, figsize=(10, 4 * len(configs)), squeeze=False)
    for axrow, config in zip(axes, configs, strict=True):
        mine = [r for r in rows if r.config == config]
        for ax, key, label in zip(axrow, ("created_s", "running_s"), ("all pods created", "all pods Running"),
                                  strict=True):  # fmt: skip
            for i, op in enumerate(cp.OPERATORS):
                have = [(j, r.operators[op][key]) for j, r in enumerate(mine) if op in r.operators]
                xs = [j + (i - 0.5) * 0.38 for j, _ in have]
                mids = [iv.mid for _, iv in have]
                err = [[iv.mid - iv.lo for _, iv in have], [iv.hi - iv.mid for _, iv in have]]
                ax.bar(xs, mids, width=0.38, yerr=err, capsize=3, label=op)
            ax.set_xticks(range(len(mine)), [f"{r.jobs}x{r.workers}" for r in mine])
            ax.set(yscale="log", ylabel="seconds (median, min-max)", xlabel="jobs x workers",
                   title=f"{label} [{config}]")  # fmt: skip
            ax.legend()
    save(fig, path)


def plot_allreduce(result: Result, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ranks in sorted({r["ranks"] for r in result["rows"]}):
        mine = [r for r in result["rows"] if r["ranks"] == ranks]
        for impl, style in (("gloo", "--"), ("ring", "-")):
            ax.plot([r["bytes"] for r in mine], [r[impl]["busbw_GBps"] for r in mine], style, marker="o",
                    label=f"{impl}, {ranks} ranks")  # fmt: skip
    ax.set(xscale="log", xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="allreduce busbw")
    ax.legend()
    save(fig, path)


def plot_strategies(result: Result, path: Path) -> None:
    workers = sorted({r["workers"] for r in result["rows"]})
    configs = list(dict.fromkeys(r["config"] for r in result["rows"]))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(workers))
    for i, w in enumerate(workers):
        by = {r["config"]: r for r in result["rows"] if r["workers"] == w}
        have = [c for c in configs if c in by]
        xs = [j + i * width for j, c in enumerate(configs) if c in by]
        mids = [by[c]["median_step_s"] * 1000 for c in have]
        # Whiskers: the range of the runs' medians where a configuration ran more than once (the paired ones).
        runs = [[m * 1000 for m in by[c].get("run_medians_s") or [by[c]["median_step_s"]]] for c in have]
        err = [[mid - min(r) for mid, r in zip(mids, runs, strict=True)],
               [max(r) - mid for mid, r in zip(mids, runs, strict=True)]]  # fmt: skip
        ax.bar(xs, mids, width=width, yerr=err, capsize=3, label=f"{w} workers")
    ax.set_xticks([j + width * (len(workers) - 1) / 2 for j in range(len(configs))], configs, rotation=20, ha="right")
    ax.set(ylabel="median step time (ms; whiskers: runs' range)", title="step time per strategy, wide MLP")
    ax.legend()
    save(fig, path)


def plot_recovery(result: Result, path: Path) -> None:
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.boxplot([r["recovery_s"] for r in rows], tick_labels=[r["case"] for r in rows])
    ax.axhline(result["goal_s"], color="red", linestyle=":", label=f"goal {result['goal_s']:g} s")
    ax.set(ylabel="seconds from SIGKILL", title="recovery per strategy")
    ax.legend()
    save(fig, path)


# The scale plot's panels: (figure, its label); CPU per pod flat in n means the operator's cost is linear.
SCALE_PANELS = [
    ("running_s", "all Running (s)"),
    ("cpu_ms_per_pod", "operator CPU to Running (ms a pod)"),
    ("idle_cpu_s_per_min", "idle CPU (s a minute)"),
    ("peak_rss_mb", "peak RSS (MB)"),
    ("cluster_cpu_ms_per_pod", "control plane CPU in the run (ms a pod)"),
    ("object_kb", "job object (KB)"),
]


def scale_figure(run: Result, key: str) -> float | None:
    """A run's figure `key`, with the two the plot derives: the control plane's CPU (API server, etcd, scheduler,
    controller manager, kwok) per pod of the run, and the object's size in KB."""
    if key == "cluster_cpu_ms_per_pod":
        cpu = run.get("cluster_cpu_s")
        return None if cpu is None else 1000.0 * cpu / (run["jobs"] * run["workers"])
    if key == "object_kb":
        size = run.get("object_bytes")
        return None if size is None else size / 1024
    value = run.get(key)
    return None if value is None else float(value)


def plot_scale(result: Result, path: Path) -> None:
    """One job of n workers: each figure against n per subject, the median with whiskers from the lowest to the
    highest run, both axes logarithmic (a line of slope 0 in ms a pod is a cost linear in n)."""
    runs = [r for r in result.get("runs", []) if r["jobs"] == 1]
    if not runs:
        return
    fig, axes = plt.subplots(3, 2, figsize=(10, 11), squeeze=False)
    subjects = list(dict.fromkeys(r["subject"] for r in runs))
    colors = {s: f"C{i}" for i, s in enumerate(subjects)}  # a subject's colour is the same in every panel
    for ax, (key, label) in zip(axes.flat, SCALE_PANELS, strict=True):
        for subject in subjects:
            by_n: dict[int, list[float]] = {}
            for r in runs:
                value = scale_figure(r, key) if r["subject"] == subject else None
                if value is not None:
                    by_n.setdefault(r["workers"], []).append(value)
            if not by_n:
                continue
            ns = sorted(by_n)
            mids = [statistics.median(by_n[n]) for n in ns]
            err = [[m - min(by_n[n]) for n, m in zip(ns, mids, strict=True)],
                   [max(by_n[n]) - m for n, m in zip(ns, mids, strict=True)]]  # fmt: skip
            ax.errorbar(ns, mids, yerr=err, marker="o", capsize=3, label=subject, color=colors[subject])
        ax.set(xscale="log", yscale="log", xlabel="workers in one job", ylabel=label, title=label)
        ax.legend()
    save(fig, path)


PLOTTERS: dict[str, Callable[[Result, Path], None]] = {
    "scale-gates": plot_scale,
    "scale": plot_scale,
    "control-plane": plot_control_plane,
    "allreduce": plot_allreduce,
    "strategies": plot_strategies,
    "recovery": plot_recovery,
}
