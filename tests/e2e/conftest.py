"""The end-to-end tier's fixtures: the trainer image in the dev cluster's registry, and namespaces that enforce
Pod Security "restricted"."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import images
from ringleader_devcluster.layout import Layout

from tests.support.shared import one_at_a_time


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
