"""The dev cluster's daemons by pid: start one with a pid file and a log, wait until it is ready, is one
running, read its pid file, stop it (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .tools import RealNodeError
from .waiting import WaitTimeout, wait_until


def spawn(argv: list[str], pidfile: Path, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start `argv` in its own session, appending its output to `log`, and record its pid in `pidfile`."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, cwd=cwd, start_new_session=True
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def wait_ready(
    what: str, ready: Callable[[], bool], pid: int, log: Path, timeout: float, error: type[Exception] = RealNodeError
) -> None:
    """Wait until the daemon `pid` is `ready()`; fail at once with `error`, quoting the log's last line, when it
    exits, and with `error` after `timeout` seconds."""

    def check() -> bool:
        if ready():
            return True
        if not is_running(pid):
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
            raise error(f"{what} exited: {tail[0] if tail else 'no log'} (log: {log})")
        return False

    try:
        wait_until(f"{what} to be ready", check, timeout, every=0.1)
    except WaitTimeout as e:
        raise error(f"{e} (log: {log})") from None


def is_running(pid: int) -> bool:
    """True while `pid` runs; a zombie (exited, not yet reaped) counts as gone, and our own child is reaped."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def stop_pid(pid: int, timeout: float) -> None:
    """SIGTERM, wait up to `timeout` seconds, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    if wait_gone(pid, timeout):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    wait_gone(pid, 10)  # its sockets are closed only once it is gone


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for `pid` to exit; True once it has."""
    deadline = time.monotonic() + timeout
    while is_running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def stop_pidfile(pidfile: Path, timeout: float) -> bool:
    """Stop the daemon `pidfile` names, if it runs (SIGTERM, then SIGKILL after `timeout` seconds), and remove
    the pid file; True if one was running."""
    pid = pid_from(pidfile)
    if pid:
        stop_pid(pid, timeout)
    pidfile.unlink(missing_ok=True)
    return pid is not None


def pid_from(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return pid if is_running(pid) else None
