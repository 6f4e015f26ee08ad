"""Dev-cluster benchmark: warm start to Ready, and pod create -> Running latency on each node kind.

    python bench/devcluster_bench.py [--starts 3] [--pods 100] [--concurrency 4] [--rounds 4]

Warm start: the dev cluster is taken down and `make dev-cluster` is timed from nothing running to every node
Ready, with binaries and venv cached. Pod latency: from just before the create call to the moment a watch sees
the pod Running (what a user or a controller would observe); `--concurrency` pods are in flight at once and
each is deleted once seen Running. The process node (a Python process per pod) and the real node (kubelet,
containerd, runc; the busybox image imported, so no pull) take turns: `--rounds` rounds, each running
pods/rounds pods on one node kind then on the other, so both see the same machine load. Results go to
bench/results/devcluster.json with machine info, the commit and every repetition; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from ringleader_devcluster import realnode
from ringleader_devcluster.layout import REPO_ROOT, Layout

from bench.common import new_namespace
from bench.record import machine, summary

GOALS = {"warm_start_s": 30.0, "pod_running_p99_s": 1.0, "real_node_pod_running_p99_s": 2.0}
PROCESS_CONTAINER = {"name": "main", "image": "python:3.11", "command": ["python", "-c", "import time; time.sleep(30)"]}
# The node kinds measured: what a pod needs to land on each, and its one container.
NODES: dict[str, dict[str, Any]] = {
    "process": {"nodeSelector": {"ringleader.dev/process-node": "true"}, "containers": [PROCESS_CONTAINER]},
    "real": {
        "nodeSelector": {realnode.LABEL: "true"},
        "tolerations": [{"key": realnode.TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "automountServiceAccountToken": False,
        "containers": [
            {"name": "main", "image": realnode.BUSYBOX_IMAGE, "imagePullPolicy": "Never", "command": ["sleep", "30"]}
        ],
    },
}


def make(target: str) -> float:
    t0 = time.monotonic()
    subprocess.run(["make", "-s", target], cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def warm_starts(n: int) -> list[float]:
    times = []
    for i in range(n):
        make("dev-cluster-down")
        t = make("dev-cluster")
        print(f"[bench] warm start {i + 1}/{n}: {t:.2f}s", flush=True)
        times.append(t)
    return times


def pod_latencies(kubeconfig: Path, count: int, concurrency: int, node: str) -> list[float]:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api)
    ns = new_namespace(core)
    created: dict[str, float] = {}
    running: dict[str, float] = {}
    done = threading.Event()

    def watcher() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, ns, timeout_seconds=300):
            pod = ev["object"]
            if pod.status.phase == "Running" and pod.metadata.name not in running:
                running[pod.metadata.name] = time.monotonic()
                if len(running) == count:
                    break
            if done.is_set():
                break
        w.stop()

    t = threading.Thread(target=watcher, daemon=True)
    t.start()
    time.sleep(0.5)  # let the watch open before the first create

    def create(i: int) -> None:
        name = f"p-{i}"
        body = {
            "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, **NODES[node]},
        }
        created[name] = time.monotonic()
        core.create_namespaced_pod(ns, body)
        # Hold the rate: at most `concurrency` pods starting at once, like a controller's worker pool. Then
        # delete the pod, so the run measures start latency, not the node's 110-pod capacity.
        end = time.monotonic() + 30
        while name not in running and time.monotonic() < end:
            time.sleep(0.01)
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, range(count)))
    t.join(timeout=60)
    done.set()
    missing = sorted(set(created) - set(running))
    if missing:
        print(f"[bench] {len(missing)} pods never observed Running: {missing[:5]}", flush=True)
    core.delete_namespace(ns, grace_period_seconds=0)
    return [running[n] - created[n] for n in created if n in running]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--starts", type=int, default=3)
    p.add_argument("--pods", type=int, default=100, help="pods per node kind")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--rounds", type=int, default=4)
    args = p.parse_args()
    print(
        f"[bench] settings: {args.starts} warm starts; {args.pods} pods per node kind ({', '.join(NODES)}), "
        f"{args.concurrency} in flight, node kinds alternating in {args.rounds} rounds",
        flush=True,
    )
    starts = warm_starts(args.starts)
    layout = Layout.from_env()
    realnode.import_image(realnode.Paths.of(layout), realnode.busybox_archive(layout))
    latencies: dict[str, list[float]] = {node: [] for node in NODES}
    for r in range(args.rounds):
        for node in NODES:
            latencies[node] += pod_latencies(layout.kubeconfig, args.pods // args.rounds, args.concurrency, node)
            print(f"[bench] round {r + 1}/{args.rounds}: {node} node, {len(latencies[node])} pods so far", flush=True)
    result: dict[str, Any] = {
        "benchmark": "devcluster",
        "machine": machine(),
        "goals": GOALS,
        "settings": {"pods_per_node": args.pods, "concurrency": args.concurrency, "rounds": args.rounds},
        "warm_start_s": {"summary": summary(starts), "runs": starts},
        "pod_create_to_running_s": {node: {"summary": summary(v), "runs": v} for node, v in latencies.items()},
    }
    out = REPO_ROOT / "bench" / "results" / "devcluster.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    s = result["warm_start_s"]["summary"]
    print(
        f"warm make dev-cluster: median {s['median']:.2f}s, max {s['max']:.2f}s over {s['n']} "
        f"(goal <= {GOALS['warm_start_s']:.0f}s)"
    )
    for node, goal in (("process", GOALS["pod_running_p99_s"]), ("real", GOALS["real_node_pod_running_p99_s"])):
        lt = result["pod_create_to_running_s"][node]["summary"]
        print(
            f"pod create -> Running on the {node} node: median {lt['median'] * 1000:.0f}ms, "
            f"p99 {lt['p99'] * 1000:.0f}ms, max {lt['max'] * 1000:.0f}ms over {lt['n']} pods "
            f"(goal p99 <= {goal * 1000:.0f}ms)"
        )
    print(f"written to {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
