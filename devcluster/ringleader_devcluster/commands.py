"""The dev cluster's commands: one error type with one-line messages, progress lines, running a tool with a
deadline (kubectl, helm, kwokctl), the preflight checks, and waiting for a port to be free."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from .layout import DEVCLUSTER_DIR, Layout

READY_TIMEOUT = 90.0


class ClusterError(Exception):
    """One line for the user: what is wrong and what to do."""


def say(msg: str, t0: float | None = None, prefix: str = "dev-cluster") -> None:
    suffix = f" ({time.monotonic() - t0:.1f}s)" if t0 is not None else ""
    print(f"[{prefix}] {msg}{suffix}", flush=True)


def run_command(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 300, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command with a deadline; output is captured through a file, not a pipe, because components
    that kwokctl starts inherit its stdout and would keep a pipe open (and us waiting) forever."""
    try:
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.run(
                argv, env=env, timeout=timeout, text=True, stdin=subprocess.DEVNULL, stdout=out, stderr=out, check=False
            )
            out.seek(0)
            res = subprocess.CompletedProcess(argv, proc.returncode, out.read(), "")
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} did not finish within {timeout:.0f}s") from e
    except FileNotFoundError as e:
        raise ClusterError(f"{argv[0]} not found: run 'make dev-cluster' to build it") from e
    if check and res.returncode != 0:
        detail = ((res.stderr or "") + (res.stdout or "")).strip().splitlines()
        last = detail[-1] if detail else f"exit code {res.returncode}"
        raise ClusterError(f"{Path(argv[0]).name} {' '.join(argv[1:3])} failed: {last}")
    return res


def preflight(layout: Layout) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            "the process node needs root (network namespaces, bind mounts): run as root, e.g. sudo make dev-cluster"
        )
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("setpriv", "util-linux"), ("mount", "mount")):
        if shutil.which(tool) is None:
            raise ClusterError(f"'{tool}' is missing: install it (apt-get install {pkg}) and run again")
    missing = [
        n
        for n in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwokctl", "kubectl")
        if not layout.binary(n).exists()
    ]
    if missing:
        raise ClusterError(
            f"binaries missing from {layout.cache}: {', '.join(missing)}; run devcluster/build-binaries.sh"
        )


def build_binaries(kueue: bool = False, netpol: bool = False) -> None:
    """Build what the dev cluster runs and is missing from the cache; Kueue's manager only with `kueue`,
    kube-router only with `netpol`."""
    flags = [flag for flag, wanted in (("--kueue", kueue), ("--netpol", netpol)) if wanted]
    res = subprocess.run(["bash", str(DEVCLUSTER_DIR / "build-binaries.sh"), *flags], check=False)
    if res.returncode != 0:
        raise ClusterError("building the control-plane binaries failed (see the lines above)")


def kwok_env(layout: Layout) -> dict[str, str]:
    return {**os.environ, "KWOK_WORKDIR": str(layout.kwok_workdir)}


def kubectl(layout: Layout, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run_command(
        [str(layout.binary("kubectl")), "--kubeconfig", str(layout.kubeconfig), "--request-timeout=10s", *args],
        timeout=timeout,
        check=check,
    )


def helm(layout: Layout, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the cached helm against the dev cluster."""
    return run_command(
        [str(layout.binary("helm")), "--kubeconfig", str(layout.kubeconfig), *args], timeout=timeout, check=check
    )


def api_ready(layout: Layout) -> bool:
    if not layout.kubeconfig.exists():
        return False
    return kubectl(layout, "get", "--raw", "/readyz", timeout=15, check=False).returncode == 0


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


PORT_GRACE_SECONDS = 10.0  # a server stopped a moment ago may still be closing its socket


def ensure_port_free(port: int, what: str, host: str = "127.0.0.1", fix: str = "stop what listens there") -> None:
    """Return once `port` can be bound (waiting out a server that is still closing it); else ClusterError
    naming the port, what needs it and, where `ss` can tell, the process that holds it."""
    deadline = time.monotonic() + PORT_GRACE_SECONDS
    while not port_free(port, host):
        if time.monotonic() >= deadline:
            holder = subprocess.run(
                ["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True, check=False, timeout=5
            ).stdout.split()
            held = f" (held by {holder[-1]})" if holder else ""
            raise ClusterError(f"port {port} ({what}) is busy{held}: {fix}")
        time.sleep(0.2)
