"""What a benchmark result is made of, with no cluster dependencies (so the GPU benchmark runs where only torch
is installed): summaries of repeated measurements, the machine and versions it was measured with, and writing
bench/results/<name>.json."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from ringleader_devcluster.layout import REPO_ROOT, read_versions

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


def commit_of(tree: Path = REPO_ROOT) -> str:
    """The checkout's commit, "-dirty" when tracked files differ from it (the figures are then of changes not yet
    committed); empty when it is no git checkout."""
    described = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--abbrev=7"], check=False, cwd=tree, capture_output=True,
        text=True,
    )  # fmt: skip
    return described.stdout.strip()


def point_order(points: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """The scale benchmark's points (jobs, workers) in the order they are shown: one-job points by size, then
    the many-jobs points."""
    return sorted(points, key=lambda p: (p[0] > 1, p[0] * p[1]))


# The commit the benchmark started at: a result names the code it measured, even if a commit lands while it runs.
COMMIT_AT_START = commit_of()


def machine() -> dict[str, Any]:
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
        "commit": COMMIT_AT_START,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "versions": versions(),
    }


def import_seconds(module: str = "torch", timeout: float = 300.0) -> float:
    """Wall seconds a fresh interpreter takes to import `module`: how fast this machine is right now (a shared
    host's speed varies by the hour), recorded beside figures that include a process's start, so runs made on
    different days can be told apart."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, timeout=timeout)
    return time.perf_counter() - started


def write_result(name: str, result: dict[str, Any]) -> Path:
    """bench/results/<name>.json with the machine and versions added; returns the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.json"
    out.write_text(json.dumps({"benchmark": name, "machine": machine(), **result}, indent=2) + "\n")
    print(f"[bench] wrote {out.relative_to(REPO_ROOT)}", flush=True)
    return out
