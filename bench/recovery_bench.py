"""Recovery time on the dev cluster: from a worker's SIGKILL to the next completed training step.

    python -m bench.recovery_bench [--kills 5] [--victim 1]

Each repetition runs a fresh allreduce TrainingJob (3 workers, the built-in digits MLP paced at ~20 steps/s
by a 50 ms sleep on worker 0, a step logged every step, checkpoints every 20 steps, restartPolicy ExitCode,
the default restart back-off), waits for its first checkpoint, SIGKILLs the trainer process of worker
`--victim` and measures from just before the kill to the first step that a surviving worker logs after it
resumed. A fresh job each time measures a first failure: repeated failures of one rank wait out its
exponential back-off on purpose. Results go to bench/results/recovery-worker-<victim>.json with every
repetition; nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client, config
from ringleader_devcluster import cluster
from ringleader_devcluster.layout import REPO_ROOT, Layout
from ringleader_devcluster.processes import kill_pod_processes

from bench.common import machine, new_namespace
from tests.devcluster.helpers import wait_for
from tests.operator.helpers import GROUP, PLURAL, VERSION, training_job

GOAL_S = 15.0
COMMAND = ["python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "1000000",
           "--log-every", "1", "--straggler", "0:0.05", "--timeout", "60"]  # fmt: skip


def job(name: str, checkpoints: Path) -> dict[str, Any]:
    body = training_job(name, "", workers=3)
    body["spec"]["workers"]["restartPolicy"] = "ExitCode"
    body["spec"]["workers"]["template"]["spec"]["containers"][0]["command"] = COMMAND
    body["spec"]["checkpoint"] = {"directory": str(checkpoints), "intervalSteps": 20}
    body["spec"]["runPolicy"] = {"backoffLimit": 2}
    return body


def events(core: client.CoreV1Api, ns: str, pod: str) -> list[dict[str, Any]]:
    """The JSON lines the pod's trainer logged so far (none while the pod or its container is not there)."""
    try:
        text = core.read_namespaced_pod_log(pod, ns, container="trainer", _request_timeout=10)
    except client.ApiException:
        return []
    out = []
    for line in (text or "").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def saved(core: client.CoreV1Api, ns: str, pod: str) -> bool:
    return any(e.get("event") == "checkpoint" for e in events(core, ns, pod))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=5)
    p.add_argument("--victim", type=int, default=1, help="index of the worker to kill (0 hosts the store)")
    args = p.parse_args()
    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    cluster.operator_up()
    config.load_kube_config(str(Layout.from_env().kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = new_namespace(core)
    times: list[float] = []
    restarts = 0
    try:
        for rep in range(args.kills):
            name = f"recovery-{rep}"
            leader, victim = f"{name}-worker-{0 if args.victim else 1}", f"{name}-worker-{args.victim}"
            with tempfile.TemporaryDirectory() as d:
                custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(name, Path(d)))
                wait_for("the first checkpoint", functools.partial(saved, core, ns, leader), timeout=300)
                pod = core.read_namespaced_pod(victim, ns)
                t0 = time.time()
                if not kill_pod_processes(pod.metadata.uid, "ringleader_trainer"):
                    raise SystemExit(f"[bench] no trainer process in {victim}")

                def resumed_step(t0: float = t0, leader: str = leader) -> float | None:
                    after = [e for e in events(core, ns, leader) if e.get("ts", 0) > t0]
                    resume = next((i for i, e in enumerate(after) if e.get("event") == "resume"), None)
                    if resume is None:
                        return None
                    step = next((e for e in after[resume:] if "loss" in e), None)
                    return None if step is None else float(step["ts"])

                took = wait_for("the next step after the kill", resumed_step, timeout=300) - t0
                times.append(took)
                status = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name).get("status", {})
                restarts += sum(r.get("restarts", 0) for r in status.get("replicaStatuses", {}).values())
                custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            print(f"[bench] kill {rep + 1}/{args.kills}: next step {took:.2f} s after SIGKILL of {victim}", flush=True)
    finally:
        core.delete_namespace(ns)
    victim = f"worker-{args.victim}"
    result = {
        "machine": machine(),
        "goal_s": GOAL_S,
        "victim": victim,
        "kills": args.kills,
        "recovery_s": times,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "restarts_in_status": restarts,
    }
    print(f"[bench] recovery from SIGKILL of {victim}: median {result['median_s']:.2f} s, "
          f"max {result['max_s']:.2f} s over {len(times)} kills (goal <= {GOAL_S:g} s); "
          f"restarts in status {restarts}")  # fmt: skip
    out = REPO_ROOT / "bench" / "results" / f"recovery-worker-{args.victim}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"[bench] wrote {out.relative_to(REPO_ROOT)}")


if __name__ == "__main__":
    main()
