"""The helm chart: it lints, renders, passes the API server's dry run with several value sets, rejects bad
values by name, and installed with `helm install` runs a job to Succeeded through its own operator; `helm
uninstall` then leaves nothing of what it added."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from ringleader_devcluster import cluster
from ringleader_devcluster.layout import REPO_ROOT, Layout

from tests.devcluster.helpers import wait_for

from .helpers import create, training_job, wait_condition

CHART = REPO_ROOT / "helm" / "ringleader"


def helm(layout: Layout, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(layout.binary("helm")), "--kubeconfig", str(layout.kubeconfig), *args],
        capture_output=True, text=True, timeout=240, check=check,
    )  # fmt: skip


def render(layout: Layout, *values: str) -> str:
    return helm(layout, "template", "rl", str(CHART), "--namespace", "ringleader-system", *values).stdout


def test_the_chart_lints_strictly(layout: Layout) -> None:
    out = helm(layout, "lint", "--strict", str(CHART), check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize(
    "values",
    [[], ["--set", "replicaCount=2"], ["--set", "watchNamespaces={default,kube-public}", "--set", "replicaCount=3"]],
    ids=["defaults", "two-replicas", "namespaced"],
)
def test_rendered_manifests_pass_a_server_side_dry_run(layout: Layout, kubeconfig: Path, values: list[str]) -> None:
    manifests = render(layout, *values)
    kinds = {d["kind"] for d in yaml.safe_load_all(manifests) if d}
    assert {"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Service"} <= kinds
    cluster.kubectl(layout, "apply", "-f", str(REPO_ROOT / "crds"))  # the CRDs the peering objects need
    cluster.kubectl(layout, "create", "namespace", "ringleader-system", check=False)
    dry = subprocess.run(
        [str(layout.binary("kubectl")), "--kubeconfig", str(kubeconfig), "apply", "--dry-run=server", "-f", "-"],
        input=manifests, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr


def test_leader_election_follows_the_replica_count(layout: Layout) -> None:
    def args(*values: str) -> list[str]:
        docs = [d for d in yaml.safe_load_all(render(layout, *values)) if d]
        deployment = next(d for d in docs if d["kind"] == "Deployment")
        return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    assert "--standalone" in args()
    assert "--peering=ringleader" in args("--set", "replicaCount=2")
    assert "--standalone" in args("--set", "replicaCount=2", "--set", "leaderElection.enabled=false")
    assert "--namespace=team-a" in args("--set", "watchNamespaces={team-a}")


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("replicaCount=two", "/replicaCount"),
        ("metrics.port=70000", "/metrics/port"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("watchNamespaces={Not_A_Namespace}", "/watchNamespaces/0"),
        ("resourcez.cpu=1", "resourcez"),
    ],
)
def test_invalid_values_fail_on_the_schema_naming_the_value(layout: Layout, value: str, named: str) -> None:
    out = helm(layout, "template", "rl", str(CHART), "--set", value, check=False)
    assert out.returncode != 0
    assert named in out.stderr, out.stderr


def test_installed_chart_runs_a_job_and_uninstall_removes_it(
    layout: Layout, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str, api: client.ApiClient,
    chart_operator: str,
) -> None:  # fmt: skip
    release, release_ns = chart_operator, "ringleader-system"
    apps = client.AppsV1Api(api)
    deployment = apps.read_namespaced_deployment(f"{release}-ringleader", release_ns)
    pod = core.list_namespaced_pod(release_ns, label_selector=f"app.kubernetes.io/instance={release}").items[0]
    security = pod.spec.containers[0].security_context
    assert security.read_only_root_filesystem and not security.allow_privilege_escalation
    assert pod.spec.security_context.run_as_non_root and deployment.status.ready_replicas == 1

    create(custom, namespace, training_job("via-chart", "print('hello from', __import__('os').environ['RANK'])"))
    wait_condition(custom, namespace, "via-chart", "Succeeded", timeout=120)

    helm(layout, "uninstall", release, "--namespace", release_ns, "--wait", "--timeout", "120s")
    rbac = client.RbacAuthorizationV1Api(api)
    selector = f"app.kubernetes.io/instance={release}"
    wait_for(
        "everything the release added to be gone",
        lambda: (
            not (
                apps.list_namespaced_deployment(release_ns, label_selector=selector).items
                or core.list_namespaced_pod(release_ns, label_selector=selector).items
                or core.list_namespaced_service(release_ns, label_selector=selector).items
                or core.list_namespaced_service_account(release_ns, label_selector=selector).items
                or rbac.list_cluster_role(label_selector=selector).items
                or rbac.list_cluster_role_binding(label_selector=selector).items
            )
            or None
        ),
        timeout=90,
    )


@pytest.fixture
def chart_operator(layout: Layout) -> Iterator[str]:
    """The chart installed as a fresh release instead of the dev operator (restored afterwards: the two would
    both act on every job)."""
    release = f"rl-{uuid.uuid4().hex[:6]}"
    cluster.operator_up()  # removes the release `make demo` may have left: no other chart's operator runs
    cluster.operator_down()
    try:
        helm(layout, "install", release, str(CHART), "--namespace", "ringleader-system", "--create-namespace",
             "--set", "image.tag=dev", "--wait", "--timeout", "180s")  # fmt: skip
        yield release
    finally:
        helm(layout, "uninstall", release, "--namespace", "ringleader-system", "--wait", check=False)
        cluster.operator_up()
