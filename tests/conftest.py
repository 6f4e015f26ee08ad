"""Session fixtures: the dev cluster is started (or reused) once per test run; each test gets a namespace."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client import ApiException
from ringleader_devcluster import cluster, operatorprocess
from ringleader_devcluster.layout import Layout

from tests.support.shared import one_at_a_time


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `lifecycle` take the whole dev cluster down and up again; they run after all others."""
    items.sort(key=lambda item: item.get_closest_marker("lifecycle") is not None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under `--dist loadgroup` a test marked `xdist_group` (those counting the process node's GPUs, those adding
    fake nodes) carries its group in its node id, which is what keeps its group on one worker. pytest 9.2 renamed the
    attribute pytest-xdist 3.8 writes it to: the groups were silently spread over both workers, and two GPU-counting
    tests ran at once, each finding the other's pods on the node. Such a test fails here rather than run that way."""
    grouped = item.get_closest_marker("xdist_group") is not None
    if grouped and getattr(item.config.option, "loadgroup", False) and "@" not in item.nodeid:
        pytest.fail(
            "--dist loadgroup is not grouping: pytest-xdist did not name this test's xdist_group in its node id "
            "(are pytest and pytest-xdist pinned to versions that work together?)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def layout() -> Layout:
    return Layout.from_env()


@pytest.fixture(scope="session")
def kubeconfig(layout: Layout) -> Path:
    """Starts the dev cluster unless it already runs (`make integration` starts it first)."""
    try:
        with one_at_a_time(layout):
            cluster.up(fake_nodes=None, gpus=8, nodes=1, build=False)
    except cluster.ClusterError as e:
        pytest.fail(f"dev cluster: {e}")
    return layout.kubeconfig


@pytest.fixture(scope="session")
def api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def operator(layout: Layout, kubeconfig: Path) -> None:
    """The operator from this checkout, running against the dev cluster (started once, left running)."""
    try:
        with one_at_a_time(layout):
            operatorprocess.operator_up()
    except cluster.ClusterError as e:
        pytest.fail(f"operator: {e}")


@pytest.fixture(scope="session")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace, deleted after the test (its pods with it)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    # The ServiceAccount admission plugin rejects pods until the namespace's default account exists.
    from tests.support.cluster import wait_for

    wait_for("default service account", lambda: core.list_namespaced_service_account(name).items, timeout=30)
    yield name
    try:
        core.delete_namespace(name, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:  # the teardown test replaces the whole cluster
            raise
