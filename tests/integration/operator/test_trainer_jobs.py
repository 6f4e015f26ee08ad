"""The real trainer through the operator on the dev cluster: a parameter-server job succeeds while its shards'
ports take stray connections, which the shards drop and log. (Each strategy's run through the operator is
tests/e2e/test_examples_chart.py's: the examples are one job per strategy; status.progress following rank 0 is
test_jobs'.)"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client import ApiException

from tests.support.cluster import logs, wait_for
from tests.support.jobs import condition, create, finished, get, pods_of, training_job

pytestmark = pytest.mark.usefixtures("operator")

# Worker 0 sleeps 50 ms a step: the run lasts long enough for many rounds of strays.
TRAINER = ["-m", "ringleader_trainer", "--example", "digits-mlp", "--steps", "300", "--log-every", "10",
           "--straggler", "0:0.05", "--timeout", "60", "--rendezvous-timeout", "120"]  # fmt: skip


def trainer_job(name: str, **spec: Any) -> dict[str, Any]:
    body = training_job(name, "", **spec)
    command = ["python", "-u", *TRAINER]
    for role in ("workers", "parameterServers"):
        if role in body["spec"]:
            body["spec"][role]["template"]["spec"]["containers"][0]["command"] = list(command)
    return body


class Strays:
    """While open: every 0.3 s, a bare connect, garbage and a connection held open saying nothing, to `port`
    of each of the job's parameter-server pods that has an address. `tally` says what was sent when, for a
    failure message."""

    def __init__(self, core: client.CoreV1Api, namespace: str, job: str, port: int = 29600) -> None:
        self.core, self.namespace, self.job, self.port = core, namespace, job, port
        self.stop = threading.Event()
        self.silent: list[socket.socket] = []
        self.began = time.monotonic()
        self.tally: dict[str, Any] = {"connected": 0, "first at": None, "api errors": []}
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Strays:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        for s in self.silent:
            s.close()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:  # an API hiccup must not end the strays: a dead thread would fail the test for the wrong reason
                pods = pods_of(self.core, self.namespace, self.job, _request_timeout=5)
            except (ApiException, urllib3.exceptions.HTTPError, OSError) as e:  # shown if the test fails
                self.tally["api errors"] = [*self.tally["api errors"][-4:], repr(e)]
                pods = []
            for pod in pods:
                if "-ps-" in pod.metadata.name and pod.status.pod_ip:
                    self._send(pod.status.pod_ip)
            time.sleep(0.3)

    def _send(self, ip: str) -> None:
        for payload in (None, b"GET / HTTP/1.0\r\n\r\n", b""):
            with contextlib.suppress(OSError):
                s = socket.create_connection((ip, self.port), timeout=1)
                self.tally["connected"] += 1
                self.tally["first at"] = self.tally["first at"] or round(time.monotonic() - self.began, 1)
                if payload is None:
                    self.silent.append(s)  # held open, says nothing
                    continue
                s.sendall(payload)
                s.close()


def test_a_parameter_server_job_succeeds_while_its_shard_ports_take_stray_connections(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str
) -> None:
    """From the moment a shard has an address until the job ends, its port gets a bare connect, garbage and a
    connection that stays silent, every 0.3 s: what a port scan or a tcpSocket probe does. Before the job token
    a stray taking a worker's slot failed the shard and with it the job.

    A shard listens only while it serves, and admits for as long as it serves (a lost worker's replacement takes
    its slot back at any time), so the strays meet its gate throughout the run: it drops and logs them, and the
    workers train to the end."""
    create(custom, namespace, trainer_job("strays", strategy="parameter-server"))
    rejected = '"event": "connection-rejected"'
    shard = ""

    def done() -> dict[str, Any] | None:
        """The job once it ended; meanwhile shard 0's log, read while the job runs (a finished job's parameter
        servers, still running when the workers end, are deleted)."""
        nonlocal shard
        if rejected not in shard:
            with contextlib.suppress(ApiException):  # not created or not started yet
                shard = logs(core, namespace, "strays-ps-0", container="trainer")
        job = get(custom, namespace, "strays")
        return job if finished(job) else None

    with Strays(core, namespace, "strays") as strays:
        job = wait_for("the strays job to finish", done, timeout=300)
    assert condition(job, "Succeeded"), (condition(job, "Failed"), (job.get("status") or {}).get("ranks"))
    assert rejected in shard, (strays.tally, shard[-3000:])
    assert "handshake" in shard, shard[-3000:]  # bare: closed before it; garbage: not ours; silent: none in 10 s
