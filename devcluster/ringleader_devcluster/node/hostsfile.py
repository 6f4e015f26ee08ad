"""Pure cluster DNS as a hosts file: the names CoreDNS would answer for headless services and their pods.

Each pod gets its own hosts file (bind-mounted over /etc/hosts in its mount namespace) rendered by
`render_hosts`. glibc's `files` backend applies no search domains, so every short form a pod may use is
written out literally: `<pod>.<svc>` and `<svc>` for the pod's own namespace, and `<pod>.<svc>.<ns>`,
`...svc`, `...svc.cluster.local` and `<svc>.<ns>` everywhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CLUSTER_DOMAIN = "cluster.local"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"


@dataclass(frozen=True)
class Endpoint:
    namespace: str
    service: str
    ip: str
    hostname: str  # the pod's spec.hostname when its subdomain names the service, else ""


def endpoints_from_slice(slice_obj: Mapping[str, Any]) -> list[Endpoint]:
    """Ready endpoints of a headless service's EndpointSlice (others resolve through no cluster IP here)."""
    meta = slice_obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    service = labels.get(SERVICE_NAME_LABEL)
    if not service or HEADLESS_LABEL not in labels:
        return []
    out = []
    for ep in slice_obj.get("endpoints") or []:
        if (ep.get("conditions") or {}).get("ready") is False:
            continue
        for ip in ep.get("addresses") or []:
            out.append(Endpoint(meta.get("namespace", ""), service, ip, ep.get("hostname") or ""))
    return out


def _forms(name: str, namespace: str, own_namespace: str) -> list[str]:
    """`name` qualified by namespace in every form a resolver with the pod's search path would accept."""
    qualified = f"{name}.{namespace}"
    forms = [f"{qualified}.svc.{CLUSTER_DOMAIN}", f"{qualified}.svc", qualified]
    if namespace == own_namespace:
        forms.append(name)
    return forms


def render_hosts(
    *,
    namespace: str,
    pod_ip: str,
    hostname: str,
    subdomain: str,
    endpoints: Iterable[Endpoint],
    api_ip: str,
) -> str:
    """The hosts file for one pod. `api_ip` is where the `kubernetes.default` service answers."""
    names: dict[str, list[str]] = defaultdict(list)

    def add(ip: str, *hostnames: str) -> None:
        for h in hostnames:
            if h not in names[ip]:
                names[ip].append(h)

    own = [f"{hostname}.{f}" for f in _forms(subdomain, namespace, namespace)] if subdomain else []
    if pod_ip:
        add(pod_ip, *own, hostname)
    for ep in sorted(endpoints, key=lambda e: (e.namespace, e.service, e.hostname, e.ip)):
        if ep.hostname:
            add(ep.ip, *(f"{ep.hostname}.{f}" for f in _forms(ep.service, ep.namespace, namespace)))
    for ep in sorted(endpoints, key=lambda e: (e.namespace, e.service, e.ip)):
        add(ep.ip, *_forms(ep.service, ep.namespace, namespace))
    if api_ip:
        add(api_ip, *_forms("kubernetes", "default", namespace))
    lines = [
        "# Kubernetes-managed hosts file (Ringleader process node).",
        "127.0.0.1\tlocalhost",
        "::1\tlocalhost ip6-localhost ip6-loopback",
    ]
    lines += [f"{ip}\t{' '.join(hs)}" for ip, hs in names.items()]
    return "\n".join(lines) + "\n"


def resolv_conf(namespace: str) -> str:
    """Search path as a kubelet writes it; no nameserver answers, so unknown names fail fast instead of
    waiting on a resolver that cannot be reached from the pod's network namespace."""
    return (
        f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
        "nameserver 127.0.0.1\noptions ndots:5 timeout:1 attempts:1\n"
    )
