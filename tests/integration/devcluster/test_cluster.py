"""The process node inside the real control plane: pod networking and DNS, the scheduler and the
controller-manager at work, GPU capacity, and the API reachable from pods."""

from __future__ import annotations

from kubernetes import client
from ringleader_devcluster import controlplane
from ringleader_devcluster.layout import Layout

from tests.support.cluster import (
    COUNTS_GPUS,
    PROCESS_NODE_SELECTOR,
    SHARES_FAKE_NODES,
    gone,
    logs,
    python_pod,
    wait_for,
    wait_phase,
)

PEER_SCRIPT = """
import os, socket, sys, threading, time
me, peer = os.environ["ME"], os.environ["PEER"]
srv = socket.create_server(("0.0.0.0", 29500))
def serve():
    conn, _ = srv.accept()
    conn.sendall(me.encode()); conn.close()
threading.Thread(target=serve, daemon=True).start()
deadline = time.monotonic() + 60
while True:
    try:
        with socket.create_connection((peer, 29500), timeout=2) as c:
            print("peer says", c.recv(100).decode(), "at", socket.gethostbyname(peer), flush=True)
            break
    except OSError as e:
        if time.monotonic() > deadline:
            sys.exit(f"cannot reach {peer}: {e}")
        time.sleep(0.2)
time.sleep(3)  # stay up until the peer has connected too
"""


def test_two_pods_behind_a_headless_service_share_a_port_and_reach_each_other_by_dns(
    core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "ring"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"job": "ring"},
                "ports": [{"name": "c10d", "port": 29500}],
            },
        },
    )
    names = {
        "a": "b.ring",  # <pod>.<svc>
        "b": f"a.ring.{namespace}.svc.cluster.local",  # fully qualified
    }
    for me, peer in names.items():
        pod = python_pod(
            me,
            PEER_SCRIPT,
            env=[{"name": "ME", "value": me}, {"name": "PEER", "value": peer}],
            labels={"job": "ring"},
            hostname=me,
            subdomain="ring",
        )
        core.create_namespaced_pod(namespace, pod)
    ips = {}
    for me in names:
        pod = wait_phase(core, namespace, me, {"Succeeded", "Failed"}, timeout=90)
        assert pod.status.phase == "Succeeded", logs(core, namespace, me)
        ips[me] = pod.status.pod_ip
    assert ips["a"] != ips["b"]
    assert logs(core, namespace, "a") == f"peer says b at {ips['b']}\n"
    assert logs(core, namespace, "b") == f"peer says a at {ips['a']}\n"


def test_dns_forms_resolve_inside_a_pod(core: client.CoreV1Api, namespace: str) -> None:
    core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "svc"},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"app": "dns"},
                "ports": [{"port": 80}],
            },
        },
    )
    forms = [
        "w-0.svc",
        f"w-0.svc.{namespace}",
        f"w-0.svc.{namespace}.svc",
        f"w-0.svc.{namespace}.svc.cluster.local",
        f"svc.{namespace}",
        "svc",
        "kubernetes.default.svc",
    ]
    script = (
        "import socket, time\n"
        f"forms = {forms!r}\n"
        "deadline = time.monotonic() + 30\n"
        "while True:\n"
        "    try:\n"
        "        print(' '.join(socket.gethostbyname(f) for f in forms), socket.gethostname()); break\n"
        "    except OSError:\n"
        "        if time.monotonic() > deadline: raise\n"
        "        time.sleep(0.2)\n"
    )
    core.create_namespaced_pod(
        namespace, python_pod("w-0", script, labels={"app": "dns"}, hostname="w-0", subdomain="svc")
    )
    pod = wait_phase(core, namespace, "w-0", {"Succeeded", "Failed"})
    assert pod.status.phase == "Succeeded", logs(core, namespace, "w-0")
    resolved = logs(core, namespace, "w-0").split()
    assert resolved[:6] == [pod.status.pod_ip] * 6
    assert resolved[6] == pod.status.host_ip  # the API relay on the bridge gateway
    assert resolved[7] == "w-0"  # the pod's own hostname, in its own UTS namespace


def test_deployment_runs_and_deleting_the_owner_garbage_collects_its_pods(
    core: client.CoreV1Api, api: client.ApiClient, namespace: str
) -> None:
    apps = client.AppsV1Api(api)
    template = python_pod("ignored", "import time; time.sleep(600)", restart_policy="Always", labels={"app": "web"})
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": template["metadata"], "spec": template["spec"]},
            },
        },
    )

    def running() -> list[str]:
        pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
        ok = [
            p.metadata.name
            for p in pods
            if p.status.phase == "Running" and all(c.ready for c in p.status.container_statuses or [])
        ]
        return ok if len(ok) == 2 else []

    wait_for("2 ready deployment pods", running, timeout=60)
    wait_for(
        "deployment available",
        lambda: apps.read_namespaced_deployment("web", namespace).status.available_replicas == 2,
        timeout=30,
    )
    apps.delete_namespaced_deployment("web", namespace, propagation_policy="Background")
    wait_for(
        "pods garbage-collected",
        lambda: not core.list_namespaced_pod(namespace, label_selector="app=web").items,
        timeout=90,
    )


@COUNTS_GPUS
def test_too_many_gpus_stays_pending_with_unschedulable_reason(core: client.CoreV1Api, namespace: str) -> None:
    pod = python_pod("greedy", "print(1)")
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "64"}}
    core.create_namespaced_pod(namespace, pod)

    def unschedulable() -> object:
        conds = core.read_namespaced_pod("greedy", namespace).status.conditions or []
        return next((c for c in conds if c.type == "PodScheduled" and c.reason == "Unschedulable"), None)

    cond = wait_for("PodScheduled=False/Unschedulable", unschedulable, timeout=30)
    assert "nvidia.com/gpu" in cond.message  # type: ignore[attr-defined]
    assert core.read_namespaced_pod("greedy", namespace).status.phase == "Pending"


@COUNTS_GPUS
def test_gpus_are_handed_out_disjointly_through_cuda_visible_devices(core: client.CoreV1Api, namespace: str) -> None:
    script = "import os, time; print(os.environ.get('CUDA_VISIBLE_DEVICES', 'none')); time.sleep(2)"
    for name in ("g1", "g2"):
        pod = python_pod(name, script)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "3"}}
        core.create_namespaced_pod(namespace, pod)
    core.create_namespaced_pod(namespace, python_pod("g0", script))
    seen = {}
    for name in ("g0", "g1", "g2"):
        assert wait_phase(core, namespace, name, {"Succeeded", "Failed"}).status.phase == "Succeeded"
        seen[name] = logs(core, namespace, name).strip()
    assert seen["g0"] == "none"
    g1, g2 = (set(seen[n].split(",")) for n in ("g1", "g2"))
    assert len(g1) == len(g2) == 3 and not g1 & g2


def test_pods_reach_the_api_server_with_their_service_account(core: client.CoreV1Api, namespace: str) -> None:
    # The in-cluster config of the official client: KUBERNETES_SERVICE_HOST/PORT plus the projected token and CA.
    script = (
        "from kubernetes import client, config\n"
        "config.load_incluster_config()\n"
        "review = client.AuthenticationV1Api().create_self_subject_review({})\n"
        "print(review.status.user_info.username)"
    )
    core.create_namespaced_pod(namespace, python_pod("incluster", script))
    pod = wait_phase(core, namespace, "incluster", {"Succeeded", "Failed"})
    assert pod.status.phase == "Succeeded", logs(core, namespace, "incluster")
    assert logs(core, namespace, "incluster") == f"system:serviceaccount:{namespace}:default\n"


def test_node_keeps_its_lease_renewed(api: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(api)
    first = coord.read_namespaced_lease("process-node", "kube-node-lease").spec.renew_time
    wait_for(
        "lease renewal",
        lambda: coord.read_namespaced_lease("process-node", "kube-node-lease").spec.renew_time > first,
        timeout=30,
    )


def test_node_selector_for_process_nodes_matches_the_label(core: client.CoreV1Api) -> None:
    node = core.read_node("process-node")
    assert all(node.metadata.labels.get(k) == v for k, v in PROCESS_NODE_SELECTOR.items())
    assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert not gone(lambda: core.read_node("process-node"))


@SHARES_FAKE_NODES
def test_fake_nodes_are_tainted_and_run_only_tolerating_pods(
    core: client.CoreV1Api, namespace: str, layout: Layout
) -> None:
    controlplane.scale_fake_nodes(layout, 2)
    try:
        fake = core.list_node(label_selector="type=kwok").items
        assert len(fake) == 2
        assert all(any(t.key == "kwok.x-k8s.io/node" for t in n.spec.taints or []) for n in fake)
        pod = python_pod("on-fake", "this never runs")
        pod["spec"]["nodeSelector"] = {"type": "kwok"}
        pod["spec"]["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
        core.create_namespaced_pod(namespace, pod)
        running = wait_phase(core, namespace, "on-fake", {"Running"})
        assert running.spec.node_name in {n.metadata.name for n in fake}
    finally:
        controlplane.scale_fake_nodes(layout, 0)
    wait_for("fake nodes removed", lambda: not core.list_node(label_selector="type=kwok").items, timeout=60)
