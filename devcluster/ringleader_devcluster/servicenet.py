"""Cluster DNS and Service addresses for the real node's pods, as a kubeadm cluster gives them.

CoreDNS (built from the Go module proxy) answers for `cluster.local` from the API server, behind the `kube-dns`
Service at DNS_SERVICE_IP, the address the kubelet writes into every pod's resolv.conf; so a rank resolves
`<pod>.<job>` and the operator's pod resolves `kubernetes.default.svc`. kube-proxy (iptables mode) sends each
Service's cluster IP to its endpoints, among them `kubernetes` (the API server) and `kube-dns` (CoreDNS on this
machine's node address). Both run as host processes beside the kubelet, each with a client certificate for the
user Kubernetes' RBAC defaults expect (`system:kube-proxy`, bound to `system:node-proxier`; `system:coredns`,
given list/watch on what CoreDNS reads). Their state lives in `<realnode>/servicenet/`; `stop` ends them and has
kube-proxy remove its iptables rules (`kube-proxy --cleanup`).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .certs import client_certificate
from .pids import pid_from, spawn, stop_pidfile, wait_ready
from .tools import RealNodeError, http_ok, run

SERVICE_CIDR = "10.0.0.0/24"  # the API server's --service-cluster-ip-range (set in cluster.py)
KUBERNETES_SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service: the API server's certificate names it
DNS_SERVICE_IP = "10.0.0.10"  # kubeadm's choice: the tenth address of the service range
DNS_PORT = 1053  # CoreDNS on the node address; the kube-dns Service maps port 53 here
CLUSTER_DOMAIN = "cluster.local"
COREDNS_READY = "127.0.0.1:18181"  # CoreDNS's `ready` plugin: 200 once the kubernetes plugin has synced
PROXY_HEALTHZ = "127.0.0.1:10356"
PROXY_METRICS = "127.0.0.1:10349"
POD_CIDRS = "198.18.0.0/16"  # every dev-cluster pod, process nodes and real node: traffic from elsewhere is masqueraded
READY_TIMEOUT = 60.0

KubeconfigFor = Callable[[Path, Path], dict[str, object]]  # (client certificate, key) -> a kubeconfig


@dataclass(frozen=True)
class Files:
    """Where CoreDNS and kube-proxy keep their configuration, certificates, pid files and logs."""

    root: Path

    def pidfile(self, program: str) -> Path:
        return self.root / f"{program}.pid"

    def log(self, program: str) -> Path:
        return self.root / f"{program}.log"


def corefile(address: str, kubeconfig: Path) -> str:
    """CoreDNS's configuration: cluster names from the API server, short TTLs (pods of a recreated rank get a
    new address), anything else forwarded to this machine's resolver."""
    return f""".:{DNS_PORT} {{
    bind {address}
    errors
    ready {COREDNS_READY}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
        fallthrough in-addr.arpa ip6.arpa
    }}
    forward . /etc/resolv.conf
    cache 5
}}
"""


def kube_proxy_config(kubeconfig: Path, node_name: str, address: str) -> dict[str, Any]:
    """kube-proxy in iptables mode. Every Service connection is masqueraded: pods share one bridge without
    br_netfilter's guarantees, and a reply that bypassed the host would never be translated back. conntrack's
    sysctls are left alone (zeros), and NodePorts listen on the node address only."""
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node_name,
        "bindAddress": address,  # the node's IP; otherwise read from its Node, which the kubelet registers later
        "mode": "iptables",
        "clusterCIDR": POD_CIDRS,
        "healthzBindAddress": PROXY_HEALTHZ,
        "metricsBindAddress": PROXY_METRICS,
        "nodePortAddresses": [f"{address}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"masqueradeAll": True, "localhostNodePorts": False, "syncPeriod": "30s", "minSyncPeriod": "0s"},
    }


def api_objects(address: str) -> list[dict[str, Any]]:
    """What the API server needs for cluster DNS: CoreDNS's read-only role and its binding, and the kube-dns
    Service with a hand-written EndpointSlice (CoreDNS is no pod here) pointing at this machine's node address."""
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    ports = [("dns", "UDP"), ("dns-tcp", "TCP")]
    return [
        *_coredns_rbac(),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {
                "clusterIP": DNS_SERVICE_IP,
                "ports": [{"name": n, "protocol": p, "port": 53, "targetPort": DNS_PORT} for n, p in ports],
            },
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-host",
                "namespace": "kube-system",
                "labels": {
                    **labels,
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "devcluster.ringleader.dev",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": n, "protocol": p, "port": DNS_PORT} for n, p in ports],
        },
    ]


def _coredns_rbac() -> list[dict[str, Any]]:
    """CoreDNS's read-only ClusterRole and its binding to the user its kubeconfig names."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:coredns"}],
        },
    ]


def client_kubeconfig(root: Path, name: str, user: str, pki: Path, kubeconfig: KubeconfigFor) -> Path:
    """`<root>/<name>.kubeconfig`: a kubeconfig for a client certificate of `user` signed by the cluster's CA."""
    cert, key = client_certificate(root / "pki", name, user, None, pki)
    path = root / f"{name}.kubeconfig"
    path.write_text(json.dumps(kubeconfig(cert, key), indent=2))
    return path


def apply_objects(kubectl: Path, admin_kubeconfig: Path, root: Path, items: list[dict[str, Any]], what: str) -> None:
    """Apply `items` server-side as the dev cluster's own (kept as `<root>/api-objects.json`)."""
    manifest = root / "api-objects.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2))
    apply = [str(kubectl), "--kubeconfig", str(admin_kubeconfig), "apply", "--server-side", "--force-conflicts",
             "--field-manager=ringleader-devcluster", "-f", str(manifest)]  # fmt: skip
    run(apply, f"kubectl apply ({what})", timeout=60)


def start_dns(
    files: Files, *, coredns: Path, kubectl: Path, admin_kubeconfig: Path, pki: Path, kubeconfig: KubeconfigFor,
    address: str,
) -> None:  # fmt: skip
    """Create the kube-dns Service and CoreDNS's role, start CoreDNS (once; a running one is left alone) and
    return when it serves. `kubeconfig(cert, key)` makes a kubeconfig for a client certificate."""
    files.root.mkdir(parents=True, exist_ok=True)
    apply_objects(kubectl, admin_kubeconfig, files.root, api_objects(address), "cluster DNS")
    if pid_from(files.pidfile("coredns")):
        return
    config = client_kubeconfig(files.root, "coredns", "system:coredns", pki, kubeconfig)
    (files.root / "Corefile").write_text(corefile(address, config))
    pid = spawn([str(coredns), "-conf", str(files.root / "Corefile")], files.pidfile("coredns"), files.log("coredns"))
    wait_ready("CoreDNS", lambda: http_ok(f"http://{COREDNS_READY}/ready"), pid, files.log("coredns"), READY_TIMEOUT)


def start_proxy(
    files: Files, *, kube_proxy: Path, pki: Path, kubeconfig: KubeconfigFor, node_name: str, address: str,
    node_registered: Callable[[], bool],
) -> None:  # fmt: skip
    """Start kube-proxy (once) and return when its rules are in place. kube-proxy reads its Node before anything
    else (and backs off for a minute while it is missing), so this waits for `node_registered()` first."""
    if pid_from(files.pidfile("kube-proxy")):
        return
    files.root.mkdir(parents=True, exist_ok=True)
    config = client_kubeconfig(files.root, "kube-proxy", "system:kube-proxy", pki, kubeconfig)
    settings = files.root / "kube-proxy.yaml"
    settings.write_text(json.dumps(kube_proxy_config(config, node_name, address), indent=2))
    deadline = time.monotonic() + READY_TIMEOUT
    while not node_registered():
        if time.monotonic() > deadline:
            raise RealNodeError(f"node {node_name} not registered after {READY_TIMEOUT:.0f}s: kube-proxy needs it")
        time.sleep(0.2)
    log = files.log("kube-proxy")
    pid = spawn([str(kube_proxy), "--config", str(settings)], files.pidfile("kube-proxy"), log)
    wait_ready("kube-proxy", lambda: http_ok(f"http://{PROXY_HEALTHZ}/healthz"), pid, log, READY_TIMEOUT)


def stop(files: Files, kube_proxy: Path) -> None:
    """Stop CoreDNS and kube-proxy and remove kube-proxy's iptables rules (also after a kill -9 of either);
    what could not be removed shows in `iptables_leftovers`."""
    for program in ("coredns", "kube-proxy"):
        stop_pidfile(files.pidfile(program), 10)
    if kube_proxy.exists() and iptables_leftovers():
        files.root.mkdir(parents=True, exist_ok=True)
        with files.log("kube-proxy-cleanup").open("ab") as log:
            subprocess.run([str(kube_proxy), "--cleanup"], stdout=log, stderr=log, timeout=60, check=False)
    remove_kube_chains()


IPTABLES_TABLES = ("nat", "filter", "mangle")


def _iptables_save(table: str) -> list[str]:
    try:
        res = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:  # no iptables here: kube-proxy never ran, so it left nothing
        return []
    return res.stdout.splitlines()


def remove_kube_chains() -> None:
    """What `kube-proxy --cleanup` leaves on purpose because a kubelet may share it (KUBE-FIREWALL,
    KUBE-MARK-MASQ, the canary chains): on this machine only the dev cluster makes KUBE-* chains."""
    for table in IPTABLES_TABLES:
        lines = _iptables_save(table)
        chains = [line.split()[0][1:] for line in lines if line.startswith(":KUBE-")]
        for line in lines:  # jumps into those chains from the built-in ones
            argv = shlex.split(line)
            if argv[:1] == ["-A"] and not argv[1].startswith("KUBE-") and any(c in argv for c in chains):
                subprocess.run(["iptables", "-t", table, "-D", *argv[1:]], capture_output=True, timeout=30, check=False)
        for flag in ("-F", "-X"):
            for chain in chains:
                subprocess.run(["iptables", "-t", table, flag, chain], capture_output=True, timeout=30, check=False)


def iptables_leftovers() -> list[str]:
    """kube-proxy's chains still in this machine's iptables (none after `stop`)."""
    return [f"iptables {t} {line.split()[0][1:]}" for t in IPTABLES_TABLES for line in _iptables_save(t)
            if line.startswith(":KUBE-")]  # fmt: skip
