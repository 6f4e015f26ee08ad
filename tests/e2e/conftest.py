"""The end-to-end tier's fixtures: the trainer image in the dev cluster's registry, namespaces that enforce
Pod Security "restricted", and one release of the chart that the tests of the chart's operator share."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import images, operatorprocess, realnode
from ringleader_devcluster.layout import REPO_ROOT, Layout

from tests.support.shared import one_at_a_time

CHART = REPO_ROOT / "helm" / "ringleader"
REPOSITORY, TAG = images.OPERATOR.name.rsplit(":", 1)
VALUES = {
    "image": {"repository": REPOSITORY, "tag": TAG, "pullPolicy": "Always"},
    "nodeSelector": {realnode.LABEL: "true"},
    "tolerations": [{"key": realnode.TAINT, "operator": "Exists", "effect": "NoSchedule"}],
}


@pytest.fixture(scope="session", autouse=True)
def trainer_image(layout: Layout, kubeconfig: Path) -> None:
    """Built (again only when its inputs change) and pushed to the dev cluster's registry, which the real node
    pulls from."""
    with one_at_a_time(layout):
        images.publish(layout, images.TRAINER)


@pytest.fixture
def restricted_namespace(core: client.CoreV1Api, namespace: str) -> str:
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    return namespace


def helm(layout: Layout, *args: str) -> str:
    out = subprocess.run([str(layout.binary("helm")), "--kubeconfig", str(layout.kubeconfig), *args],
                         capture_output=True, text=True, timeout=240, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="package")
def release(
    layout: Layout, core: client.CoreV1Api, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(name, namespace) of a release of the chart from the operator image, its pod on the real node, in a
    restricted namespace of its own: in place of the dev operator while this package's tests that take it run
    (two operators would both act on every job), the dev operator restored after the last. The tests that take it
    are marked serial, and one install serves them all: the chart's test first (what it installed), the examples and
    the NetworkPolicy under it, `helm upgrade` and `helm uninstall` last (test_upgrade_and_uninstall.py; the file
    names keep that order). A test that uninstalls it leaves the teardown nothing to remove."""
    images.publish(layout, images.OPERATOR)
    name, ns = f"rl-{uuid.uuid4().hex[:6]}", f"rl-system-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    operatorprocess.operator_up()  # removes the release `make demo` may have left: no other chart's operator runs
    operatorprocess.operator_down()
    values = tmp_path_factory.mktemp("chart") / "values.json"
    values.write_text(json.dumps(VALUES))  # JSON is YAML
    try:
        # a peering object of its own: the dev operator's is named `ringleader`, the chart's default
        helm(layout, "install", name, str(CHART), "--namespace", ns, "-f", str(values),
             "--set", f"leaderElection.peeringName={name}", "--wait", "--timeout", "180s")  # fmt: skip
        yield name, ns
    finally:
        subprocess.run([str(layout.binary("helm")), "--kubeconfig", str(layout.kubeconfig), "uninstall", name,
                        "--namespace", ns, "--wait"], capture_output=True, timeout=240, check=False)  # fmt: skip
        core.delete_namespace(ns)
        operatorprocess.operator_up()
