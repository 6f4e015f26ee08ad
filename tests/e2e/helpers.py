"""TrainingJobs whose ranks run in the trainer image on the real node, and reading their outcome."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from ringleader_devcluster import images
from ringleader_devcluster.realpods import on_real_node

from tests.support.cluster import logs, wait_for
from tests.support.jobs import GROUP, VERSION, condition, get, pods_of

# Run inside a rank's container: SIGKILL the training process the trainer's supervisor (pid 1) forked.
KILL_TRAINING_PROCESS = (
    "import os; me = os.getpid(); "
    "victims = [int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, me) "
    "and b'ringleader_trainer' in open(f'/proc/{p}/cmdline', 'rb').read()]; "
    "[os.kill(p, 9) for p in victims]; print('killed', victims)"
)


def real_node_template(*args: str, memory: str | None = None) -> dict[str, Any]:
    """A rank in the trainer image on the real node, meeting Pod Security "restricted"."""
    container: dict[str, Any] = {"name": "trainer", "args": list(args)}  # the image's entry point is the trainer
    if memory:
        container["resources"] = {"limits": {"memory": memory}}
    template = {"spec": {"terminationGracePeriodSeconds": 5, "containers": [container]}}
    return on_real_node(template, images.TRAINER.name)


def trainer_job(
    name: str, strategy: str, *args: str, workers: int = 2, memory: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A digits-MLP TrainingJob in the trainer image on the real node, with `args` added to the trainer's."""
    trainer_args = ("--example", "digits-mlp", "--log-every", "20", *args)
    template = real_node_template(*trainer_args, memory=memory)
    body: dict[str, Any] = {"strategy": strategy, "workers": {"replicas": workers, "template": template}, **spec}
    if strategy == "parameter-server":
        body["parameterServers"] = {"replicas": 1, "template": real_node_template(*trainer_args)}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob", "metadata": {"name": name}, "spec": body}


def is_true(job: dict[str, Any], kind: str) -> bool:
    return (condition(job, kind) or {}).get("status") == "True"


def wait_finished(custom: client.CustomObjectsApi, ns: str, name: str, timeout: float = 300) -> dict[str, Any]:
    """The job once it is Succeeded or Failed."""

    def finished() -> dict[str, Any] | None:
        job = get(custom, ns, name)
        return job if is_true(job, "Succeeded") or is_true(job, "Failed") else None

    return wait_for(f"TrainingJob {ns}/{name} to finish", finished, timeout)


def diagnosis(core: client.CoreV1Api, ns: str, job: dict[str, Any]) -> str:
    """The job's status and the last lines of each rank's log, for a failed assertion."""
    out = [str(job.get("status"))]
    for pod in pods_of(core, ns, job["metadata"]["name"]):
        try:
            tail = logs(core, ns, pod.metadata.name, "trainer", tail_lines=15)
        except client.ApiException as e:
            tail = f"(no logs: {e.reason})"
        out.append(f"--- {pod.metadata.name}\n{tail}")
    return "\n".join(out)
