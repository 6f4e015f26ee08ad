"""The helm chart: it lints, renders, passes the API server's dry run with several value sets and rejects bad
values by name. Installed from the operator image, upgraded and uninstalled: tests/e2e/test_chart_from_image.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ringleader_devcluster import commands
from ringleader_devcluster.layout import REPO_ROOT, Layout

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
    commands.kubectl(layout, "apply", "-f", str(REPO_ROOT / "crds"))  # the CRDs the peering objects need
    commands.kubectl(layout, "create", "namespace", "ringleader-system", check=False)
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
