"""The real node: a kubelet on containerd, runc and the CNI bridge runs pods from images, with logs, exec,
memory limits enforced by the kernel (OOMKilled) and its taint keeping every other pod away."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from kubernetes import client
from ringleader_devcluster import realnode, servicenet
from ringleader_devcluster.layout import Layout, read_versions

from tests.support.cluster import busybox_pod, kubectl, logs, wait_for, wait_phase
from tests.support.shared import one_at_a_time


@pytest.fixture(scope="module", autouse=True)
def busybox_image(layout: Layout, kubeconfig: Path) -> None:
    """The node-test image, built once into the cache and imported into the node's containerd."""
    paths = realnode.Paths.of(layout)
    with one_at_a_time(layout):
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


def test_pods_resolve_cluster_names_and_reach_services_by_their_cluster_ip(
    core: client.CoreV1Api, namespace: str, layout: Layout, kubeconfig: Path
) -> None:
    """CoreDNS answers `<pod>.<headless service>` through the resolver's search path (as a rank resolves its
    peers), and kube-proxy sends the `kubernetes` Service's cluster IP to the API server."""
    core.create_namespaced_service(
        namespace,
        {"metadata": {"name": "grp"},
         "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"app": "grp"}}},
    )  # fmt: skip
    pod = busybox_pod("peer", "sleep 600")
    pod["metadata"]["labels"] = {"app": "grp"}
    pod["spec"].update(hostname="peer", subdomain="grp")
    core.create_namespaced_pod(namespace, pod)
    peer = wait_phase(core, namespace, "peer", {"Running"}, timeout=60)

    def exec_(script: str) -> str:
        return kubectl(layout, kubeconfig, "exec", "-n", namespace, "peer", "--", "sh", "-c", script).stdout

    assert f"nameserver {servicenet.DNS_SERVICE_IP}" in exec_("cat /etc/resolv.conf")
    # ping resolves through libc's resolver (search path applied); one reply is not needed, only the address
    wait_for("peer.grp to resolve", lambda: f"({peer.status.pod_ip})" in exec_("ping -c1 -W1 peer.grp 2>&1 || true"))
    assert servicenet.KUBERNETES_SERVICE_IP in exec_("nslookup kubernetes.default.svc.cluster.local")
    # a TCP connection to the cluster IP is accepted: kube-proxy sent it to the API server's port
    assert exec_(f"echo | nc -w 5 {servicenet.KUBERNETES_SERVICE_IP} 443; echo rc=$?").strip().endswith("rc=0")
