"""The release the chart's tests share, after the last of them: `helm upgrade` to two replicas that elect a
leader, and the next job succeeds too; `helm uninstall` leaves nothing of what the release added."""

from __future__ import annotations

import pytest
from kubernetes import client
from ringleader_devcluster.layout import Layout

from tests.support.cluster import wait_for

from .conftest import CHART, helm
from .test_chart_from_image import operator_pods, run_job

# Serial: the chart's operator replaces the one every other test uses while it runs.
pytestmark = pytest.mark.serial


def test_helm_upgrade_to_two_replicas_then_uninstall_leaves_nothing(
    layout: Layout, core: client.CoreV1Api, custom: client.CustomObjectsApi, api: client.ApiClient,
    restricted_namespace: str, release: tuple[str, str],
) -> None:  # fmt: skip
    name, ns = release
    helm(layout, "upgrade", name, str(CHART), "--namespace", ns, "--reuse-values", "--set", "replicaCount=2",
         "--wait", "--timeout", "180s")  # fmt: skip
    wait_for(
        "two ready operator pods",
        lambda: sum(
            any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
            for p in operator_pods(core, name, ns)
            if not p.metadata.deletion_timestamp
        ) == 2,
        timeout=120,
    )  # fmt: skip
    run_job(core, custom, restricted_namespace, "second")

    helm(layout, "uninstall", name, "--namespace", ns, "--wait", "--timeout", "120s")
    apps, rbac = client.AppsV1Api(api), client.RbacAuthorizationV1Api(api)
    selector = f"app.kubernetes.io/instance={name}"
    wait_for(
        "everything the release added to be gone",
        lambda: (
            not (
                apps.list_namespaced_deployment(ns, label_selector=selector).items
                or core.list_namespaced_pod(ns, label_selector=selector).items
                or core.list_namespaced_service(ns, label_selector=selector).items
                or core.list_namespaced_service_account(ns, label_selector=selector).items
                or rbac.list_cluster_role(label_selector=selector).items
                or rbac.list_cluster_role_binding(label_selector=selector).items
            )
            or None
        ),
        timeout=90,
    )
