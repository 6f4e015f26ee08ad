"""Operator control-plane benchmark on the dev cluster, with kwok fake nodes so no process runs.

    python bench/operator_bench.py [--reps 3] [--jobs 200] [--fake-nodes 10]

1. One 64-worker TrainingJob: time from just before the create call until all 64 pods and the Service exist.
2. `--jobs` TrainingJobs of 4 workers created at once: time until every pod exists; the operator's peak RSS
   (VmHWM of a freshly started operator) and CPU seconds.
Results go to bench/results/operator.json with every repetition; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from ringleader_devcluster import cluster
from ringleader_devcluster.layout import REPO_ROOT, Layout

from bench.devcluster_bench import machine, new_namespace, summary

GROUP, VERSION, PLURAL = "ringleader.dev", "v1alpha1", "trainingjobs"
GOALS = {"job64_all_pods_s": 2.0, "burst_all_pods_s": 60.0, "operator_rss_mb": 250.0}
FAKE = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [{"name": "trainer", "image": "ringleader/trainer:bench", "command": ["python", "train.py"]}],
}


def job(name: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"workers": {"replicas": workers, "template": {"spec": FAKE}}},
    }


class PodCounter:
    """Watches a namespace and records when the pod count first reaches each target."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.core, self.ns = core, ns
        self.names: set[str] = set()
        self.reached: dict[int, float] = {}
        self.targets: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, targets: list[int]) -> None:
        """List (resourceVersion), then watch from there: no ADDED event can fall before the watch."""
        self.targets = targets
        self.rv = self.core.list_namespaced_pod(self.ns).metadata.resource_version
        self.thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        for ev in w.stream(self.core.list_namespaced_pod, self.ns, resource_version=self.rv, timeout_seconds=600):
            if ev["type"] == "ADDED":
                self.names.add(ev["object"].metadata.name)
                for t in self.targets:
                    if len(self.names) >= t and t not in self.reached:
                        self.reached[t] = time.monotonic()
            if self.stop.is_set() or len(self.reached) == len(self.targets):
                break
        w.stop()

    def wait(self, timeout: float) -> None:
        self.thread.join(timeout)
        self.stop.set()


def delete_namespace(core: client.CoreV1Api, ns: str, timeout: float = 300) -> None:
    """Delete and wait until it is gone, so one repetition's teardown does not load the next one."""
    core.delete_namespace(ns)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            core.read_namespace(ns)
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(0.5)
    raise SystemExit(f"bench: namespace {ns} still there after {timeout:.0f}s")


def one_big_job(core: client.CoreV1Api, custom: client.CustomObjectsApi, workers: int) -> float:
    ns = new_namespace(core)
    counter = PodCounter(core, ns)
    counter.start([workers])
    t0 = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("big", workers))
    counter.wait(120)
    done = counter.reached.get(workers)
    deadline = time.monotonic() + 10
    while True:  # the Service is created before the pods, so it is there by now; check anyway
        try:
            core.read_namespaced_service("big", ns)
            break
        except client.ApiException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    delete_namespace(core, ns)
    if done is None:
        raise SystemExit(f"bench: only {len(counter.names)} of {workers} pods appeared")
    return done - t0


def burst(core: client.CoreV1Api, custom: client.CustomObjectsApi, jobs: int) -> float:
    ns = new_namespace(core)
    total = jobs * 4
    counter = PodCounter(core, ns)
    counter.start([total])
    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda i: custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(f"j{i}", 4)),
                range(jobs),
            )
        )
    counter.wait(300)
    done = counter.reached.get(total)
    delete_namespace(core, ns)
    if done is None:
        raise SystemExit(f"bench: only {len(counter.names)} of {total} pods appeared")
    return done - t0


def proc_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"peak_rss_mb": hwm / 1024, "cpu_seconds": (int(fields[11]) + int(fields[12])) / ticks}


def fresh_operator(layout: Layout) -> int:
    cluster.operator_down()
    cluster.operator_up()
    return int((layout.operator_dir / "operator.pid").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--jobs", type=int, default=200)
    p.add_argument("--workers", type=int, default=64)
    p.add_argument("--fake-nodes", type=int, default=10)
    args = p.parse_args()
    layout = Layout.from_env()
    cluster.scale_fake_nodes(layout, args.fake_nodes)
    api = config.new_client_from_config(config_file=str(layout.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    fresh_operator(layout)
    big = []
    for i in range(args.reps):
        t = one_big_job(core, custom, args.workers)
        print(f"[bench] {args.workers}-worker job, all pods exist after {t:.2f}s ({i + 1}/{args.reps})", flush=True)
        big.append(t)
    bursts = []
    for i in range(args.reps):
        pid = fresh_operator(layout)  # its peak RSS then belongs to this burst alone
        before = proc_stats(pid)["cpu_seconds"]
        t = burst(core, custom, args.jobs)
        stats = proc_stats(pid)
        bursts.append(
            {
                "seconds": t,
                "operator_cpu_seconds": stats["cpu_seconds"] - before,
                "operator_peak_rss_mb": stats["peak_rss_mb"],
            }
        )
        print(
            f"[bench] {args.jobs} jobs x 4 workers, all pods exist after {t:.2f}s; operator peak RSS "
            f"{stats['peak_rss_mb']:.0f} MB ({i + 1}/{args.reps})",
            flush=True,
        )
    cluster.scale_fake_nodes(layout, 0)

    result: dict[str, Any] = {
        "benchmark": "operator",
        "machine": machine(),
        "goals": GOALS,
        "job64_all_pods_s": {"summary": summary(big), "runs": big, "workers": args.workers},
        "burst": {
            "jobs": args.jobs,
            "workers_per_job": 4,
            "runs": bursts,
            "summary_s": summary([b["seconds"] for b in bursts]),
            "operator_peak_rss_mb": max(b["operator_peak_rss_mb"] for b in bursts),
        },
    }
    out = REPO_ROOT / "bench" / "results" / "operator.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"{args.workers}-worker job -> all pods: median {statistics.median(big):.2f}s "
        f"(goal <= {GOALS['job64_all_pods_s']:.0f}s)"
    )
    print(
        f"{args.jobs} x 4-worker jobs -> all pods: median {statistics.median(b['seconds'] for b in bursts):.1f}s "
        f"(goal <= {GOALS['burst_all_pods_s']:.0f}s); operator peak RSS "
        f"{result['burst']['operator_peak_rss_mb']:.0f} MB (goal <= {GOALS['operator_rss_mb']:.0f} MB)"
    )
    print(f"written to {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
