"""The NetworkPolicy every job gets, enforced for real (kube-router on the real node, netpol.py): under the chart's
operator, a job in the trainer image on the real node trains (its ranks reach each other) and shows its step (the
operator's pod reads their metrics), while a pod of another namespace, a pod of the same namespace that belongs to
no job, and a pod on the process node are refused on every port the job's pods listen on; the same strangers reach
a pod without a policy, so the refusal is the policy's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from ringleader_devcluster import cluster, images
from ringleader_devcluster.layout import Layout
from ringleader_devcluster.realpods import on_real_node
from ringleader_operator.names import METRICS_PORT

from tests.support.cluster import kubectl, logs, python_pod, wait_for, wait_phase
from tests.support.jobs import condition, create, get, pods_of
from tests.support.shared import one_at_a_time

from .helpers import diagnosis, is_true, trainer_job, wait_finished

# Serial: the chart's operator replaces the one every other test uses while it runs.
pytestmark = pytest.mark.serial

OPEN_PORT = 7000  # the policy-free pod's listener: what a stranger reaches to show it could reach anything
# Prints the TCP ports the pod listens on (state 0A in /proc/net/tcp and tcp6), one per line: what the job opened.
LISTENING = (
    "rows = [l.split() for f in ('/proc/net/tcp', '/proc/net/tcp6') for l in open(f).readlines()[1:]]; "
    "print('\\n'.join(sorted({str(int(r[1].rsplit(':', 1)[1], 16)) for r in rows if r[3] == '0A'})))"
)
SERVE = f"""
import socketserver
class Hello(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"hello\\n")
socketserver.ThreadingTCPServer(("0.0.0.0", {OPEN_PORT}), Hello).serve_forever()
"""


@pytest.fixture
def enforced(layout: Layout, kubeconfig: Path) -> None:
    """kube-router's policy controller on the real node (started once; it stays until the cluster goes down)."""
    with one_at_a_time(layout):
        cluster.start_network_policy(layout)


def probe(targets: list[tuple[str, int]]) -> str:
    """Python: try to connect to each address:port, print `ADDRESS:PORT open|refused`, then `done`."""
    return (
        "import socket\n"
        f"for ip, port in {targets!r}:\n"
        "    try:\n"
        "        socket.create_connection((ip, port), timeout=2).close(); print(f'{ip}:{port} open', flush=True)\n"
        "    except OSError:\n"
        "        print(f'{ip}:{port} refused', flush=True)\n"
        "print('done', flush=True)\n"
    )


def real_node_prober(name: str, script: str) -> dict[str, Any]:
    """A pod on the real node (in the trainer image, for its Python; Pod Security "restricted") running `script`."""
    container = {"name": "main", "command": ["python", "-c", script]}
    template = on_real_node({"spec": {"restartPolicy": "Never", "containers": [container]}}, images.TRAINER.name)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": template["spec"]}


def outcomes(core: client.CoreV1Api, ns: str, pod: str) -> dict[str, str]:
    """`{address:port: open|refused}` once the probe pod said `done`."""
    wait_phase(core, ns, pod, {"Running", "Succeeded"}, timeout=120)

    def finished() -> str | None:
        text = logs(core, ns, pod)
        return text if "done" in text else None

    text = wait_for(f"probe {ns}/{pod}", finished, timeout=180)
    return dict(line.split() for line in text.splitlines() if line.count(" ") == 1 and ":" in line)


@pytest.mark.usefixtures("release", "enforced")
def test_a_jobs_policy_admits_its_ranks_and_the_operator_and_refuses_everyone_else(
    layout: Layout, kubeconfig: Path, core: client.CoreV1Api, custom: client.CustomObjectsApi,
    restricted_namespace: str,
) -> None:  # fmt: skip
    ns = restricted_namespace
    create(custom, ns, trainer_job("guarded", "allreduce", "--steps", "1500", "--straggler", "0:0.05"))

    def step() -> int | None:
        return ((get(custom, ns, "guarded").get("status") or {}).get("progress") or {}).get("step") or None

    assert wait_for("the chart's operator to read the guarded job's step", step, timeout=240) > 0
    ranks = [p for p in pods_of(core, ns, "guarded") if p.status.phase == "Running"]
    targets = []
    for pod in ranks:
        listed = kubectl(layout, kubeconfig, "exec", "-n", ns, pod.metadata.name, "-c", "trainer", "--",
                         "python", "-c", LISTENING).stdout.split()  # fmt: skip
        targets += [(pod.status.pod_ip, int(port)) for port in listed]
    assert len(ranks) == 2 and all((p.status.pod_ip, METRICS_PORT) in targets for p in ranks), targets

    # A pod without any policy, listening: every stranger must reach it (the probes can connect at all).
    other = f"other-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": other}})
    try:
        core.create_namespaced_pod(other, python_pod("open", SERVE))
        open_ip = wait_phase(core, other, "open", {"Running"}, timeout=60).status.pod_ip
        probes = [*targets, (open_ip, OPEN_PORT)]
        core.create_namespaced_pod(other, real_node_prober("stranger", probe(probes)))
        core.create_namespaced_pod(ns, real_node_prober("neighbour", probe(probes)))
        core.create_namespaced_pod(other, python_pod("process-stranger", probe(probes)))
        for where, pod in ((other, "stranger"), (ns, "neighbour"), (other, "process-stranger")):
            seen = outcomes(core, where, pod)
            assert seen.pop(f"{open_ip}:{OPEN_PORT}") == "open", (pod, seen)
            assert seen == {f"{ip}:{port}": "refused" for ip, port in targets}, (pod, seen)
    finally:
        core.delete_namespace(other)
    job = wait_finished(custom, ns, "guarded", timeout=300)
    assert is_true(job, "Succeeded"), diagnosis(core, ns, job)


@pytest.mark.usefixtures("release", "enforced")
def test_a_job_the_operator_cannot_reach_is_never_stalled(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, restricted_namespace: str
) -> None:
    """progressDeadlineSeconds 10, and a policy of the user's own in place of the job's: its ranks reach each
    other, the operator reaches none of their pages. Its progress is unknown (Stalled Unknown, reason
    ProgressUnavailable, saying why), never a stall: no rank is replaced and the job succeeds."""
    ns = restricted_namespace
    networking = client.NetworkingV1Api(core.api_client)
    body = trainer_job("unreached", "allreduce", "--steps", "600", "--straggler", "0:0.05",
                       runPolicy={"progressDeadlineSeconds": 10})  # fmt: skip
    create(custom, ns, body)

    def jobs_policy() -> str | None:
        return next((p.metadata.name for p in networking.list_namespaced_network_policy(ns).items), None)

    networking.delete_namespaced_network_policy(wait_for("the job's NetworkPolicy", jobs_policy, timeout=60), ns)
    ranks = {"matchLabels": {"ringleader.dev/job-name": "unreached"}}
    only_ranks = {"podSelector": ranks, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": ranks}]}]}
    own = {"metadata": {"name": "ranks-only"}, "spec": only_ranks}
    networking.create_namespaced_network_policy(ns, own)

    def unknown() -> dict[str, Any] | None:
        found = condition(get(custom, ns, "unreached"), "Stalled")
        return found if found is not None and found["status"] == "Unknown" else None

    stalled = wait_for("unreached's Stalled Unknown", unknown, timeout=240)
    print(f"Stalled Unknown: {stalled['message']}")
    assert stalled["reason"] == "ProgressUnavailable", stalled
    assert "progressDeadlineSeconds is not acted on until one can be read" in stalled["message"], stalled
    job = wait_finished(custom, ns, "unreached", timeout=300)
    assert is_true(job, "Succeeded"), diagnosis(core, ns, job)
    assert (job["status"].get("stalls") or 0) == 0
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=unreached").items
    assert not [e for e in events if e.reason in ("ProgressDeadlineExceeded", "RankStalled")], events
