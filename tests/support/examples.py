"""The project's examples as a test applies them: examples/*.yaml as written but for the built-in trainer's step
count and the PVC example's volume (bound to the test's namespace), and examples/kubeflow/ converted with
`ringleader convert` together with their scripts' ConfigMap, as the README has users do."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from ringleader.convert import convert_documents
from ringleader_devcluster.layout import REPO_ROOT

from tests.support.cluster import logs

EXAMPLES = sorted((REPO_ROOT / "examples").glob("*.yaml"))
KUBEFLOW = REPO_ROOT / "examples" / "kubeflow"
KUBEFLOW_SCRIPTS = KUBEFLOW / "scripts.yaml"
KUBEFLOW_EXAMPLES = sorted(p for p in KUBEFLOW.glob("*.yaml") if p != KUBEFLOW_SCRIPTS)
KUEUE = REPO_ROOT / "examples" / "kueue"
RANK_LINE = re.compile(r"rank (\d+) world_size (\d+)")  # what each script of examples/kubeflow/ prints


def trainer_command(spec: dict[str, Any]) -> list[str] | None:
    """The built-in trainer's command of a TrainingJob spec's workers, or None for a script of the user's own."""
    command = spec["workers"]["template"]["spec"]["containers"][0].get("command") or []
    return command if "ringleader_trainer" in command else None


def shortened(doc: dict[str, Any], steps: int | None = None, extra: Sequence[str] = ()) -> dict[str, Any]:
    """The TrainingJob `doc` with the built-in trainer's `--steps` set and its `--log-every` cut with them to a
    tenth of the steps (the progress gauges, STEP and LOSS, move at each log line, so a run cut short still shows
    several), or kept as written when `steps` is None; `extra` arguments added."""
    for role in ("workers", "parameterServers"):
        template = (doc["spec"].get(role) or {}).get("template")
        if not template:
            continue
        command = template["spec"]["containers"][0].get("command") or []
        if "ringleader_trainer" not in command:
            continue
        settings = [] if steps is None else [("--steps", steps), ("--log-every", max(1, steps // 10))]
        for flag, value in settings:
            if flag in command:
                command[command.index(flag) + 1] = str(value)
            else:
                command += [flag, str(value)]
        command += list(extra)
    return doc


def prepared(
    path: Path, namespace: str, steps: int | None = None, extra: Sequence[str] = ()
) -> tuple[list[dict[str, Any]], str]:
    """The documents of examples/`path` ready to apply in `namespace` (the trainer's arguments changed as
    `shortened` does), and its TrainingJob's name. A PersistentVolume is cluster-scoped: it gets a name and a
    host folder of its own, bound to this namespace's claim."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    suffix = uuid.uuid4().hex[:6]
    for d in docs:
        if d["kind"] == "PersistentVolume":
            d["metadata"]["name"] += f"-{suffix}"
            d["spec"]["claimRef"]["namespace"] = namespace
            d["spec"]["hostPath"]["path"] += f"-{suffix}"
        if d["kind"] == "PersistentVolumeClaim":
            d["spec"]["volumeName"] = next(x["metadata"]["name"] for x in docs if x["kind"] == "PersistentVolume")
        if d["kind"] == "TrainingJob":
            shortened(d, steps, extra)
    return docs, next(d["metadata"]["name"] for d in docs if d["kind"] == "TrainingJob")


def queued(
    namespace: str, cluster_queue: str, steps: int | None = None, extra: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """examples/kueue: its queues (the ClusterQueue named `cluster_queue`, the LocalQueue in `namespace`) and its
    queued job, the trainer's arguments changed as `shortened` does."""
    docs = [d for d in yaml.safe_load_all((KUEUE / "queues.yaml").read_text()) if d]
    for d in docs:
        if d["kind"] == "ClusterQueue":
            d["metadata"]["name"] = cluster_queue
        if d["kind"] == "LocalQueue":
            d["metadata"]["namespace"] = namespace
            d["spec"]["clusterQueue"] = cluster_queue
    return [*docs, shortened(yaml.safe_load((KUEUE / "digits-queued.yaml").read_text()), steps, extra)]


def converted(path: Path, workers: dict[str, Any] | None = None, **env: str) -> list[dict[str, Any]]:
    """examples/kubeflow/`path` and its scripts' ConfigMap through `ringleader convert`, the TrainingJob last,
    with `workers` fields changed and `env` added to its trainer container."""
    docs = [*yaml.safe_load_all(KUBEFLOW_SCRIPTS.read_text()), *yaml.safe_load_all(path.read_text())]
    documents = [dict(d) for d in convert_documents(docs).documents]
    (job,) = [d for d in documents if d["kind"] == "TrainingJob"]
    job["spec"]["workers"] |= workers or {}
    container = job["spec"]["workers"]["template"]["spec"]["containers"][0]
    container["env"] = [*(container.get("env") or []), *({"name": k, "value": v} for k, v in env.items())]
    return [d for d in documents if d["kind"] != "TrainingJob"] + [job]


def ranks_seen(core: client.CoreV1Api, namespace: str, job: str, pods: int) -> dict[int, int]:
    """rank -> world size, from the `rank R world_size W` lines of every worker pod of a Kubeflow example."""
    seen: dict[int, int] = {}
    for i in range(pods):
        for rank, world in RANK_LINE.findall(logs(core, namespace, f"{job}-worker-{i}", container="trainer")):
            seen[int(rank)] = int(world)
    return seen
