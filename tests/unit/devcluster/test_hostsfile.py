"""Table tests of cluster DNS rendered as a per-pod hosts file."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_devcluster.node.hostsfile import Endpoint, endpoints_from_slice, render_hosts, resolv_conf


def slice_(service: str, endpoints: list[dict[str, Any]], headless: bool = True, ns: str = "ml") -> dict[str, Any]:
    labels = {"kubernetes.io/service-name": service}
    if headless:
        labels["service.kubernetes.io/headless"] = ""
    return {"metadata": {"namespace": ns, "labels": labels}, "endpoints": endpoints}


def test_endpoints_from_headless_slice_keep_hostnames_and_skip_not_ready() -> None:
    s = slice_(
        "job",
        [
            {"addresses": ["198.18.1.2"], "hostname": "job-worker-0", "conditions": {"ready": True}},
            {"addresses": ["198.18.1.3"], "hostname": "job-worker-1", "conditions": {"ready": False}},
            {"addresses": ["198.18.1.4"], "conditions": {}},
        ],
    )
    assert endpoints_from_slice(s) == [
        Endpoint("ml", "job", "198.18.1.2", "job-worker-0"),
        Endpoint("ml", "job", "198.18.1.4", ""),
    ]


def test_non_headless_slices_resolve_through_no_cluster_ip_here() -> None:
    assert endpoints_from_slice(slice_("web", [{"addresses": ["198.18.1.9"]}], headless=False)) == []


def hosts_names(text: str) -> dict[str, str]:
    """name -> ip for every name in a hosts file."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            ip, *names = line.split()
            for n in names:
                out.setdefault(n, ip)
    return out


EPS = [
    Endpoint("ml", "job", "198.18.1.2", "job-worker-0"),
    Endpoint("ml", "job", "198.18.1.3", "job-worker-1"),
    Endpoint("other", "db", "198.18.1.9", ""),
]


@pytest.mark.parametrize(
    ("name", "ip"),
    [
        ("job-worker-1.job", "198.18.1.3"),
        ("job-worker-1.job.ml", "198.18.1.3"),
        ("job-worker-1.job.ml.svc", "198.18.1.3"),
        ("job-worker-1.job.ml.svc.cluster.local", "198.18.1.3"),
        ("job", "198.18.1.2"),
        ("job.ml", "198.18.1.2"),
        ("job.ml.svc.cluster.local", "198.18.1.2"),
        ("db.other", "198.18.1.9"),
        ("db.other.svc.cluster.local", "198.18.1.9"),
        ("kubernetes.default.svc", "198.18.0.1"),
        ("job-worker-0", "198.18.1.2"),  # own hostname
        ("localhost", "127.0.0.1"),
    ],
)
def test_rendered_names(name: str, ip: str) -> None:
    text = render_hosts(
        namespace="ml",
        pod_ip="198.18.1.2",
        hostname="job-worker-0",
        subdomain="job",
        endpoints=EPS,
        api_ip="198.18.0.1",
    )
    assert hosts_names(text)[name] == ip


def test_short_names_only_for_the_pods_own_namespace() -> None:
    names = hosts_names(render_hosts(namespace="ml", pod_ip="", hostname="x", subdomain="", endpoints=EPS, api_ip=""))
    assert "db" not in names and "db.other" in names and "kubernetes" not in names


def test_resolv_conf_search_path() -> None:
    assert resolv_conf("ml").splitlines()[0] == "search ml.svc.cluster.local svc.cluster.local cluster.local"
