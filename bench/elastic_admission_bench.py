"""Start time of an elastic job on a 3/4-full cluster, with and without auto-elastic admission.

    python -m bench.elastic_admission_bench [--reps 5] [--filler-ends 30] [--grow-after 10]

On the dev cluster (started if needed) with its operator (the operator's own gang admission): a pool of 4 kwok fake
nodes of 8 GPUs. One run: a filler job of 3 workers x 8 GPUs takes 3/4 of the pool; once it runs, the subject job
asks for 4 workers x 8 GPUs (the whole pool) and, `--filler-ends` seconds after the subject was created, the filler
is deleted (the job ahead of it ends). Two modes, interleaved in a rotating order within each repetition:
"fixed" (replicas 4, no minReplicas: it waits for room for all 4, as before auto-elastic admission) and
"auto-elastic" (minReplicas 1, a checkpoint, runPolicy.elasticGrowAfterSeconds `--grow-after`: it starts with what
fits and grows when the filler's room comes back). Per run, from the subject's creation: `start`, until its first
worker pod is Running (training could begin), and `full`, until 4 workers of a world of 4 are Running (the size it
asked for; for auto-elastic this includes the restart of its growth). Reported per mode: the median and range of
each, and auto-elastic's ratio to fixed with a bootstrap interval (bench/stats.py) and a verdict that says "not
distinguishable" when the interval says so. kwok runs nothing: what the job would have trained meanwhile, and the
steps a growth re-does (those since its last checkpoint), are not measured here. Results go to
bench/results/elastic_admission.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from kubernetes import client

from bench.common import bench_wait, delete_namespace, kwok_bench_cluster, new_namespace
from bench.record import write_result
from bench.stats import ratio_interval, spread, time_verdict
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import GROUP, PLURAL, VERSION

MODES = ("fixed", "auto-elastic")
NODES, GPUS, WORKERS, FILLER = 4, 8, 4, 3


def subject(pool: str, mode: str, grow_after: int) -> dict[str, Any]:
    body = pool_job("subject", WORKERS, pool, GPUS)
    if mode == "auto-elastic":
        body["spec"]["workers"]["minReplicas"] = 1
        body["spec"]["checkpoint"] = {"intervalSteps": 100}
        body["spec"]["runPolicy"] = {"elasticGrowAfterSeconds": grow_after}
    return body


def running(core: client.CoreV1Api, ns: str, job: str) -> tuple[int, int]:
    """(Running worker pods of the job, those of them in a world of WORKERS)."""
    pods = core.list_namespaced_pod(ns, label_selector=f"ringleader.dev/job-name={job}").items
    up = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    whole = [p for p in up if (p.metadata.annotations or {}).get("ringleader.dev/workers") == str(WORKERS)]
    return len(up), len(whole)


def one_run(core: client.CoreV1Api, custom: client.CustomObjectsApi, pool: str, mode: str, filler_ends: float,
            grow_after: int) -> tuple[float, float]:  # fmt: skip
    """Seconds from the subject's creation to its first worker Running, and to WORKERS of a full world Running."""
    ns = new_namespace(core, "elastic")
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, pool_job("filler", FILLER, pool, GPUS))
        bench_wait("the filler running", lambda: running(core, ns, "filler")[0] == FILLER or None, 120)
        t0 = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, subject(pool, mode, grow_after))
        start = full = None
        filler_gone = False
        while full is None:
            now = time.monotonic()
            if not filler_gone and now - t0 >= filler_ends:
                custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "filler")
                filler_gone = True
            up, whole = running(core, ns, "subject")
            if start is None and up:
                start = now - t0
            if whole == WORKERS:
                full = now - t0
            if now - t0 > filler_ends + 180:
                raise TimeoutError(f"{mode}: the subject did not run at full size within {filler_ends + 180:.0f} s")
            time.sleep(0.1)
        assert start is not None
        print(f"[elastic-admission] {mode:12s} start {start:6.2f} s   full size {full:6.2f} s", flush=True)
        return start, full
    finally:
        delete_namespace(core, ns)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--filler-ends", type=float, default=30.0)
    p.add_argument("--grow-after", type=int, default=10)
    args = p.parse_args()
    core, custom, pool = kwok_bench_cluster()
    nodes = [fake_node(f"{pool}-n{i}", {"ringleader.dev/pool": pool}, GPUS) for i in range(NODES)]
    names = add_fake_nodes(core, nodes)
    settings = {"fake_nodes": f"{NODES} x {GPUS} GPUs", "filler": f"{FILLER} workers x {GPUS} GPUs (3/4 full)",
                "subject": f"{WORKERS} workers x {GPUS} GPUs", "filler_ends_after_s": args.filler_ends,
                "auto_elastic": {"minReplicas": 1, "elasticGrowAfterSeconds": args.grow_after},
                "reps": args.reps, "order": "rotating per repetition", "gang_backend": "gates"}  # fmt: skip
    print(f"[elastic-admission] settings: {settings}", flush=True)
    starts: dict[str, list[float]] = {m: [] for m in MODES}
    fulls: dict[str, list[float]] = {m: [] for m in MODES}
    try:
        for r in range(args.reps):
            for mode in MODES[r % 2 :] + MODES[: r % 2]:
                start, full = one_run(core, custom, pool, mode, args.filler_ends, args.grow_after)
                starts[mode].append(start)
                fulls[mode].append(full)
    finally:
        remove_fake_nodes(core, names)
    bench_wait("fake nodes gone", lambda: not core.list_node(label_selector=f"ringleader.dev/pool={pool}").items, 60)
    result: dict[str, Any] = {"settings": settings, "modes": {}}
    for mode in MODES:
        entry: dict[str, Any] = {
            "start_s": spread(starts[mode]).as_dict(),
            "full_size_s": spread(fulls[mode]).as_dict(),
            "samples": {"start": starts[mode], "full_size": fulls[mode]},
        }
        if mode != "fixed":
            for metric, samples in (("start", starts), ("full_size", fulls)):
                ratio = ratio_interval(samples[mode], samples["fixed"])
                if ratio is None:
                    continue
                entry[f"{metric}_vs_fixed"] = ratio.as_dict()
                entry[f"{metric}_verdict"] = time_verdict(ratio)
        result["modes"][mode] = entry
        print(f"[elastic-admission] {mode}: {entry}", flush=True)
    write_result("elastic_admission", result)


if __name__ == "__main__":
    main()
