"""Containers as processes: start one inside its pod's sandbox, wait for it, stop it gracefully.

Each container runs in its own process group (its own session), so stopping it reaches every process it
forked: SIGTERM to the group, `grace` seconds, then SIGKILL to the group. Output goes to one log file per
run (`<restartCount>.log`), which is what `kubectl logs` and `kubectl logs --previous` read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .podplan import ContainerPlan
from .podstatus import Termination, exit_reason, log_tail_message
from .shim import START_ERROR_EXIT


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool


def launcher_argv(netns: str | None, launch_json: Path) -> list[str]:
    """The command that enters the sandbox and runs the shim: `ip netns exec` gives the pod's network
    namespace plus a private mount namespace with /etc/netns/<ns>/{hosts,resolv.conf} bound over /etc, and
    `unshare --uts` its own hostname; host-network pods keep the node's network and hostname."""
    shim = [sys.executable, "-m", "ringleader_devcluster.node.shim", str(launch_json)]
    if netns:
        return ["ip", "netns", "exec", netns, "unshare", "--uts", *shim]
    return ["unshare", "--mount", "--propagation", "slave", *shim]


def log_path(container_dir: Path, restart_count: int) -> Path:
    return container_dir / "logs" / f"{restart_count}.log"


class ContainerProcess:
    """One run of one container."""

    def __init__(
        self, proc: asyncio.subprocess.Process, started_at: datetime, container_dir: Path,
        logs_on_error: Path | None = None,
    ) -> None:  # fmt: skip
        self.proc = proc
        self.started_at = started_at
        self.container_dir = container_dir
        self.pgid = proc.pid  # session leader: its pid is the group id
        self.logs_on_error = logs_on_error  # the log whose tail is the message of a failed run (FallbackToLogsOnError)

    @classmethod
    async def start(
        cls,
        plan: ContainerPlan,
        env: dict[str, str],
        mounts: list[Mount],
        netns: str | None,
        container_dir: Path,
        restart_count: int,
        hostname: str = "",
    ) -> ContainerProcess:
        container_dir.mkdir(parents=True, exist_ok=True)
        (container_dir / "start-error").unlink(missing_ok=True)
        launch = container_dir / "launch.json"
        launch.write_text(
            json.dumps(
                {
                    "argv": list(plan.argv),
                    "env": env,
                    "workingDir": plan.working_dir,
                    "mounts": [{"source": m.source, "target": m.target, "readOnly": m.read_only} for m in mounts],
                    "runAsUser": plan.run_as_user,
                    "runAsGroup": plan.run_as_group,
                    "hostname": hostname if netns else "",
                }
            )
        )
        launch.chmod(0o600)  # it holds the container's environment, secrets included
        out = log_path(container_dir, restart_count)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("ab") as logf:
            proc = await asyncio.create_subprocess_exec(
                *launcher_argv(netns, launch),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=logf,
                stderr=logf,
                start_new_session=True,
                # Only what the launcher needs to find `ip`, `unshare` and the shim; the container's own
                # environment is applied by the shim at exec.
                env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.environ.get("PYTHONPATH", "")},
            )
        # Recorded so whatever survives a crashed agent can be found and killed (kill_leftovers).
        (container_dir / "pgid").write_text(str(proc.pid))
        return cls(proc, now(), container_dir, out if plan.logs_on_error else None)

    async def wait(self) -> Termination:
        """Wait for the main process; then kill stragglers left in its group (no process outlives its pod)."""
        code = await self.proc.wait()
        self.signal_group(signal.SIGKILL)
        sig = -code if code < 0 else None
        exit_code = 128 + sig if sig is not None else code
        reason, message = exit_reason(exit_code), ""
        err = self.container_dir / "start-error"
        if exit_code == START_ERROR_EXIT and err.exists():
            reason, message = "StartError", err.read_text().strip()
        elif exit_code != 0 and self.logs_on_error is not None and self.logs_on_error.exists():
            message = log_tail_message(self.logs_on_error.read_bytes())
        return Termination(
            exit_code=exit_code,
            reason=reason,
            message=message,
            started_at=self.started_at,
            finished_at=now(),
            signal=sig,
        )

    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    async def stop(self, grace: float) -> None:
        """SIGTERM the group, wait up to `grace` seconds, then SIGKILL it."""
        if not self.running:
            return
        self.signal_group(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.proc.wait()), timeout=max(0.0, grace))
        self.signal_group(signal.SIGKILL)


def kill_leftovers(pods_dir: Path) -> int:
    """SIGKILL the process group of every container recorded under `pods_dir` that still runs (processes a
    killed agent left behind; pods in network namespaces are also caught by the sandbox sweep)."""
    killed = 0
    for f in pods_dir.glob("*/containers/*/pgid"):
        try:
            os.killpg(int(f.read_text()), signal.SIGKILL)
            killed += 1
        except (ValueError, ProcessLookupError, PermissionError):
            pass
        f.unlink(missing_ok=True)
    return killed
