"""Placement quality: how many racks a gang spans with no placement, spec.placement Preferred and Required.

    python -m bench.topology_bench [--reps 3] [--nodes-per-rack 2] [--gpus 8]

On the dev cluster (started if needed) with its operator (the operator's own gate): four racks of kwok fake nodes
(`--nodes-per-rack` nodes of `--gpus` GPUs each, labelled topology.kubernetes.io/rack). One repetition runs the
same sequence of gangs (GANGS: pods of 4 GPUs each, about 90 % of the cluster in all) once per mode, in a
rotating order: each gang created after the one before is placed (or is found waiting), all of them left
running, then the namespace deleted before the next mode. Per gang: the racks its pods were bound to (or that it
waited). Reported per mode: domains per placed gang (median and mean over every gang of every repetition), the
share of gangs in one rack, and the gangs that waited. Results go to bench/results/topology.json; nothing is
asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kubernetes import client

from bench.common import bench_wait, delete_namespace, kwok_bench_cluster, new_namespace
from bench.record import write_result
from tests.support.fakenodes import add_fake_nodes, fake_node, pool_job, remove_fake_nodes
from tests.support.jobs import GROUP, PLURAL, VERSION

RACK = "topology.kubernetes.io/rack"
RACKS = 4
GPUS_PER_POD = 4
GANGS = [2, 1, 3, 2, 1, 2, 3, 1, 2]  # pods per gang (17 pods, 68 GPUs of the default 64 + room to wait)
MODES = ("none", "Preferred", "Required")
PLACED_WITHIN = 20.0  # seconds a gang is given to be bound before it counts as waiting


def gang(name: str, pods: int, pool: str, mode: str) -> dict[str, Any]:
    body = pool_job(name, pods, pool, GPUS_PER_POD)
    if mode != "none":
        body["spec"]["placement"] = {"topologyKey": RACK, "mode": mode}
    return body


def placed(core: client.CoreV1Api, ns: str, name: str, pods: int, racks: dict[str, str]) -> list[str] | None:
    """The racks of the gang's pods once all are bound; None while any is not."""
    items = core.list_namespaced_pod(ns, label_selector=f"ringleader.dev/job-name={name}").items
    nodes = [p.spec.node_name for p in items if p.spec.node_name]
    return [racks[n] for n in nodes] if len(nodes) == pods else None


def run_mode(core: client.CoreV1Api, custom: client.CustomObjectsApi, pool: str, mode: str,
             racks: dict[str, str]) -> list[int | None]:  # fmt: skip
    """Every gang of GANGS under `mode`: the number of racks each spans (None: it waited)."""
    ns = new_namespace(core, "topo")
    out: list[int | None] = []
    try:
        for i, pods in enumerate(GANGS):
            name = f"g{i}"
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, gang(name, pods, pool, mode))
            deadline = time.monotonic() + PLACED_WITHIN
            got = None
            while time.monotonic() < deadline and got is None:
                got = placed(core, ns, name, pods, racks)
                time.sleep(0.2)
            out.append(None if got is None else len(set(got)))
            print(f"[topology] {mode:9s} gang {i} ({pods} pods): {'waits' if got is None else sorted(got)}", flush=True)
    finally:
        delete_namespace(core, ns)
    return out


def summary(spans: list[int | None]) -> dict[str, Any]:
    placed_spans = [s for s in spans if s is not None]
    return {
        "gangs": len(spans),
        "waited": len(spans) - len(placed_spans),
        "domains_median": statistics.median(placed_spans) if placed_spans else None,
        "domains_mean": round(statistics.fmean(placed_spans), 3) if placed_spans else None,
        "one_domain_share": round(sum(s == 1 for s in placed_spans) / len(placed_spans), 3) if placed_spans else None,
        "multi_pod_one_domain_share": _multi(spans),
    }


def _multi(spans: list[int | None]) -> float | None:
    """Of the gangs of more than one pod that were placed, the share in one rack (a one-pod gang always is)."""
    sizes = GANGS * (len(spans) // len(GANGS))
    multi = [s for s, n in zip(spans, sizes, strict=True) if n > 1 and s is not None]
    return round(sum(s == 1 for s in multi) / len(multi), 3) if multi else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--nodes-per-rack", type=int, default=2)
    p.add_argument("--gpus", type=int, default=8, help="GPUs per fake node")
    args = p.parse_args()
    core, custom, pool = kwok_bench_cluster()
    nodes = [fake_node(f"{pool}-r{r}-n{i}", {RACK: f"r{r}", "ringleader.dev/pool": pool}, args.gpus)
             for r in range(RACKS) for i in range(args.nodes_per_rack)]  # fmt: skip
    racks = {n["metadata"]["name"]: n["metadata"]["labels"][RACK] for n in nodes}
    settings = {"racks": RACKS, "nodes_per_rack": args.nodes_per_rack, "gpus_per_node": args.gpus,
                "gpus_per_pod": GPUS_PER_POD, "gangs": GANGS, "reps": args.reps, "placed_within_s": PLACED_WITHIN,
                "backend": "the operator's own gate"}  # fmt: skip
    print(f"[topology] settings: {settings}", flush=True)
    names = add_fake_nodes(core, nodes)
    spans: dict[str, list[int | None]] = {m: [] for m in MODES}
    try:
        for rep in range(args.reps):
            order = MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]
            for mode in order:
                spans[mode] += run_mode(core, custom, pool, mode, racks)
    finally:
        remove_fake_nodes(core, names)
    bench_wait("fake nodes gone", lambda: not core.list_node(label_selector=f"ringleader.dev/pool={pool}").items, 60)
    result = {"settings": settings, "modes": {m: {**summary(s), "spans": s} for m, s in spans.items()}}
    for m in MODES:
        print(f"[topology] {m}: {summary(spans[m])}", flush=True)
    write_result("topology", result)


if __name__ == "__main__":
    main()
