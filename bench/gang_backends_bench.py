"""Time from capacity freed to the next gang Running, under each way of admitting gangs: the operator's own gate,
Kueue (a real manager: quota, Workloads) and Kubernetes' Workload API (kube-scheduler's gang scheduling).

    python -m bench.gang_backends_bench [--jobs 100] [--frees 5] [--rounds 3]

On the dev cluster (started if needed, with Kueue): kwok fake nodes with room for exactly FULL jobs of 4 workers
x 1 GPU (4 nodes of 4 GPUs). One round runs each backend once, in a rotating order: `--jobs` such jobs created
at once in a fresh namespace (for Kueue: labelled with a LocalQueue whose ClusterQueue's GPU quota is the
nodes' 16), then, once FULL jobs run (every pod Running), `--frees` times: the oldest running job is deleted
and, from the moment its last pod is gone (the capacity freed, seen by a watch), the time until some other job
has all 4 pods Running. The operator is restarted with the backend's --gang-backend between backends. Reported
per backend: the median and range over every free of every round, and each backend's ratio to the own gate's
with a bootstrap interval (bench/stats.py); a verdict says "not distinguishable" when the intervals say so.
Results go to bench/results/gang_backends.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client, config, watch
from ringleader_devcluster import cluster, kueue, operatorprocess
from ringleader_devcluster.layout import Layout

from bench.common import bench_wait, delete_namespace, new_namespace
from bench.record import write_result
from bench.stats import ratio_interval, spread, time_verdict
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import GROUP, PLURAL, VERSION

BACKENDS = ("gates", "kueue", "workload-api")
WORKERS = 4
FULL = 4  # jobs the fake nodes hold at once
KUEUE = ("kueue.x-k8s.io", "v1beta2")


class PodTimes:
    """From a watch of the namespace's pods: when each job's pods turned Running and when each pod went."""

    def __init__(self, core: client.CoreV1Api, ns: str) -> None:
        self.running: dict[str, dict[str, float]] = {}  # job -> pod -> when Running
        self.gone: dict[str, float] = {}  # pod -> when deleted
        self.stop = threading.Event()
        self.core, self.ns = core, ns
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        w = watch.Watch()
        while not self.stop.is_set():
            try:
                for event in w.stream(self.core.list_namespaced_pod, self.ns, timeout_seconds=5):
                    pod, now = event["object"], time.monotonic()
                    job = (pod.metadata.labels or {}).get("ringleader.dev/job-name", "")
                    if event["type"] == "DELETED":
                        self.gone.setdefault(pod.metadata.name, now)
                    elif pod.status.phase == "Running":
                        self.running.setdefault(job, {}).setdefault(pod.metadata.name, now)
                    if self.stop.is_set():
                        break
            except Exception:  # a broken watch is opened again
                time.sleep(0.2)

    def all_running(self, job: str) -> float | None:
        """When the job's last pod turned Running, once all WORKERS have."""
        times = self.running.get(job, {})
        return max(times.values()) if len(times) == WORKERS else None

    def all_gone(self, job: str) -> float | None:
        """When the job's last Running pod went, once all have."""
        pods = set(self.running.get(job, {}))
        return max(self.gone[p] for p in pods) if pods and pods <= set(self.gone) else None

    def first_running_after(self, jobs: list[str], moment: float) -> float | None:
        """The earliest moment after `moment` that one of `jobs` had all its pods Running."""
        return min((t for n in jobs if (t := self.all_running(n)) and t > moment), default=None)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def job(name: str, pool: str, queue: str | None) -> dict[str, Any]:
    body = pool_job(name, WORKERS, pool, 1)
    if queue:
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return body


@contextmanager
def kueue_queue(custom: client.CustomObjectsApi, ns: str, gpus: int) -> Iterator[str]:
    """A ClusterQueue with `gpus` GPUs of quota and the namespace's LocalQueue on it."""
    name = f"bench-{uuid.uuid4().hex[:6]}"
    flavor = {"apiVersion": "/".join(KUEUE), "kind": "ResourceFlavor", "metadata": {"name": "bench-gpus"}}
    try:
        custom.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
    except client.ApiException as e:
        if e.status != 409:
            raise
    quota = [{"name": "nvidia.com/gpu", "nominalQuota": str(gpus)}]
    group = {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "bench-gpus", "resources": quota}]}
    spec = {"namespaceSelector": {}, "resourceGroups": [group]}
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", {"apiVersion": "/".join(KUEUE), "kind": "ClusterQueue", "metadata": {"name": name},
                                  "spec": spec}
    )  # fmt: skip
    local = {"apiVersion": "/".join(KUEUE), "kind": "LocalQueue", "metadata": {"name": "bench"},
             "spec": {"clusterQueue": name}}  # fmt: skip
    custom.create_namespaced_custom_object(*KUEUE, ns, "localqueues", local)
    try:
        yield "bench"
    finally:
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", name)


def one_backend(core: client.CoreV1Api, custom: client.CustomObjectsApi, pool: str, backend: str, jobs: int,
                frees: int) -> list[float]:  # fmt: skip
    """Seconds from each freed capacity to the next gang all Running."""
    operatorprocess.operator_up(gang_backend="workload-api" if backend == "workload-api" else "gates")
    ns = new_namespace(core, f"gang-{backend}")
    times = PodTimes(core, ns)
    out: list[float] = []
    try:
        with kueue_queue(custom, ns, FULL * WORKERS) if backend == "kueue" else _none() as queue:
            names = [f"j{i:03d}" for i in range(jobs)]
            for name in names:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(name, pool, queue))
            for _ in range(frees):
                running = bench_wait(
                    f"{FULL} jobs running ({backend})",
                    lambda: r if len(r := [n for n in names if times.all_running(n)]) >= FULL else None,
                    300,
                )
                victim = running[0]
                names.remove(victim)
                custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, victim)
                freed = bench_wait(f"{victim}'s pods gone", functools.partial(times.all_gone, victim), 120)
                started = bench_wait(
                    f"the next gang running after {victim} ({backend})",
                    functools.partial(times.first_running_after, names, freed),
                    300,
                )
                out.append(started - freed)
                print(f"[gang-backends] {backend:12s} freed -> next gang Running: {started - freed:.2f} s", flush=True)
    finally:
        times.close()
        delete_namespace(core, ns)
    return out


@contextmanager
def _none() -> Iterator[None]:
    yield None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=100)
    p.add_argument("--frees", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    layout = Layout.from_env()
    cluster.up(None, 8, 1, real_node=False)
    kueue.start(layout)
    config.load_kube_config(str(layout.kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    pool = f"bench-{uuid.uuid4().hex[:6]}"
    names = add_fake_nodes(core, [fake_node(f"{pool}-n{i}", {"ringleader.dev/pool": pool}, 4) for i in range(4)])
    settings = {"jobs": args.jobs, "workers_per_job": WORKERS, "gpus_per_worker": 1, "fake_nodes": "4 x 4 GPUs",
                "jobs_at_once": FULL, "frees_per_round": args.frees, "rounds": args.rounds,
                "kueue_quota_gpus": FULL * WORKERS}  # fmt: skip
    print(f"[gang-backends] settings: {settings}", flush=True)
    samples: dict[str, list[float]] = {b: [] for b in BACKENDS}
    try:
        for r in range(args.rounds):
            for backend in BACKENDS[r % 3 :] + BACKENDS[: r % 3]:
                samples[backend] += one_backend(core, custom, pool, backend, args.jobs, args.frees)
    finally:
        operatorprocess.operator_up(gang_backend="gates")
        remove_fake_nodes(core, names)
    result: dict[str, Any] = {"settings": settings, "backends": {}}
    for backend, values in samples.items():
        entry: dict[str, Any] = {"seconds": spread(values).as_dict(), "samples": values}
        ratio = ratio_interval(values, samples["gates"]) if backend != "gates" else None
        if ratio is not None:
            entry["vs_gates"] = ratio.as_dict()
            entry["verdict"] = time_verdict(ratio)
        result["backends"][backend] = entry
        print(f"[gang-backends] {backend}: {entry['seconds']} {entry.get('verdict', '')}", flush=True)
    write_result("gang_backends", result)


if __name__ == "__main__":
    main()
