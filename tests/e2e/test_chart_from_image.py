"""The chart installed with helm from the operator image, its pod on the real node in a namespace enforcing Pod
Security "restricted": the operator it runs (in-cluster config through the `kubernetes` Service) takes a job in
the trainer image to Succeeded and reads the progress of a job on the process node. (`helm upgrade` and
`helm uninstall`: test_upgrade_and_uninstall.py, after every test of this release.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import images, realnode

from tests.support.cluster import wait_for
from tests.support.jobs import create, digits_job, get

from .helpers import diagnosis, is_true, trainer_job, wait_finished

# Serial: the chart's operator replaces the one every other test uses while it runs.
pytestmark = pytest.mark.serial


def operator_pods(core: client.CoreV1Api, name: str, ns: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(ns, label_selector=f"app.kubernetes.io/instance={name}").items)


def run_job(core: client.CoreV1Api, custom: client.CustomObjectsApi, ns: str, job: str) -> None:
    create(custom, ns, trainer_job(job, "allreduce", "--steps", "30"))
    finished = wait_finished(custom, ns, job, timeout=180)
    assert is_true(finished, "Succeeded"), diagnosis(core, ns, finished)


def progress_of_a_process_node_job(core: client.CoreV1Api, custom: client.CustomObjectsApi, tmp_path: Path) -> None:
    """A job whose ranks run on the process node: the chart's operator, a pod on the real node, reads worker 0's
    page across the one pod network and shows its step (STEP in `kubectl get tj`), and the job's progress
    deadline finds no stall on the way to Succeeded."""
    ns = f"proc-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        wait_for("default service account", lambda: core.list_namespaced_service_account(ns).items, timeout=30)
        create(custom, ns, digits_job("proc", 2, 400, tmp_path, runPolicy={"progressDeadlineSeconds": 60}))

        def step() -> int | None:
            return ((get(custom, ns, "proc").get("status") or {}).get("progress") or {}).get("step") or None

        assert wait_for("the chart's operator to show the process-node job's step", step, timeout=150) > 0
        finished = wait_finished(custom, ns, "proc", timeout=240)
        assert is_true(finished, "Succeeded") and not finished["status"].get("stalls"), diagnosis(core, ns, finished)
    finally:
        core.delete_namespace(ns)


def test_the_chart_from_the_operator_image_installs_on_the_real_node_and_runs_jobs_on_both_nodes(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, api: client.ApiClient,
    restricted_namespace: str, release: tuple[str, str], tmp_path: Path,
) -> None:  # fmt: skip
    name, ns = release
    [pod] = operator_pods(core, name, ns)
    assert pod.spec.node_name == realnode.NODE_NAME and pod.spec.containers[0].image == images.OPERATOR.name
    assert (
        pod.spec.security_context.run_as_non_root and pod.spec.containers[0].security_context.read_only_root_filesystem
    )
    run_job(core, custom, restricted_namespace, "first")
    progress_of_a_process_node_job(core, custom, tmp_path)
    # What the chart's operator made for the job besides its pods: the token Secret (its own) and, with the
    # chart's default networkPolicy.enabled, a NetworkPolicy admitting the job's pods and the operator's pods.
    uid = get(custom, restricted_namespace, "first")["metadata"]["uid"]
    [secret] = core.list_namespaced_secret(restricted_namespace, label_selector="ringleader.dev/job-name=first").items
    assert secret.metadata.name == f"first-token-{uid[:8]}" and secret.immutable
    assert secret.metadata.owner_references[0].uid == uid
    [policy] = (
        client.NetworkingV1Api(api)
        .list_namespaced_network_policy(restricted_namespace, label_selector="ringleader.dev/job-name=first")
        .items
    )
    assert policy.metadata.owner_references[0].uid == uid
    assert policy.spec.pod_selector.match_labels == {"ringleader.dev/job-name": "first"}
    [own, operator] = policy.spec.ingress
    assert own._from[0].pod_selector.match_labels == {"ringleader.dev/job-name": "first"} and not own.ports
    assert operator._from[0].namespace_selector.match_labels == {"kubernetes.io/metadata.name": ns}
    assert operator._from[0].pod_selector.match_labels["app.kubernetes.io/instance"] == name
    assert [(x.protocol, x.port) for x in operator.ports] == [("TCP", 9090)]
