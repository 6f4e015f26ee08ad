"""What every benchmark shares: bench.record's summaries and result files, throwaway namespaces, a process's CPU
and peak memory, applying manifests and starting the compared systems' processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, config
from ringleader_devcluster import cluster, operatorprocess
from ringleader_devcluster.commands import kubectl
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.waiting import WaitTimeout, wait_until

T = TypeVar("T")


def bench_wait(what: str, check: Callable[[], T | None], timeout: float, every: float = 0.2) -> T:
    """`waiting.wait_until`, ending the benchmark with a one-line message on a timeout."""
    try:
        return wait_until(what, check, timeout, every)
    except WaitTimeout as e:
        raise SystemExit(f"bench: {e}") from None


def kwok_bench_cluster() -> tuple[client.CoreV1Api, client.CustomObjectsApi, str]:
    """The dev cluster for a benchmark on kwok fake nodes (started if needed, no real node) with its operator on
    its own gang gate: API clients, and a fresh pool name for the benchmark's nodes (label ringleader.dev/pool)."""
    layout = Layout.from_env()
    cluster.up(None, 8, 1, real_node=False)
    operatorprocess.operator_up(gang_backend="gates")
    config.load_kube_config(str(layout.kubeconfig))
    return client.CoreV1Api(), client.CustomObjectsApi(), f"bench-{uuid.uuid4().hex[:6]}"


def new_namespace(core: client.CoreV1Api, prefix: str = "bench") -> str:
    """A fresh namespace, returned once its default service account exists (pods are refused before)."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    bench_wait(f"namespace {ns}'s default service account", lambda: core.list_namespaced_service_account(ns).items, 30)
    return ns


def delete_namespace(core: client.CoreV1Api, ns: str, timeout: float = 600) -> None:
    """Delete and wait until it is gone, so one repetition's teardown does not load the next one. Once the
    namespace is going (nothing new can be made in it), its pods are deleted without a grace period (kwok's fake
    pods run nothing to stop): the namespace's deletion ends each gracefully, 10,000 of them in 12 minutes."""
    core.delete_namespace(ns)
    try:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0, _request_timeout=120)
    except (client.ApiException, urllib3.exceptions.HTTPError) as e:  # the API server goes on past its own timeout
        print(f"[bench] deleting the pods of {ns}: {type(e).__name__} (the namespace's deletion goes on)", flush=True)

    def gone() -> bool:
        try:
            core.read_namespace(ns, _request_timeout=10)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return False

    bench_wait(f"namespace {ns} to be deleted", gone, timeout, every=0.5)


def proc_stats(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) and peak resident memory (VmHWM) of a running process."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"peak_rss_mb": hwm / 1024, "cpu_seconds": (int(fields[11]) + int(fields[12])) / ticks}


def apply(layout: Layout, *docs: dict[str, Any]) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump_all(docs, f)
        f.flush()
        kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", f.name, timeout=60)


def wait_established(ext: client.ApiextensionsV1Api, crd: str, timeout: float = 30) -> None:
    def established() -> bool:
        conditions = ext.read_custom_resource_definition(crd, _request_timeout=10).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    bench_wait(f"CRD {crd} to be Established", established, timeout)


def spawn(argv: list[str], env: dict[str, str], log: Path, url: str, what: str) -> subprocess.Popen[bytes]:
    """Start a process with its output appended to `log`; return it once `url` answers 200."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env)
    return wait_healthy(proc, url, log, what)


def wait_healthy(
    proc: subprocess.Popen[bytes], url: str, log: Path, what: str, timeout: float = 90
) -> subprocess.Popen[bytes]:
    """Return `proc` once `url` answers 200; a clear exit if it dies or stays unhealthy."""

    def healthy() -> bool:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {what} exited {proc.returncode} (log: {log})")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
        return False

    try:
        wait_until(f"{what} to answer {url} (log: {log})", healthy, timeout, every=0.3)
    except WaitTimeout as e:
        proc.kill()
        raise SystemExit(f"bench: {e}") from None
    return proc
