"""The real trainer through the operator on the dev cluster: one job per strategy runs the digits example to
Succeeded, and status.progress shows the step rising while it runs; a parameter-server job succeeds while its
shards' ports take stray connections, which the shards drop and log."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException

from tests.devcluster.helpers import logs, wait_for

from .helpers import condition, create, finished, get, pods_of, training_job

pytestmark = pytest.mark.usefixtures("operator")

# Worker 0 sleeps 50 ms a step so the run outlasts a few of the operator's 5-second progress scrapes.
TRAINER = ["-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "300", "--log-every", "10",
           "--straggler", "0:0.05", "--timeout", "60", "--rendezvous-timeout", "120"]  # fmt: skip


def trainer_job(name: str, **spec: Any) -> dict[str, Any]:
    body = training_job(name, "", **spec)
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = ["python", "-u", *TRAINER]
    return body


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"strategy": "parameter-server", "parameterServer": {"mode": "bounded-staleness", "maxStaleness": 2}},
        {"strategy": "local-sgd", "localSGD": {"period": 4}},
    ],
    ids=["allreduce", "parameter-server", "local-sgd"],
)
def test_each_strategy_trains_to_succeeded_with_rising_progress(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]
) -> None:
    create(custom, namespace, trainer_job("digits", **spec))
    steps: list[int] = []

    def finished() -> dict[str, Any] | None:
        job = get(custom, namespace, "digits")
        step = ((job.get("status") or {}).get("progress") or {}).get("step")
        if step is not None and (not steps or step != steps[-1]):
            steps.append(step)
        done = [c for c in ("Succeeded", "Failed") if (cond := condition(job, c)) and cond["status"] == "True"]
        return job if done else None

    job = wait_for("the digits job to finish", finished, timeout=300)
    assert condition(job, "Succeeded"), (condition(job, "Failed"), (job.get("status") or {}).get("ranks"))
    assert len(steps) >= 2 and steps == sorted(steps) and steps[0] < steps[-1], steps


def test_a_parameter_server_job_succeeds_while_its_shard_ports_take_stray_connections(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """From the moment a shard has an address until the job ends, its port gets a bare connect, garbage and a
    connection that stays silent, every 0.3 s: what a port scan or a tcpSocket probe does. Before the job token
    a stray taking a worker's slot failed the shard and with it the job. The workers start 15 s late, so strays
    are waiting at the shards' ports (open from the shards' start) when the shards begin admitting: once every
    worker's slot is claimed, later connections only wait in the backlog."""
    body = trainer_job("strays", strategy="parameter-server")
    worker = body["spec"]["workers"]["template"]["spec"]["containers"][0]
    worker["command"] = ["sh", "-c", 'sleep 15; exec "$@"', "sh", *worker["command"]]
    create(custom, namespace, body)
    stop = threading.Event()
    silent: list[socket.socket] = []

    def strays() -> None:
        while not stop.is_set():
            for pod in pods_of(core, namespace, "strays"):
                if "-ps-" not in pod.metadata.name or not pod.status.pod_ip:
                    continue
                for payload in (None, b"GET / HTTP/1.0\r\n\r\n", b""):
                    with contextlib.suppress(OSError):
                        s = socket.create_connection((pod.status.pod_ip, 29600), timeout=1)
                        if payload is None:
                            silent.append(s)  # held open, says nothing
                            continue
                        s.sendall(payload)
                        s.close()
            time.sleep(0.3)

    thread = threading.Thread(target=strays, daemon=True)
    thread.start()

    def rejections() -> str | None:
        """Shard 0's log once it shows a dropped connection (read while the job runs: a finished job's
        parameter servers, still running when the workers end, are deleted)."""
        try:
            shard = logs(core, namespace, "strays-ps-0", container="trainer")
        except ApiException:  # not created or not started yet
            return None
        return shard if '"event": "connection-rejected"' in shard else None

    def done() -> dict[str, Any] | None:
        job = get(custom, namespace, "strays")
        return job if finished(job) else None

    try:
        shard = wait_for("shard 0 to log a dropped connection", rejections, timeout=180)
        job = wait_for("the strays job to finish", done, timeout=300)
    finally:
        stop.set()
        thread.join(10)
        for s in silent:
            s.close()
    assert condition(job, "Succeeded"), (condition(job, "Failed"), (job.get("status") or {}).get("ranks"))
    assert "handshake" in shard, shard[-3000:]  # bare: closed before it; garbage: not ours; silent: none in 10 s
