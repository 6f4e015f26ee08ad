"""Run a training job as plain processes on this machine: every rank gets the environment the operator would
write (`ringleader_operator.rank_env.rank_env`), with loopback addresses and free ports instead of pod DNS
names. Used by the trainer's tests and by bench/.

The trainer's tests set `PREFORK`: their ranks are then forked from a server that imported torch once
(`tests.support.prefork`); benchmarks keep plain processes, whose start-up they time.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ringleader_api import Role, TrainingJob
from ringleader_operator.rank_env import rank_env, wants_coordinator

from tests.support import prefork
from tests.support.ranks import free_port

PREFORK = False  # set by the trainer tests' conftest
LAUNCHED: list[LocalJob] = []  # every job `launch` started, for a test's teardown to end what still runs


class Process(Protocol):
    """What the tests use of a rank's process: `subprocess.Popen`, or a forked child (`prefork.Forked`)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def kill(self) -> None: ...


def start(command: list[str], env: dict[str, str], out: Path, err: Path) -> Process:
    """`command` with `env`, its output appended to `out` and `err`: forked if `PREFORK` (and the environment
    allows it: `prefork.can_fork`), else a new process."""
    if PREFORK and prefork.can_fork(env):
        return prefork.Forked(command, env, out, err)
    with out.open("ab") as o, err.open("ab") as e:
        return subprocess.Popen(command, env=env, stdout=o, stderr=e)


def children(pid: int) -> list[int]:
    """The processes `pid` started that still run (Linux's /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:  # it has ended
        return []


def descendants(pid: int) -> list[int]:
    """Every process below `pid`, children first."""
    out = children(pid)
    return out + [d for c in out for d in descendants(c)]


def kill_tree(proc: Process) -> None:
    """SIGKILL `proc` and every process below it (stopped ones too), and reap it."""
    for pid in [*descendants(proc.pid), proc.pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


@dataclass
class Rank:
    role: str
    index: int
    proc: Process
    out: Path
    err: Path
    command: list[str]
    env: dict[str, str]

    @property
    def metrics_port(self) -> int:
        """Where this rank serves its metrics page (each rank has its own port, as each pod its own address)."""
        return int(self.env["RINGLEADER_METRICS_PORT"])

    def restart(self) -> None:
        """Start the rank again as its pod's replacement would (same command and environment); its logs go
        on in the same files."""
        if self.proc.poll() is None:
            raise RuntimeError(f"{self.role}-{self.index} is still running")
        self.proc = start(self.command, self.env, self.out, self.err)

    def signal_tree(self, sig: signal.Signals) -> None:
        """Send `sig` to this rank's process and every process below it."""
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            os.kill(pid, sig)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """This rank's processes stopped (SIGSTOP) for the block, and continued after it: a peer waiting on it
        waits (within its exchange timeout), as behind a slow rank."""
        self.signal_tree(signal.SIGSTOP)
        try:
            yield
        finally:
            self.signal_tree(signal.SIGCONT)

    def lose(self) -> Process:
        """Stop this rank's processes (SIGSTOP) as a lost node leaves them, never closing a connection, and start
        its replacement; the stopped process, for the caller to end (`kill_tree`) once the replacement took over."""
        self.signal_tree(signal.SIGSTOP)
        # A new pod has an address of its own; here, a metrics port of its own (the stopped rank holds its own).
        self.env = self.env | {"RINGLEADER_METRICS_PORT": str(free_port())}
        lost, self.proc = self.proc, start(self.command, self.env, self.out, self.err)
        return lost

    @property
    def stdout(self) -> str:
        return self.out.read_text()

    @property
    def stderr(self) -> str:
        return self.err.read_text()

    def last_error(self) -> str:
        """The last non-blank line this rank wrote to stderr ("" if none)."""
        lines = [line for line in self.stderr[-4000:].splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def last_step(self) -> int:
        """The newest step this rank logged on a progress line (0 before its first)."""
        return max((e["step"] for e in self.events() if "step" in e and "event" not in e), default=0)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON lines this rank logged (only those with event `name` if given). Read while the rank runs, its
        last line may be half written: only lines it ended count."""
        text = self.stdout
        lines = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.startswith("{")]
        return [e for e in lines if name is None or e.get("event") == name]


@dataclass
class LocalJob:
    ranks: list[Rank] = field(default_factory=list)
    coordinator: Rank | None = None  # the job's coordinator process, when it has one (`launch`)

    @property
    def workers(self) -> list[Rank]:
        return [r for r in self.ranks if r.role == "worker"]

    @property
    def servers(self) -> list[Rank]:
        return [r for r in self.ranks if r.role == "ps"]

    def wait(self, timeout: float = 300) -> list[int]:
        """Exit codes in rank order; kills everything and fails if any rank outlives `timeout`."""
        deadline = time.monotonic() + timeout
        codes = []
        try:
            for r in self.ranks:
                codes.append(r.proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"ranks still running after {timeout} s:\n{self.logs()}") from None
        self.end_coordinator()
        return codes

    def end_coordinator(self) -> None:
        """Stop the coordinator, as the operator deletes its pod once the job ended."""
        if self.coordinator is not None and self.coordinator.proc.poll() is None:
            self.coordinator.proc.send_signal(signal.SIGTERM)
            try:
                self.coordinator.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill_tree(self.coordinator.proc)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal every rank still running (SIGKILL: with the processes it started) and reap them."""
        for r in self.ranks:
            if r.proc.poll() is None and sig == signal.SIGKILL:
                kill_tree(r.proc)
            elif r.proc.poll() is None:
                r.proc.send_signal(sig)
        for r in self.ranks:
            r.proc.wait()
        if self.coordinator is not None and self.coordinator.proc.poll() is None:
            kill_tree(self.coordinator.proc)

    def logs(self) -> str:
        """Every rank's output tails, after a first line naming the ranks that have ended (their exit codes and
        last stderr lines): pytest's short summary and a CI log's tail show only that first line."""
        every = [*self.ranks, *([self.coordinator] if self.coordinator else [])]
        tails = [f"--- {r.role}-{r.index} (exit {r.proc.poll()})\n{r.stdout[-3000:]}{r.stderr[-3000:]}" for r in every]
        return "\n".join([self.ended(), *tails])

    def ended(self) -> str:
        """One line: each rank that has ended, its exit code and the last line it wrote to stderr."""
        done = [r for r in self.ranks if r.proc.poll() is not None]
        if not done:
            return "no rank has ended"
        return "ended: " + "; ".join(f"{r.role}-{r.index} exit {r.proc.poll()}: {r.last_error()!r}" for r in done)


def job_spec(name: str, strategy: str, workers: int, ps: int = 0, **spec: Any) -> TrainingJob:
    body: dict[str, Any] = {"strategy": strategy, "workers": {"replicas": workers}, **spec}
    if ps:
        body["parameterServers"] = {"replicas": ps}
    return TrainingJob.model_validate({"metadata": {"name": name, "namespace": "local"}, "spec": body})


def launch(
    job: TrainingJob,
    args: list[str],
    logdir: Path,
    env_overrides: dict[str, str] | None = None,
    module: str = "ringleader_trainer",
    only: set[tuple[str, int]] | None = None,
    script: Path | None = None,
    coordinator: bool | None = None,
    silent_after: float | None = None,
) -> LocalJob:
    """Start every rank of `job` (or those in `only`, as (role, index)) as `python -m <module> <args>` (or
    `python <script> <args>`), logs under `logdir`; first, with `coordinator` (by default where the operator runs
    one: rank_env.wants_coordinator), the job's coordinator, which then hosts the rendezvous
    (elastic/coordinator.py), telling a member lost once its pulse stood still `silent_after` seconds (its
    default when None). `env_overrides` set to "" blank a variable out."""
    program = [str(script)] if script else ["-m", module]
    workers = job.spec.workers.replicas
    ps = job.spec.parameter_servers.replicas if job.spec.parameter_servers else 0
    master_port = free_port()
    ps_addrs = ",".join(f"127.0.0.1:{free_port()}" for _ in range(ps))
    local = LocalJob()
    LAUNCHED.append(local)
    logdir.mkdir(parents=True, exist_ok=True)
    token = logdir / "token"  # what the operator's Secret holds, one per job
    if not token.exists():
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
    roles = [(Role.WORKER, i) for i in range(workers)] + [(Role.PS, i) for i in range(ps)]
    shared: dict[str, str] = {"RINGLEADER_RENDEZVOUS": ""}  # none unless started here (the operator's is a name)
    if coordinator if coordinator is not None else wants_coordinator(job):
        shared["RINGLEADER_RENDEZVOUS"] = f"127.0.0.1:{free_port()}"
        env = dict(os.environ) | shared
        command = [sys.executable, "-m", "ringleader_trainer.elastic.coordinator"]
        command += [] if silent_after is None else ["--silent-after", str(silent_after)]
        out, err = logdir / "coordinator.out", logdir / "coordinator.err"
        out.write_bytes(b"")
        err.write_bytes(b"")
        local.coordinator = Rank("coordinator", 0, start(command, env, out, err), out, err, command, env)
    for role, index in roles:
        if only is not None and (role.value, index) not in only:
            continue
        env = dict(os.environ) | rank_env(job, role, index)
        env |= {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(master_port),
            "RINGLEADER_METRICS_PORT": str(free_port()),
            "RINGLEADER_TOKEN_FILE": str(token),
        } | shared
        if ps:
            env["RINGLEADER_PS_ADDRS"] = ps_addrs
        env |= {"OMP_NUM_THREADS": "1"} | (env_overrides or {})  # many ranks share few cores
        out, err = logdir / f"{role.value}-{index}.out", logdir / f"{role.value}-{index}.err"
        command = [sys.executable, *program, *args]
        out.write_bytes(b"")
        err.write_bytes(b"")
        proc = start(command, env, out, err)
        local.ranks.append(Rank(role.value, index, proc, out, err, command, env))
    return local
