"""What every benchmark shares: the machine and versions a result was measured with, summaries of repeated
measurements, throwaway namespaces, a process's CPU and peak memory, and writing bench/results/<name>.json."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time
import urllib.request
import uuid
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from ringleader_devcluster.cluster import kubectl
from ringleader_devcluster.layout import REPO_ROOT, Layout, read_versions

RESULTS = REPO_ROOT / "bench" / "results"
PEER_VERSIONS = REPO_ROOT / "bench" / "peer" / "versions.env"
PACKAGES = ("torch", "kopf", "kubernetes", "pydantic")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def range_verdict(runs: dict[str, list[float]], better: str = "faster") -> str:
    """Whether the systems' repetitions tell them apart: "not distinguishable" when any two of their ranges
    overlap, else which one has the lowest median."""
    ranges = [(min(v), max(v)) for v in runs.values()]
    if any(a[0] <= b[1] and b[0] <= a[1] for i, a in enumerate(ranges) for b in ranges[i + 1 :]):
        return "not distinguishable (the runs' ranges overlap)"
    return f"{min(runs, key=lambda k: statistics.median(runs[k]))} is {better}"


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "median": statistics.median(values),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "max": max(values),
        "min": min(values),
    }


def step_times(events: list[dict[str, Any]], batch: int, workers: int) -> list[float]:
    """Step times from a rank's logged throughput windows, the first (warm-up) left out: batch x workers /
    samples per second of each window."""
    windows = [e for e in events if "samples_per_second" in e][1:]
    return [batch * workers / e["samples_per_second"] for e in windows if e["samples_per_second"] > 0]


def versions() -> dict[str, str]:
    """The pinned binaries (dev cluster and the peer) and the installed Python packages that matter here."""
    out = {k.removesuffix("_VERSION").lower(): v for k, v in read_versions().items()}
    out.update({k.removesuffix("_VERSION").lower(): v for k, v in read_versions(PEER_VERSIONS).items()})
    for pkg in PACKAGES:
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine() -> dict[str, Any]:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], check=False, cwd=REPO_ROOT, capture_output=True, text=True
    )
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")), platform.processor(),
    )  # fmt: skip
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "commit": commit.stdout.strip(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": versions(),
    }


def write_result(name: str, result: dict[str, Any]) -> Path:
    """bench/results/<name>.json with the machine and versions added; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps({"benchmark": name, "machine": machine(), **result}, indent=2) + "\n")
    print(f"[bench] wrote {out.relative_to(REPO_ROOT)}", flush=True)
    return out


def new_namespace(core: client.CoreV1Api, prefix: str = "bench") -> str:
    """A fresh namespace, returned once its default service account exists (pods are refused before)."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(ns).items:
        if time.monotonic() > deadline:
            raise SystemExit("bench: default service account never appeared")
        time.sleep(0.1)
    return ns


def delete_namespace(core: client.CoreV1Api, ns: str, timeout: float = 600) -> None:
    """Delete and wait until it is gone, so one repetition's teardown does not load the next one."""
    core.delete_namespace(ns)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespace(ns, _request_timeout=10)
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.5)
    raise SystemExit(f"bench: namespace {ns} still there after {timeout:.0f}s")


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = ext.read_custom_resource_definition(crd, _request_timeout=10).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        time.sleep(0.2)
    raise SystemExit(f"bench: CRD {crd} not Established after {timeout:.0f}s")


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench: {what} exited {proc.returncode} (log: {log})")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
            if r.status == 200:
                return proc
        time.sleep(0.3)
    proc.kill()
    raise SystemExit(f"bench: {what} not healthy after {timeout:.0f}s (log: {log})")
