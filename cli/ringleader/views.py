"""What the CLI shows, built from a job's state without I/O: `describe`'s screen, `list`'s table, `watch`'s line.

Rich renderables (tables, styled text) for a terminal; `plain` forms of the same for pipes and logs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from ringleader_api import JobPhase, TrainingJob

from .jobstate import JobState, age, duration, event_time, rank_of_pod
from .logmerge import rank_order

MAX_RANK_ROWS = 20  # describe names this many ranks (those worth naming first); the rest are counted
MAX_EVENTS = 10
PHASE_STYLES: dict[str, str] = {
    JobPhase.SUCCEEDED: "bold green", JobPhase.FAILED: "bold red", JobPhase.RUNNING: "cyan",
    JobPhase.RESTARTING: "yellow", JobPhase.SUSPENDED: "magenta", JobPhase.PENDING: "dim",
}  # by phase_of(job)  # fmt: skip


def progress_line(job: TrainingJob) -> str:
    """`step 120/200 (60%) loss 0.0312 1520 samples/s ETA 40s ready 2/2 restarts 1` (what is known of it)."""
    s = job.status
    parts = []
    if s.progress is not None:
        p = s.progress
        total = f"/{p.total_steps}" if p.total_steps else ""
        percent = f" ({p.percent:.0f}%)" if p.percent is not None else ""
        parts.append(f"step {p.step}{total}{percent}")
        if p.loss is not None:
            parts.append(f"loss {p.loss:.4g}")
        if p.samples_per_second is not None:
            parts.append(f"{p.samples_per_second:.0f} samples/s")
        if p.eta_seconds is not None:
            parts.append(f"ETA {duration(p.eta_seconds)}")
    if s.workers:
        parts.append(f"ready {s.workers}")
    restarts = sum(r.restarts for r in s.replica_statuses.values())
    if restarts:
        parts.append(f"restarts {restarts}")
    return " ".join(parts)


def phase_of(job: TrainingJob) -> str:
    return job.status.phase.value if job.status.phase is not None else "Pending"


def status_line(job: TrainingJob) -> str:
    """`[Running] step 120/200 ...`, with the reason of the newest condition when the job has ended."""
    line = f"[{phase_of(job)}] {progress_line(job)}".rstrip()
    if job.status.phase in (JobPhase.FAILED, JobPhase.SUCCEEDED):
        for c in job.status.conditions:
            if c.type.value == job.status.phase.value and c.status == "True" and c.message:
                line += f": {c.message}"
    return line


def jobs_table(jobs: list[TrainingJob], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NAME", "STRATEGY", "PHASE", "WORKERS", "PROGRESS", "AGE"):
        table.add_column(column)
    for job in sorted(jobs, key=lambda j: j.name):
        progress = job.status.progress
        step = "" if progress is None else (f"{progress.percent:.0f}%" if progress.percent is not None
                                             else f"step {progress.step}")  # fmt: skip
        table.add_row(
            job.name, job.spec.strategy.value, Text(phase_of(job), PHASE_STYLES.get(phase_of(job), "")),
            job.status.workers, step, age(job.metadata.get("creationTimestamp"), now),
        )  # fmt: skip
    return table


def describe(state: JobState, now: datetime) -> RenderableType:
    job = TrainingJob.model_validate(state.job)
    header = Table.grid(padding=(0, 2))
    header.add_column(style="bold")
    header.add_column()
    phase = Text(phase_of(job), PHASE_STYLES.get(phase_of(job), ""))
    header.add_row(
        "Job", Text.assemble(f"{job.name}  ", phase, f"  age {age(job.metadata.get('creationTimestamp'), now)}")
    )
    header.add_row("Namespace", job.namespace)
    ps = job.spec.parameter_servers
    shape = f"{job.spec.workers.replicas} workers" + (f", {ps.replicas} parameter servers" if ps else "")
    gpus = f", {job.spec.workers.gpus} GPU per worker" if job.spec.workers.gpus else ""
    header.add_row("Strategy", f"{job.spec.strategy.value}: {shape}{gpus}")
    header.add_row("Progress", progress_line(job) or "no step yet")
    if job.status.progress is not None and job.status.progress.last_checkpoint_step is not None:
        header.add_row("Checkpoint", f"step {job.status.progress.last_checkpoint_step}")
    g = job.status.goodput
    if g is not None and g.ratio is not None:
        parts = {"productive": g.productive_seconds, "queued": g.queued_seconds, "restarting": g.restarting_seconds,
                 "recomputing": g.recomputing_seconds, "stalled": g.stalled_seconds,
                 "suspended": g.suspended_seconds}  # fmt: skip
        shown = ", ".join(f"{k} {duration(v)}" for k, v in parts.items() if v)
        header.add_row("Goodput", f"{g.ratio:.2f} ({shown})")
    return Group(header, Text(""), conditions_table(job, now), Text(""), ranks_table(state, job),
                 Text(""), events_table(state, now))  # fmt: skip


def conditions_table(job: TrainingJob, now: datetime) -> Table:
    table = Table(title="Conditions", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("TYPE", "STATUS", "REASON", "AGE", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for c in job.status.conditions:
        style = "green" if c.status == "True" else "dim"
        table.add_row(c.type.value, Text(c.status, style), c.reason, age(c.last_transition_time, now), c.message)
    return table


def ranks_table(state: JobState, job: TrainingJob) -> Table:
    """The ranks worth naming first (not running, restarted), then the others, up to MAX_RANK_ROWS."""
    pods = {rank_of_pod(p): p for p in state.pods}
    rows: list[tuple[int, str, list[str]]] = []
    for rank in state.ranks():
        pod = pods.get(rank)
        info = job.status.ranks.get(rank)
        phase = "-" if pod is None else str((pod.get("status") or {}).get("phase", ""))
        node = "" if pod is None else str((pod.get("spec") or {}).get("nodeName", ""))
        restarts = 0 if info is None else info.restarts
        replaced = 0 if info is None else info.attempt
        last = "" if info is None or not info.last_reason else info.last_reason + (
            f" (exit {info.last_exit_code})" if info.last_exit_code is not None else "")  # fmt: skip
        worth = int(phase != "Running") + int(replaced > 0)
        rows.append((worth, rank, [rank, _pod_state(pod), node, str(restarts), str(replaced), last]))
    table = Table(title="Ranks", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("RANK", "POD", "NODE", "RESTARTS", "ATTEMPT", "LAST REPLACED FOR"):
        table.add_column(column)
    chosen = sorted(rows, key=lambda r: (-r[0], rank_order(r[1])))[:MAX_RANK_ROWS]
    for _, _, cells in sorted(chosen, key=lambda r: rank_order(r[1])):
        table.add_row(*cells)
    if len(rows) > MAX_RANK_ROWS:
        table.caption = (
            f"{len(rows) - MAX_RANK_ROWS} more ranks not shown (kubectl get pods -l ringleader.dev/job-name={job.name})"
        )
    return table


def _pod_state(pod: dict[str, Any] | None) -> str:
    """The pod's phase, or what its trainer container waits for (ContainerCreating, ImagePullBackOff, ...)."""
    if pod is None:
        return "-"
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return str(waiting["reason"])
        term = (cs.get("state") or {}).get("terminated") or {}
        if term:
            return f"{term.get('reason', 'Terminated')} ({term.get('exitCode')})"
    return str(status.get("phase", ""))


def events_table(state: JobState, now: datetime) -> Table:
    table = Table(title="Events", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("AGE", "TYPE", "REASON", "OBJECT", "MESSAGE"):
        table.add_column(column, overflow="fold")
    for e in state.events[-MAX_EVENTS:]:
        kind = str(e.get("type", ""))
        obj = (e.get("involvedObject") or {}).get("name", "")
        table.add_row(age(event_time(e), now), Text(kind, "yellow" if kind == "Warning" else ""),
                      str(e.get("reason", "")), obj, str(e.get("message", "")))  # fmt: skip
    return table
