"""Processes of a pod on the process node, for tests and benchmarks that kill them (chaos)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from .node.network import netns_name


def pod_pids(uid: str, command_contains: str = "") -> list[int]:
    """PIDs in the pod's network namespace whose command line contains `command_contains`."""
    out = subprocess.run(["ip", "netns", "pids", netns_name(uid)], check=False, capture_output=True, text=True)
    pids = []
    for pid in (int(p) for p in out.stdout.split()):
        try:
            if command_contains in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                pids.append(pid)
        except FileNotFoundError:  # exited meanwhile
            continue
    return pids


def kill_pod_processes(uid: str, command_contains: str, sig: int = signal.SIGKILL) -> int:
    """Signal the pod's matching processes; returns how many were signalled."""
    pids = pod_pids(uid, command_contains)
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
    return len(pids)
