"""The dev cluster's daemons by pid: is one running, read its pid file, stop it (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


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


def pid_from(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return pid if is_running(pid) else None
