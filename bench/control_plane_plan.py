"""The control-plane benchmark's plan and its reading, pure: the configurations both operators run at, the order
of the runs, and the medians, intervals and verdicts (bench/control_plane_bench.py does the measuring).

Two configurations, both operators measured in each:
- `defaults`: each operator as it ships (the training-operator's Deployment passes no budget flags; Ringleader's
  chart passes its own defaults).
- `matched`: the same generous client budget for both (QPS, burst), and the training-operator with as many
  controller threads as Ringleader has concurrent rounds for these jobs (one per job; 16 covers the burst's
  client threads). kube-scheduler gets the same budget: at its default (QPS 50, burst 100 for its binds; its
  events have a bucket of their own) it binds about 50 pods a second once its burst is spent, so whichever
  operator creates pods faster than that waits for the scheduler (the peer's 500 x 4 burst, 2000 pods Running in
  43 s, was the scheduler's pace) and the time to all Running measures the scheduler (at 2bcabe5 Ringleader
  created 256 pods in 0.58x the peer's time and had them Running in 1.10x). What is left between them is the
  design, not a setting.

Runs are interleaved: within a scenario every repetition runs each configuration (their order alternating by
repetition), and within a configuration the two operators alternate which goes first (A B, B A, A B, ...), so a
drift of the machine lands on both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ringleader_operator.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from ringleader_operator.reconciler import ROUNDS_AT_ONCE

from bench.stats import Interval, Verdict, at_most, ratio_interval, spread

RINGLEADER, PEER = "ringleader", "training-operator"
OPERATORS = (PEER, RINGLEADER)
METRICS = ("created_s", "running_s", "requests_per_job", "cpu_s", "peak_rss_mb", "cluster_cpu_s")
# The training-operator v1.9.2's own defaults (cmd/training-operator.v1/main.go: --kube-api-qps 20,
# --kube-api-burst 30, --controller-threads 1), which its Deployment keeps.
PEER_DEFAULTS = {"qps": 20, "burst": 30, "threads": 1}
MATCHED = {"qps": 1000, "burst": 2000, "threads": 16}
SCHEDULER_DEFAULTS = (50, 100)  # kube-scheduler's client budget without flags (KubeSchedulerConfiguration)


@dataclass(frozen=True)
class Config:
    """One configuration of both operators: the flags each is started with and the settings the table prints."""

    name: str
    title: str
    args: dict[str, tuple[str, ...]]
    settings: dict[str, dict[str, str]]
    scheduler: tuple[int, int] | None = None  # kube-scheduler's client (QPS, burst); None: its defaults

    def scheduler_setting(self) -> str:
        if self.scheduler is None:
            return f"kube-scheduler at its defaults (client QPS {SCHEDULER_DEFAULTS[0]}, burst {SCHEDULER_DEFAULTS[1]})"
        return f"kube-scheduler: client QPS {self.scheduler[0]}, burst {self.scheduler[1]}"


def _peer_flags(qps: int, burst: int, threads: int) -> tuple[str, ...]:
    return (f"--kube-api-qps={qps}", f"--kube-api-burst={burst}", f"--controller-threads={threads}")


ROUNDS = f"one round per job at a time, rounds of up to {ROUNDS_AT_ONCE} jobs at once"
CONFIGS = {
    "defaults": Config(
        "defaults",
        "each operator at its shipped defaults",
        {PEER: (), RINGLEADER: ()},
        {
            PEER: {
                "qps": str(PEER_DEFAULTS["qps"]),
                "burst": str(PEER_DEFAULTS["burst"]),
                "controller threads": str(PEER_DEFAULTS["threads"]),
            },
            RINGLEADER: {"qps": f"{DEFAULT_QPS:g}", "burst": str(DEFAULT_BURST), "concurrency": ROUNDS},
        },
    ),
    "matched": Config(
        "matched",
        "matched client budgets",
        {
            PEER: _peer_flags(MATCHED["qps"], MATCHED["burst"], MATCHED["threads"]),
            RINGLEADER: (f"--kube-api-qps={MATCHED['qps']}", f"--kube-api-burst={MATCHED['burst']}"),
        },
        {
            PEER: {
                "qps": str(MATCHED["qps"]),
                "burst": str(MATCHED["burst"]),
                "controller threads": str(MATCHED["threads"]),
            },
            RINGLEADER: {"qps": str(MATCHED["qps"]), "burst": str(MATCHED["burst"]), "concurrency": ROUNDS},
        },
        scheduler=(MATCHED["qps"], MATCHED["burst"]),
    ),
}


@dataclass(frozen=True)
class Goal:
    """A goal of the benchmark issue, judged at the `matched` configuration: the ratio Ringleader / peer of
    `metric` at most `limit` (scenario None: every scenario), or, with `absolute`, Ringleader's own figure."""

    metric: str
    limit: float
    scenario: tuple[int, int] | None = None
    absolute: bool = False
    config: str = "matched"


METRIC_LABELS = {
    "created_s": "time to all pods created (s)",
    "running_s": "time to all pods Running (s)",
    "requests_per_job": "API requests per job",
    "cpu_s": "operator CPU (s)",
    "peak_rss_mb": "operator peak RSS (MB)",
    "cluster_cpu_s": "control plane CPU (s)",
}
GOALS = (
    Goal("running_s", 1.0, (1, 8)),
    Goal("running_s", 0.5, (1, 64)),
    Goal("running_s", 0.5, (1, 256)),
    Goal("running_s", 0.5, (500, 4)),
    Goal("cpu_s", 2.0),
    Goal("peak_rss_mb", 160.0, (500, 4), absolute=True),
)


def scenario_name(jobs: int, workers: int) -> str:
    return f"{jobs} jobs x {workers} workers" if jobs > 1 else f"1 job x {workers} workers"


@dataclass(frozen=True)
class Planned:
    jobs: int
    workers: int
    rep: int
    config: str
    operator: str


def schedule(
    scenarios: Sequence[tuple[int, int]],
    reps: Callable[[int, int], int],
    configs: Sequence[str],
    operators: Sequence[str] = OPERATORS,
) -> list[Planned]:
    """Every run in order: scenario by scenario; per repetition each configuration (order alternating by
    repetition); per configuration each operator, the first alternating from pair to pair (A B B A ...)."""
    out: list[Planned] = []
    pair = 0
    for jobs, workers in scenarios:
        for rep in range(reps(jobs, workers)):
            for config in configs if rep % 2 == 0 else list(reversed(configs)):
                order = operators if pair % 2 == 0 else list(reversed(operators))
                out += [Planned(jobs, workers, rep, config, op) for op in order]
                pair += 1
    return out


@dataclass
class Row:
    """One configuration and scenario: each operator's medians and ranges, the ratio's bootstrap interval."""

    config: str
    jobs: int
    workers: int
    operators: dict[str, dict[str, Interval]] = field(default_factory=dict)
    ratio: dict[str, Interval] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "jobs": self.jobs,
            "workers": self.workers,
            **{op: {m: i.as_dict() for m, i in ms.items()} for op, ms in self.operators.items()},
            "ratio": {m: i.as_dict() for m, i in self.ratio.items()},
        }


def interval_of(d: dict[str, Any]) -> Interval:
    return Interval(d["median"], d["lo"], d["hi"], int(d["n"]))


def row_from(d: dict[str, Any]) -> Row:
    """A row as written to the result file, read back (the report works from the file alone)."""
    ops = {op: {m: interval_of(v) for m, v in d[op].items()} for op in OPERATORS if op in d}
    return Row(d["config"], d["jobs"], d["workers"], ops, {m: interval_of(v) for m, v in d["ratio"].items()})


def values(runs: Sequence[dict[str, Any]], metric: str) -> list[float]:
    """The metric over the runs that measured it (a run records null for a figure it could not take, saying why
    in `not_counted`)."""
    return [r[metric] for r in runs if r.get(metric) is not None]


def compare(runs: Sequence[dict[str, Any]]) -> list[Row]:
    """Per configuration and scenario: each operator's median and min-max per metric, and Ringleader / peer as
    a ratio of medians with its bootstrap interval."""
    rows = []
    keys = dict.fromkeys((r["config"], r["jobs"], r["workers"]) for r in runs)
    for config, jobs, workers in keys:
        row = Row(config, jobs, workers)
        mine = {op: [r for r in runs if (r["config"], r["jobs"], r["workers"], r["operator"]) ==
                     (config, jobs, workers, op)] for op in OPERATORS}  # fmt: skip
        for op, its in mine.items():
            if its:
                row.operators[op] = {m: spread(values(its, m)) for m in METRICS if values(its, m)}
        for m in METRICS:
            ratio = ratio_interval(values(mine[RINGLEADER], m), values(mine[PEER], m))
            if ratio is not None:
                row.ratio[m] = ratio
        rows.append(row)
    return sorted(rows, key=lambda r: (list(CONFIGS).index(r.config) if r.config in CONFIGS else 99, r.jobs, r.workers))


@dataclass(frozen=True)
class Judged:
    goal: Goal
    scenario: tuple[int, int]
    interval: Interval | None
    verdict: Verdict | None  # None: not judged (no run of one side)

    def line(self) -> str:
        name = scenario_name(*self.scenario)
        what = METRIC_LABELS[self.goal.metric]
        if self.interval is None or self.verdict is None:
            return f"{name}: {what}: not judged (no runs of both operators at `{self.goal.config}`)"
        if self.goal.absolute:
            return (f"{name}: Ringleader's {what} {self.interval.text('{:.0f}')} (goal <= {self.goal.limit:g}): "
                    f"**{self.verdict.value}**")  # fmt: skip
        return (f"{name}: {what}, Ringleader / training-operator {self.interval.text(unit='x')} "
                f"(goal <= {self.goal.limit:g}x): **{self.verdict.value}**")  # fmt: skip


def judge(rows: Sequence[Row], goals: Sequence[Goal] = GOALS) -> list[Judged]:
    """Each goal against the rows of its configuration: met only when its whole interval (the ratio's bootstrap
    interval, or the min-max of Ringleader's runs for an absolute goal) is inside the limit."""
    out = []
    for goal in goals:
        rows_of = [r for r in rows if r.config == goal.config]
        targets = [(r.jobs, r.workers) for r in rows_of] if goal.scenario is None else [goal.scenario]
        for target in targets:
            row = next((r for r in rows_of if (r.jobs, r.workers) == target), None)
            interval = None
            if row is not None:
                if goal.absolute:
                    interval = row.operators.get(RINGLEADER, {}).get(goal.metric)
                else:
                    interval = row.ratio.get(goal.metric)
            out.append(Judged(goal, target, interval, None if interval is None else at_most(interval, goal.limit)))
    return out


def medians_line(row: Row) -> str:
    """One line of the benchmark's own output per row: both medians of the metrics users wait for."""
    parts = []
    for m, label in (("created_s", "created"), ("running_s", "Running"), ("cpu_s", "CPU")):
        if m in row.ratio:
            parts.append(f"{label} {row.ratio[m].text(unit='x')}")
    return f"[{row.config}] {scenario_name(row.jobs, row.workers)}: Ringleader / training-operator " + ", ".join(parts)


def merge_settings(kept: Sequence[str], new: Sequence[str]) -> list[str]:
    """The header of a result that keeps an earlier invocation's runs (`--keep`): this invocation's lines, then
    the earlier lines of each configuration it did not run (`[name] ...`), so that every configuration in the
    tables still has its settings beside it."""
    mine = {_config_of(line) for line in new}
    return [*new, *(line for line in kept if (c := _config_of(line)) is not None and c not in mine)]


def _config_of(line: str) -> str | None:
    """`matched` for a line `[matched] ...`; None for a line about every configuration."""
    if line.startswith("[") and "] " in line:
        return line[1 : line.index("] ")]
    return None
