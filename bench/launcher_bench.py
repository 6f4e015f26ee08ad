"""Launcher benchmark: time from TrainingJob creation until every rank is past init_process_group, under
torchrun with no options (the PET_* contract) and under Ringleader's own trainer (its rendezvous in `from_env`).

    python -m bench.launcher_bench [--workers 8] [--reps 5]

Needs the dev cluster (`make dev-cluster`); runs the operator from this checkout if none runs. Each repetition runs both
launchers, one after the other, alternating which goes first, with the same job otherwise (allreduce, gloo, the
process node, `--workers` worker pods). Every rank prints the wall-clock time just after its process group
formed; a job's figure is the last rank's time minus the moment just before the create call. The pods run on
this machine, so their clocks are the benchmark's. Results go to bench/results/launchers.json with every
repetition; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kubernetes import client, config
from ringleader_devcluster import operatorprocess
from ringleader_devcluster.layout import Layout

from bench.common import delete_namespace, new_namespace
from bench.record import range_verdict, summary, write_result

GROUP, VERSION, PLURAL = "ringleader.dev", "v1alpha1", "trainingjobs"
MARK = "initialized-at"
TORCHRUN_SCRIPT = f"""\
import datetime, time
import torch.distributed as dist
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=120))
print("{MARK}", time.time(), flush=True)
dist.barrier()
dist.destroy_process_group()
"""
TRAINER_SCRIPT = f"""\
import time, ringleader_trainer
strategy = ringleader_trainer.from_env()
print("{MARK}", time.time(), flush=True)
strategy.close()
"""
COMMANDS = {
    "torchrun": ["torchrun", "/scripts/init.py"],
    "trainer": ["python", "-u", "-c", TRAINER_SCRIPT],
}


def job(name: str, workers: int, command: list[str]) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "ringleader/trainer:dev",
        "command": command,
        "volumeMounts": [{"name": "script", "mountPath": "/scripts", "readOnly": True}],
    }
    template = {
        "spec": {
            "nodeSelector": {"ringleader.dev/process-node": "true"},
            "terminationGracePeriodSeconds": 2,
            "containers": [container],
            "volumes": [{"name": "script", "configMap": {"name": "launcher-bench"}}],
        }
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"workers": {"replicas": workers, "restartPolicy": "Never", "template": template}},
    }


def run_once(core: client.CoreV1Api, custom: client.CustomObjectsApi, launcher: str, workers: int) -> float:
    ns = new_namespace(core, "launchers")
    try:
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "launcher-bench"}, "data": {"init.py": TORCHRUN_SCRIPT}}
        )
        t0 = time.time()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job("j", workers, COMMANDS[launcher]))
        deadline = time.monotonic() + 600
        while True:
            conditions = {
                c["type"]: c["status"]
                for c in (custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "j").get("status") or {}).get(
                    "conditions", []
                )
            }
            if conditions.get("Succeeded") == "True":
                break
            if conditions.get("Failed") == "True" or time.monotonic() > deadline:
                raise SystemExit(f"bench: the {launcher} job did not succeed: {conditions}")
            time.sleep(0.5)
        marks = []
        for i in range(workers):
            lines = core.read_namespaced_pod_log(f"j-worker-{i}", ns, container="trainer").splitlines()
            marks += [float(line.split()[1]) for line in lines if line.startswith(MARK)]
        if len(marks) != workers:
            raise SystemExit(f"bench: {len(marks)} of {workers} ranks of the {launcher} job reported")
        return max(marks) - t0
    finally:
        delete_namespace(core, ns)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    operatorprocess.operator_up()
    api = config.new_client_from_config(config_file=str(Layout.from_env().kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    print(f"[bench] settings: {args.workers} workers, allreduce, gloo, process node, {args.reps} repetitions")
    runs: dict[str, list[float]] = {launcher: [] for launcher in COMMANDS}
    for rep in range(args.reps):
        order = list(COMMANDS) if rep % 2 == 0 else list(reversed(COMMANDS))
        for launcher in order:
            runs[launcher].append(run_once(core, custom, launcher, args.workers))
            print(f"[bench] rep {rep + 1}/{args.reps} {launcher}: {runs[launcher][-1]:.2f}s", flush=True)
    medians = {k: statistics.median(v) for k, v in runs.items()}
    verdict = range_verdict(runs)
    result = {
        "settings": {"workers": args.workers, "reps": args.reps, "strategy": "allreduce", "node": "process"},
        "create_to_all_initialized_s": {k: {"summary": summary(v), "runs": v} for k, v in runs.items()},
        "ratio_torchrun_over_trainer": medians["torchrun"] / medians["trainer"],
        "verdict": verdict,
    }
    write_result("launchers", result)
    for launcher, values in runs.items():
        print(f"{launcher}: median {medians[launcher]:.2f}s (runs {', '.join(f'{v:.2f}' for v in values)})")
    print(f"torchrun / trainer: {result['ratio_torchrun_over_trainer']:.2f}x; {verdict}")


if __name__ == "__main__":
    main()
