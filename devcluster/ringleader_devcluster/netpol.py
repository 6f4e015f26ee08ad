"""NetworkPolicy enforced on the real node, as a cluster's network plugin enforces it: kube-router's network
policy controller (built from the Go module proxy, its firewall alone: no routing, no service proxy), a host
process beside the kubelet like kube-proxy. It watches pods, namespaces and networking.k8s.io/v1 NetworkPolicies
and filters the real node's pods' traffic, ingress and egress, with iptables chains and ipsets (the bridge's
traffic passes iptables through br_netfilter). Traffic from the host itself (kubelet probes, a process on this
machine) is always let through, as kube-router does on any node; the process node's pods are no pods of its node,
so their own traffic is not filtered, but what they send to a real-node pod meets that pod's policies.

Started on demand (it costs a build of several minutes on a fresh machine, which `make demo` does without):
`make dev-cluster NETPOL=1`, `python -m ringleader_devcluster netpol-up`, and the tests that need it. Its rules
and ipsets outlive the process, so `stop` removes them (the dev cluster's teardown calls it).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from .layout import Layout
from .pids import pid_from, spawn, stop_pidfile, wait_ready
from .servicenet import SERVICE_CIDR, KubeconfigFor, apply_objects, client_kubeconfig, remove_kube_chains
from .tools import RealNodeError, http_ok

USER = "system:kube-router"
HEALTH_PORT = 20244
HEALTH = f"127.0.0.1:{HEALTH_PORT}"
READY_TIMEOUT = 60.0
# Every ipset kube-router makes is named so; on this machine only the dev cluster makes such sets.
IPSET_PREFIXES = ("KUBE-", "kube-router")


def folder(layout: Layout) -> Path:
    return layout.state / "realnode" / "netpol"


def api_objects() -> list[dict[str, Any]]:
    """kube-router's read access (what its informers list and watch) and the events it may record."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": USER},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces", "nodes", "services", "endpoints"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"],
                 "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]  # fmt: skip


def argv(binary: Path, kubeconfig: Path, node_name: str) -> list[str]:
    """kube-router as a network policy controller only, for the node `node_name`."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node_name}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--run-loadbalancer=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--health-addr=127.0.0.1",
        f"--health-port={HEALTH_PORT}",
        "--metrics-port=0",
        "--iptables-sync-period=1m",  # a full resync; pod, namespace and policy events sync at once
        "-v=1",
    ]


def running(layout: Layout) -> bool:
    return pid_from(folder(layout) / "kube-router.pid") is not None


def start(layout: Layout, *, binary: Path, kubectl: Path, pki: Path, kubeconfig: KubeconfigFor, node_name: str) -> None:
    """Grant kube-router its access, start it (once; a running one is left alone) and return once it is healthy.
    `kubeconfig(cert, key)` makes a kubeconfig for a client certificate."""
    if running(layout):
        return
    if not binary.exists():
        raise RealNodeError(f"{binary} is missing: run 'make dev-cluster NETPOL=1' (it builds kube-router)")
    root = folder(layout)
    root.mkdir(parents=True, exist_ok=True)
    apply_objects(kubectl, layout.kubeconfig, root, api_objects(), "kube-router's access")
    config = client_kubeconfig(root, "kube-router", USER, pki, kubeconfig)
    log, pidfile = root / "kube-router.log", root / "kube-router.pid"
    pid = spawn(argv(binary, config, node_name), pidfile, log)
    wait_ready("kube-router", lambda: http_ok(f"http://{HEALTH}/healthz"), pid, log, READY_TIMEOUT)


def stop(layout: Layout) -> None:
    """Stop kube-router, then remove its iptables chains and its ipsets (the chains first: a set in use cannot be
    destroyed). Also after a kill -9, and when it never ran (nothing to do)."""
    stop_pidfile(folder(layout) / "kube-router.pid", 10)
    remove_kube_chains()
    for name in ipset_leftovers():
        subprocess.run(["ipset", "destroy", name], capture_output=True, timeout=30, check=False)


def ipset_leftovers() -> list[str]:
    """kube-router's ipsets still on this machine (none after `stop`)."""
    try:
        res = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:  # no ipset here: kube-router never ran
        return []
    return [n for n in res.stdout.split() if n.startswith(IPSET_PREFIXES)]
