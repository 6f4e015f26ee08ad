"""The real node: a kubelet on containerd, runc and the CNI bridge runs pods from images, with logs, exec,
memory limits enforced by the kernel (OOMKilled) and its taint keeping every other pod away."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import realnode
from ringleader_devcluster.layout import Layout, read_versions

from .helpers import busybox_pod, kubectl, logs, wait_for, wait_phase


@pytest.fixture(scope="module", autouse=True)
def busybox_image(layout: Layout, kubeconfig: Path) -> None:
    """The node-test image, built once into the cache and imported into the node's containerd."""
    paths = realnode.Paths.of(layout)
    realnode.import_image(paths, realnode.busybox_archive(layout))


def test_the_real_node_is_ready_labelled_and_tainted(core: client.CoreV1Api) -> None:
    node = core.read_node(realnode.NODE_NAME)
    assert {c.type: c.status for c in node.status.conditions}["Ready"] == "True"
    assert node.metadata.labels[realnode.LABEL] == "true"
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [(realnode.TAINT, "NoSchedule")]
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert node.status.node_info.kubelet_version == read_versions()["KUBE_VERSION"]


def test_a_pod_runs_from_an_image_with_logs_exec_and_its_memory_limit(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    core.create_namespaced_pod(namespace, busybox_pod("box", "echo hello from $(hostname); sleep 600", memory="64Mi"))
    pod = wait_phase(core, namespace, "box", {"Running"}, timeout=60)
    assert pod.spec.node_name == realnode.NODE_NAME
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(realnode.POD_CIDR)
    wait_for("the container's output", lambda: "hello from box" in logs(core, namespace, "box"))
    limit = kubectl(
        layout, kubeconfig, "exec", "-n", namespace, "box", "--", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    )
    assert int(limit.stdout) == 64 * 2**20


def test_a_container_over_its_memory_limit_is_oom_killed(core: client.CoreV1Api, namespace: str) -> None:
    # tail keeps the current line in memory, and /dev/zero has no line end.
    core.create_namespaced_pod(namespace, busybox_pod("hog", "tail /dev/zero", memory="32Mi"))
    pod = wait_phase(core, namespace, "hog", {"Failed"}, timeout=60)
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)
