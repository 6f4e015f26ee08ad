"""The operator from this checkout, run against the dev cluster in the background (the integration tests' and
the benchmarks' operator): start, stop, find and kill it."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

from .commands import ClusterError, api_ready, ensure_port_free, helm, kubectl, say
from .layout import DEVCLUSTER_DIR, PACKAGE_DIR, Layout
from .pids import pid_from, spawn, stop_pidfile, wait_gone, wait_ready

OPERATOR_METRICS_PORT = 18080
CHART_RELEASE, CHART_NAMESPACE = "ringleader", "ringleader-system"  # where `make demo` installs the chart
OPERATOR_HEALTH_PORT = 18081


def operator_up(gang_backend: str = "gates") -> None:
    """Install the CRD and run the operator from this checkout against the dev cluster, in the background
    (log: .dev/operator/operator.log). Idempotent; one running with another `gang_backend` is restarted. The dev
    cluster serves Kubernetes' Workload API, which the operator would use for gangs on its own (--gang-backend
    auto): its tests ask for the operator's own gate unless they test the Workload API."""
    layout = Layout.from_env()
    if not api_ready(layout):
        raise ClusterError("the dev cluster is not running: run 'make dev-cluster' first")
    crds = DEVCLUSTER_DIR.parent / "crds"
    kubectl(layout, "apply", "-f", str(crds / "trainingjob.yaml"), "-f", str(crds / "kopf-peering.yaml"))
    kubectl(
        layout, "wait", "--for=condition=Established", "crd/trainingjobs.ringleader.dev",
        "crd/clusterkopfpeerings.kopf.dev", "--timeout=30s", timeout=40,
    )  # fmt: skip
    kubectl(layout, "apply", "-f", str(PACKAGE_DIR / "peering.yaml"))
    pidfile = _operator_pidfile(layout)
    backend_file = layout.operator_dir / "gang-backend"
    if pid_from(pidfile):
        if (backend_file.read_text() if backend_file.exists() else "gates") == gang_backend:
            say("operator already running")
            return
        operator_down()
    if helm(layout, "status", CHART_RELEASE, "--namespace", CHART_NAMESPACE, check=False).returncode == 0:
        say(f"uninstalling the helm release {CHART_RELEASE} ('make demo'): one operator acts on the jobs at a time")
        helm(layout, "uninstall", CHART_RELEASE, "--namespace", CHART_NAMESPACE, "--wait", timeout=180)
    for port in (OPERATOR_METRICS_PORT, OPERATOR_HEALTH_PORT):
        ensure_port_free(port, "operator metrics/health", "0.0.0.0")
    layout.operator_dir.mkdir(parents=True, exist_ok=True)
    log = layout.operator_dir / "operator.log"
    argv = [
        sys.executable,
        "-m",
        "ringleader_operator",
        "--metrics-port",
        str(OPERATOR_METRICS_PORT),
        "--health-port",
        str(OPERATOR_HEALTH_PORT),
        "--gang-backend",
        gang_backend,
    ]
    env = {**os.environ, "KUBECONFIG": str(layout.kubeconfig)}
    pid = spawn(argv, pidfile, log, env)
    backend_file.write_text(gang_backend)
    wait_ready("the operator", lambda: _listening(OPERATOR_HEALTH_PORT), pid, log, 30, ClusterError)
    say(f"operator running (pid {pid}, log {log})")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def operator_down() -> None:
    if stop_pidfile(_operator_pidfile(Layout.from_env()), timeout=20):
        say("operator stopped")


def _operator_pidfile(layout: Layout) -> Path:
    return layout.operator_dir / "operator.pid"


def operator_pid() -> int | None:
    """The dev cluster's operator process, if it runs."""
    return pid_from(_operator_pidfile(Layout.from_env()))


def kill_operator(pid: int) -> None:
    """SIGKILL the operator (no clean shutdown, as a crash would be) and wait until it is gone."""
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid, timeout=10)
    _operator_pidfile(Layout.from_env()).unlink(missing_ok=True)
