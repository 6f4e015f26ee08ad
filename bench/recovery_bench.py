"""Recovery time on the dev cluster, per strategy: from a worker's SIGKILL to the job's next completed step.

    python -m bench.recovery_bench [--kills 5] [--cases allreduce ps-sync ps-async local-sgd allreduce-store]
                                   [--nodes process real]

Each repetition runs a fresh TrainingJob of 3 workers (and for the parameter server one shard), the built-in
digits MLP paced at ~20 steps/s by a 50 ms sleep on worker 0, a step logged every step, checkpoints every 20
steps, restartPolicy ExitCode, the default restart back-off. It waits for the first checkpoint, SIGKILLs the
trainer process of the case's victim and measures from just before the kill to the first step the victim's
replacement logs: the moment the job trains at full strength again. Under allreduce and local SGD the
survivors wait for it in the re-formed group, so that is also their next step; under the asynchronous
parameter server the survivors never stopped and the figure is how long the job ran one worker short.
`allreduce-store` kills worker 0, which hosts the rendezvous store. A fresh job each time measures a first
failure: repeated failures of one rank wait out its exponential back-off on purpose.

`--nodes process real` runs each case on both node kinds in turn (kill 1 on the process node, kill 1 on the real
node, kill 2 ...), so both see the same machine load. On the real node the ranks run in the trainer image
(pulled from the dev cluster's registry), checkpoints go to a host folder mounted into every pod, and the
training process is killed from inside its container (`kubectl exec`, counted in the figure). Results go to
bench/results/recovery.json (process node only) or recovery_nodes.json with every repetition; nothing is
asserted.
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
from ringleader_devcluster import cluster, images, operatorprocess
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.processes import kill_pod_processes
from ringleader_trainer.checkpoints import store as ckpt

from bench.common import delete_namespace, new_namespace
from bench.record import write_result
from tests.e2e.helpers import KILL_TRAINING_PROCESS, real_node_template
from tests.support.cluster import kubectl, wait_for
from tests.support.jobs import GROUP, PLURAL, VERSION, training_job

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


def job(name: str, spec: dict[str, Any], checkpoints: Path, node: str = "process") -> dict[str, Any]:
    body = training_job(name, "", workers=WORKERS, **spec)
    if "parameterServers" in body["spec"]:
        body["spec"]["parameterServers"]["replicas"] = PS_SHARDS
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["restartPolicy"] = "ExitCode"
            if node == "real":  # the image's entry point is `python -m ringleader_trainer`: its options only
                template = real_node_template(*COMMAND[COMMAND.index("--example") :])
                template["spec"]["volumes"].append({"name": "ckpt", "hostPath": {"path": str(checkpoints)}})
                template["spec"]["containers"][0]["volumeMounts"].append(
                    {"name": "ckpt", "mountPath": str(checkpoints)}
                )
                body["spec"][role]["template"] = template
            else:
                body["spec"][role]["template"]["spec"]["containers"][0]["command"] = COMMAND
    body["spec"]["checkpoint"] = {"directory": str(checkpoints), "intervalSteps": 20}
    body["spec"]["runPolicy"] = {"backoffLimit": 2}
    return body


def kill_trainer(core: client.CoreV1Api, ns: str, pod: Any, node: str) -> None:
    """SIGKILL the pod's training process: from the host on the process node, from inside its container (the
    way a user could) on the real node."""
    if node == "real":
        layout = Layout.from_env()
        out = kubectl(layout, layout.kubeconfig, "exec", "-n", ns, pod.metadata.name, "-c", "trainer", "--",
                      "python", "-c", KILL_TRAINING_PROCESS).stdout  # fmt: skip
        if out.strip() == "killed []":
            raise SystemExit(f"[bench] no trainer process in {pod.metadata.name}")
    elif not kill_pod_processes(pod.metadata.uid, "ringleader_trainer"):
        raise SystemExit(f"[bench] no trainer process in {pod.metadata.name}")


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


def measure(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, name: str, case: str, node: str = "process"
) -> float:
    """One fresh job of `case` on `node`: seconds from the SIGKILL to the replacement's first step."""
    spec, victim_index = CASES[case]
    victim = f"{name}-worker-{victim_index}"
    every_rank = ckpt.expected_files(WORKERS, PS_SHARDS if "parameterServer" in spec else 0)
    with tempfile.TemporaryDirectory() as d:
        Path(d).chmod(0o777)  # the trainer image runs as uid 65532
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job(name, spec, Path(d), node))
        try:
            wait_for(
                "the first checkpoint of every rank", lambda: ckpt.complete_steps(Path(d), every_rank), timeout=300
            )
            pod = core.read_namespaced_pod(victim, ns)
            t0 = time.time()
            kill_trainer(core, ns, pod, node)
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
    p.add_argument("--nodes", nargs="+", choices=["process", "real"], default=["process"])
    args = p.parse_args()
    print(f"[bench] settings: kills={args.kills} cases={args.cases} nodes={args.nodes} workers={WORKERS} "
          f"ps_shards={PS_SHARDS} command={' '.join(COMMAND)}", flush=True)  # fmt: skip
    cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    operatorprocess.operator_up()
    layout = Layout.from_env()
    if "real" in args.nodes:
        images.publish(layout, images.TRAINER)
    config.load_kube_config(str(layout.kubeconfig))
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()
    ns = new_namespace(core)
    rows = []
    try:
        for case in args.cases:
            times: dict[str, list[float]] = {node: [] for node in args.nodes}
            for rep in range(args.kills):
                for node in args.nodes:
                    took = measure(core, custom, ns, f"{case}-{node[0]}{rep}", case, node)
                    times[node].append(took)
                    print(f"[bench] {case} on the {node} node, kill {rep + 1}/{args.kills}: full strength again "
                          f"{took:.2f} s after the SIGKILL of worker-{CASES[case][1]}", flush=True)  # fmt: skip
            for node, values in times.items():
                rows.append({"case": case, "node": node, "spec": CASES[case][0],
                             "victim": f"worker-{CASES[case][1]}", "recovery_s": values,
                             "median_s": statistics.median(values), "max_s": max(values)})  # fmt: skip
                row = rows[-1]
                print(f"[bench] {case} on the {node} node: median {row['median_s']:.2f} s, max {row['max_s']:.2f} s "
                      f"over {len(values)} kills (goal <= {GOAL_S:g} s)", flush=True)  # fmt: skip
    finally:
        delete_namespace(core, ns)
    name = "recovery" if args.nodes == ["process"] else "recovery_nodes"
    write_result(name, {"goal_s": GOAL_S, "kills": args.kills, "workers": WORKERS, "ps_shards": PS_SHARDS,
                        "nodes": args.nodes, "rows": rows})  # fmt: skip


if __name__ == "__main__":
    main()
