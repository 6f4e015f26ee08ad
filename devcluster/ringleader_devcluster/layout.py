"""Where the dev cluster keeps things, and the pinned versions of what it runs.

- The cache (`$RINGLEADER_CACHE`, default `${XDG_CACHE_HOME:-~/.cache}/ringleader`) holds binaries built from
  the Go module proxy and the Python venv; it outlives checkouts.
- The state directory (`$RINGLEADER_DEV_DIR`, default `<repo>/.dev`) holds one running cluster: kubeconfig,
  kwokctl's cluster directory, the process node's pods and logs. `make dev-cluster-down` removes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DEVCLUSTER_DIR = PACKAGE_DIR.parent
REPO_ROOT = DEVCLUSTER_DIR.parent
CLUSTER_NAME = "ringleader"


def read_versions(path: Path = DEVCLUSTER_DIR / "versions.env") -> dict[str, str]:
    """KEY=VALUE lines of versions.env (comments and blank lines ignored)."""
    out = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@dataclass(frozen=True)
class Layout:
    cache: Path
    state: Path

    @classmethod
    def from_env(cls) -> Layout:
        xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        cache = Path(os.environ.get("RINGLEADER_CACHE") or Path(xdg) / "ringleader")
        state = Path(os.environ.get("RINGLEADER_DEV_DIR") or REPO_ROOT / ".dev")
        return cls(cache=cache, state=state)

    def binary(self, name: str) -> Path:
        v = read_versions()
        folder = {
            "kube-apiserver": f"kubernetes-{v['KUBE_VERSION']}",
            "kube-controller-manager": f"kubernetes-{v['KUBE_VERSION']}",
            "kube-scheduler": f"kubernetes-{v['KUBE_VERSION']}",
            "kubectl": f"kubernetes-{v['KUBE_VERSION']}",
            "etcd": f"etcd-{v['ETCD_VERSION']}",
            "kwok": f"kwok-{v['KWOK_VERSION']}",
            "kwokctl": f"kwok-{v['KWOK_VERSION']}",
            "helm": f"helm-{v['HELM_VERSION']}",
            "coredns": f"coredns-{v['COREDNS_VERSION']}",
            "registry": f"registry-{v['REGISTRY_VERSION']}",
            "kueue": f"kueue-{v['KUEUE_VERSION']}",
            "kube-router": f"kube-router-{v['KUBE_ROUTER_VERSION']}",
        }[name]
        return self.cache / folder / name

    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def kwok_workdir(self) -> Path:
        return self.state / "kwok"

    @property
    def cluster_dir(self) -> Path:
        return self.kwok_workdir / "clusters" / CLUSTER_NAME

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (see controlplane.AUDITED_NAMESPACE for whose requests it holds)."""
        return self.cluster_dir / "logs" / "audit.log"

    @property
    def pki(self) -> Path:
        return self.cluster_dir / "pki"

    @property
    def node_dir(self) -> Path:
        return self.state / "node"

    @property
    def node_pidfile(self) -> Path:
        return self.node_dir / "agent.pid"

    @property
    def node_log(self) -> Path:
        return self.node_dir / "agent.log"

    @property
    def extra_nodes_dir(self) -> Path:
        """State of process nodes added beside the main one (`processnode.add_node`), one directory each."""
        return self.state / "nodes"

    @property
    def operator_dir(self) -> Path:
        return self.state / "operator"
