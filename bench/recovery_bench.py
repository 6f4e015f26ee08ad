"""Recovery time on the dev cluster, per strategy: from a worker's SIGKILL to the job's next completed step.

    python -m bench.recovery_bench [--kills 5] [--cases allreduce ps-sync ps-async local-sgd allreduce-store]

Each repetition runs a fresh TrainingJob of 3 workers (and for the parameter server one shard), the built-in
digits MLP paced at ~20 steps/s by a 50 ms sleep on worker 0, a step logged every step, checkpoints every 20
steps, restartPolicy ExitCode, the default restart back-off. It waits for the first checkpoint, SIGKILLs the
trainer process of the case's victim and measures from just before the kill to the first step the victim's
replacement logs: the moment the job trains at full strength again. Under allreduce and local SGD the
survivors wait for it in the re-formed group, so that is also their next step; under the asynchronous
parameter server the survivors never stopped and the figure is how long the job ran one worker short.
`allreduce-store` kills worker 0, which hosts the rendezvous store. A fresh job each time measures a first
failure: repeated failures of one rank wait out its exponential back-off on purpose. Results go to
bench/results/recovery.json with every repetition; nothing is asserted.
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
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.processes import kill_pod_processes
from ringleader_trainer import checkpoint as ckpt

from bench.common import delete_namespace, new_namespace, write_result
from tests.devcluster.helpers import wait_for
from tests.operator.helpers import GROUP, PLURAL, VERSION, training_job

GOAL_S = 15.0
COMMAND = ["python", "-u", "-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "1000000",
           "--log-every", "1", "--straggler", "0:0.05", "--timeout", "60"]  # fmt: skip
WORKERS, PS_SHARDS = 3, 1
# case -> (strategy spec, index of the worker killed)
CASES: dict[str, tuple[dict[str, Any], int]] = {
    "allreduce": ({"strategy": "allreduce"}, 1),
    "ps-sync": ({"strategy": "parameter-server", "parameterServer": {"mode": "synchronous"}}, 1),
    "ps-async": ({"strategy": "parameter-server", "parameterServer": {"mode": "asynchronous"}}, 1),
    "local-sgd": ({"strategy": "local-sgd", "localSGD": {"period": 8}}, 1),
    "allreduce-store": ({"strategy": "allreduce"}, 0),
}


def job(name: str, spec: dict[str, Any], checkpoints: Path) -> dict[str, Any]:
    body = training_job(name, "", workers=WORKERS, **spec)
    if "parameterServers" in body["spec"]:
        body["spec"]["parameterServers"]["replicas"] = PS_SHARDS
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["restartPolicy"] = "ExitCode"
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = COMMAND
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


def first_step_after(core: client.CoreV1Api, ns: str, pod: str, killed_uid: str, t0: float) -> float | None:
    """When the replacement of pod `pod` (another uid than the killed one) logged its first training step after
    `t0`, if it has. The killed pod's own log does not count: its process may log a step between `t0` and
    the signal."""
    try:
        if core.read_namespaced_pod(pod, ns, _request_timeout=10).metadata.uid == killed_uid:
            return None
    except client.ApiException:
        return None  # not replaced yet
    return next((float(e["ts"]) for e in events(core, ns, pod) if "loss" in e and e.get("ts", 0) > t0), None)


def measure(core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, name: str, case: str) -> float:
    """One fresh job of `case`: seconds from the SIGKILL to the replacement's first step."""
    spec, victim_index = CASES[case]
    victim = f"{name}-worker-{victim_index}"
    every_rank = ckpt.expected_files(WORKERS, PS_SHARDS if "parameterServer" in spec else 0)
    with tempfile.TemporaryDirectory() as d:
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(name, spec, Path(d)))
        try:
            wait_for(
                "the first checkpoint of every rank", lambda: ckpt.complete_steps(Path(d), every_rank), timeout=300
            )
            pod = core.read_namespaced_pod(victim, ns)
            t0 = time.time()
            if not kill_pod_processes(pod.metadata.uid, "ringleader_trainer"):
                raise SystemExit(f"[bench] no trainer process in {victim}")
            step = wait_for(
                f"the first step of {victim}'s replacement",
                functools.partial(first_step_after, core, ns, victim, pod.metadata.uid, t0),
                timeout=300,
            )
        finally:
            custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    return step - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kills", type=int, default=5, help="repetitions (fresh jobs) per case")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    args = p.parse_args()
    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    cluster.operator_up()
    config.load_kube_config(str(Layout.from_env().kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = new_namespace(core)
    rows = []
    try:
        for case in args.cases:
            times = []
            for rep in range(args.kills):
                took = measure(core, custom, ns, f"{case}-{rep}", case)
                times.append(took)
                print(f"[bench] {case} kill {rep + 1}/{args.kills}: full strength again {took:.2f} s after the "
                      f"SIGKILL of worker-{CASES[case][1]}", flush=True)  # fmt: skip
            rows.append({"case": case, "spec": CASES[case][0], "victim": f"worker-{CASES[case][1]}",
                         "recovery_s": times, "median_s": statistics.median(times), "max_s": max(times)})  # fmt: skip
            print(f"[bench] {case}: median {rows[-1]['median_s']:.2f} s, max {rows[-1]['max_s']:.2f} s over "
                  f"{len(times)} kills (goal <= {GOAL_S:g} s)", flush=True)  # fmt: skip
    finally:
        delete_namespace(core, ns)
    write_result("recovery", {"goal_s": GOAL_S, "kills": args.kills, "workers": WORKERS, "ps_shards": PS_SHARDS,
                              "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
