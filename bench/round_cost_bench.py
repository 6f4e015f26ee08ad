"""What one reconcile round of a large running job costs the operator, against the job's size: the same rounds
through the operator of two commits (before and after the rank book), interleaved, in fresh processes.

    python -m bench.round_cost_bench [--trees 4527fe3 .] [--sizes 1000 2000 5000 10000] [--changed 0 10]
                                     [--events steady ready] [--rounds 20] [--reps 3]

Each run is a process importing the operator of one tree (git archive of the commit; `.` for the working tree). It
builds one TrainingJob of n workers whose pods all run, lets the operator's own Reconciler make its first rounds
against an in-memory API (the job as its status writes leave it, the pods in the pod cache as the watch fills it),
then times `--rounds` rounds, each after `changed` pods got a new version: one that changes nothing the job shows
(`steady`: how the rounds of a running job look), or one that turns them not ready and ready again in turn
(`ready`: the counts in status change, a status write every round, as while a job starts). CPU time per round
(process time): the parse, the plan, the status comparison and write; no network. Runs alternate between the trees
within each repetition. Results go to bench/results/round-cost.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


class InMemoryApi:
    """The API server as far as a running job's rounds reach: the job, which its status writes change (merge patch
    of status.ranks), and its Service; every other call does nothing."""

    def __init__(self, body: dict[str, Any], version: list[int]) -> None:
        self.body, self.version = body, version

    async def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return self.body

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None = None
    ) -> dict[str, Any]:
        old = dict(self.body.get("status") or {})
        ranks = {**(old.get("ranks") or {}), **(status.get("ranks") or {})}
        self.version[0] += 1
        meta = {**self.body["metadata"], "resourceVersion": str(self.version[0])}
        kept = {k: v for k, v in ranks.items() if v is not None}
        self.body = {**self.body, "metadata": meta, "status": {**old, **status, "ranks": kept}}
        return self.body

    async def read_service(self, namespace: str, name: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "ownerReferences": [{"kind": "TrainingJob", "uid": "u"}]}}

    def __getattr__(self, name: str) -> Any:
        async def nothing(*args: Any, **kwargs: Any) -> Any:
            return None

        return nothing


def child(size: int, changed: int, rounds: int, flip: bool) -> dict[str, Any]:
    """In a process whose path holds one tree's operator: the CPU seconds of each timed round."""
    from ringleader_api import LABEL_JOB, TrainingJob
    from ringleader_operator import admission, builders
    from ringleader_operator.podcache import Grouped, PodCache, digest
    from ringleader_operator.reconciler import Reconciler

    spec = {"workers": {"replicas": size, "template": {"spec": {"containers": [{"name": "t", "image": "t"}]}}}}
    meta = {"name": "j", "namespace": "ns", "uid": "u", "generation": 1, "resourceVersion": "1"}
    body: dict[str, Any] = {"apiVersion": "ringleader.dev/v1", "kind": "TrainingJob", "metadata": meta, "spec": spec}
    model = TrainingJob.model_validate(body)
    ranks, version = builders.desired_ranks(model), [1]

    def running(index: int, ready: bool = True) -> dict[str, Any]:
        pod = builders.build_pod(model, *ranks[index])
        admission.lift_gate(pod)  # admitted and placed long ago
        pod["spec"]["nodeName"] = f"node-{index % 64}"
        version[0] += 1
        pod["metadata"] |= {"uid": f"pod-{index}", "resourceVersion": str(version[0])}
        pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}]}
        return digest(pod)

    pods = [running(index) for index in range(size)]
    api = InMemoryApi(body, version)

    async def main() -> list[float]:
        cache = PodCache(LABEL_JOB)
        cache.index = index_of_pods = Grouped(LABEL_JOB)
        for pod in pods:
            index_of_pods.put(pod)
        r = Reconciler(api, lambda *a: None, cache=cache)
        r.job_seen(api.body)
        for _ in range(3):  # the first rounds: the status written, the rank book filled
            await r.round("ns", "j", False)
        spent = []
        for n in range(rounds):
            for i in range(changed):
                index = (n * changed + i) % size
                pods[index] = running(index, ready=not flip or n % 2 == 1)
                index_of_pods.put(pods[index])  # as the pod watch keeps them
            started = time.process_time()
            await r.round("ns", "j", False)
            spent.append(time.process_time() - started)
        r.queue.close()
        r.scrapes.close()
        return spent

    return {"round_cpu_s": asyncio.run(main()), "status_bytes": len(json.dumps(api.body.get("status") or {}))}


def export(tree: str, into: Path) -> Path:
    """The tree's api/ and operator/ (a commit: git archive; `.`: this working tree)."""
    if tree == ".":
        return ROOT
    out = into / tree
    if not out.exists():
        data = subprocess.run(["git", "archive", tree, "api", "operator"], cwd=ROOT, capture_output=True, check=True)
        out.mkdir(parents=True)
        with tarfile.open(fileobj=BytesIO(data.stdout)) as tar:
            tar.extractall(out, filter="data")
    return out


def run(tree_dir: Path, size: int, changed: int, rounds: int, events: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree_dir / "api"), str(tree_dir / "operator"), str(ROOT)])}
    args = [sys.executable, "-m", "bench.round_cost_bench", "--child", str(size), str(changed), str(rounds)]
    args += ["--flip"] if events == "ready" else []
    done = subprocess.run(args, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"round_cost_bench: a run failed ({tree_dir}, n={size}):\n{done.stderr[-3000:]}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--trees", nargs="+", default=["4527fe3", "."])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1000, 2000, 5000, 10000])
    parser.add_argument("--changed", nargs="+", type=int, default=[0, 10])
    parser.add_argument("--events", nargs="+", choices=["steady", "ready"], default=["steady", "ready"])
    parser.add_argument("--flip", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    if args.child:
        size, changed, rounds = args.child
        print(json.dumps(child(size, changed, rounds, args.flip)))
        return
    from bench.record import commit_of, range_verdict, write_result

    settings = {
        "sizes": args.sizes, "changed": args.changed, "events": args.events, "rounds": args.rounds, "reps": args.reps
    }  # fmt: skip
    print(f"[round-cost] trees {args.trees}; {settings}", flush=True)
    results: dict[str, dict[str, list[float]]] = {}
    status_bytes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {tree: export(tree, Path(tmp)) for tree in args.trees}
        for rep in range(args.reps):
            order = args.trees if rep % 2 == 0 else list(reversed(args.trees))
            for size in args.sizes:
                for changed, events in [(c, e) for c in args.changed for e in args.events if c or e == "steady"]:
                    point = f"n={size} changed={changed} {events}"
                    for tree in order:
                        out = run(dirs[tree], size, changed, args.rounds, events)
                        median_ms = 1000 * statistics.median(out["round_cpu_s"])
                        results.setdefault(point, {}).setdefault(tree, []).append(median_ms)
                        status_bytes[f"{tree} {size}"] = out["status_bytes"]
                        print(f"[round-cost] rep {rep + 1} {point} {tree}: {median_ms:.1f} ms a round "
                              f"(median of {args.rounds})", flush=True)  # fmt: skip
    table: dict[str, dict[str, Any]] = {
        point: {
            "ms_a_round": {tree: {"median": statistics.median(v), "runs": v} for tree, v in runs.items()},
            "verdict": range_verdict(runs, "cheaper"),
        }
        for point, runs in results.items()
    }
    for point, row in table.items():
        cells = ", ".join(f"{tree} {cell['median']:.1f} ms" for tree, cell in row["ms_a_round"].items())
        print(f"[round-cost] {point}: {cells}: {row['verdict']}", flush=True)
    commits = {tree: commit_of() if tree == "." else tree for tree in args.trees}
    write_result("round-cost", {"settings": settings, "trees": commits, "points": table, "status_bytes": status_bytes})


if __name__ == "__main__":
    main()
