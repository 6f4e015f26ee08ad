"""Kueue in the dev cluster: the real manager (built from the Go module proxy, devcluster/build-binaries.sh), run
beside the control plane like its other daemons, with Kueue's own CRDs and webhooks.

The manager runs on the host, so the API server reaches its webhooks at a loopback URL instead of a Service:
its webhook configurations (only those for Kueue's own kinds, `kueue.x-k8s.io`; the built-in job frameworks'
webhooks, pods and Deployments among them, are not registered) and its CRDs' conversion webhooks are rewritten to
`https://127.0.0.1:<port>/...`, served with a certificate of the dev cluster's CA. Kueue's internal certificate
management and leader election are off (one manager, no Service). Without internal certificates, Kueue reads
its metrics certificate from a fixed path, /etc/kueue/metrics/certs: the manager runs in a mount namespace of
its own where an overlay adds that folder (the same certificate) to /etc, so nothing is written to the host's.
TrainingJob is registered as an external framework (`integrations.externalFrameworks`): the Ringleader operator
manages a TrainingJob's Workload itself.

`start` is idempotent and returns once the manager answers its readiness probe and its webhooks are registered;
`stop` stops it (the dev cluster's `down` does).
"""

from __future__ import annotations

import base64
import copy
import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from .certs import client_certificate
from .commands import ClusterError, api_ready, ensure_port_free, kubectl, say
from .layout import Layout
from .pids import pid_from, spawn, stop_pidfile, wait_ready
from .tools import RealNodeError, http_ok

NAMESPACE = "kueue-system"
WEBHOOK_PORT = 18443
HEALTH_PORT = 18091
GROUP = "kueue.x-k8s.io"
EXTERNAL_FRAMEWORK = "TrainingJob.v1alpha1.ringleader.dev"
# The CRDs whose older version (v1beta1) Kueue converts through its webhook (Kueue's own kustomize patches).
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
START_TIMEOUT = 60.0
# Runs the command after the folder argument in a private mount namespace whose /etc is overlaid by that folder.
OVERLAY_ETC = [
    "unshare", "--mount", "--propagation", "private", "sh", "-c",
    'o=$1; shift; mount -t overlay ringleader-kueue -o "lowerdir=$o:/etc" /etc && exec "$@"', "sh",
]  # fmt: skip


def home(layout: Layout) -> Path:
    """Where the Kueue build keeps its binary, CRDs and webhook manifests."""
    return layout.binary("kueue").parent


def state_dir(layout: Layout) -> Path:
    return layout.state / "kueue"


def pidfile(layout: Layout) -> Path:
    return state_dir(layout) / "kueue.pid"


def running(layout: Layout) -> bool:
    return pid_from(pidfile(layout)) is not None


def configuration(cert_dir: Path) -> dict[str, Any]:
    """Kueue's manager configuration for the dev cluster."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        "metrics": {"bindAddress": "0"},  # off: nothing scrapes it here
        "webhook": {"host": "127.0.0.1", "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": [], "externalFrameworks": [EXTERNAL_FRAMEWORK]},
    }


def _client_config(path: str, ca_bundle: str) -> dict[str, Any]:
    return {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}", "caBundle": ca_bundle}


def webhook_configurations(manifests: list[dict[str, Any]], ca_bundle: str) -> list[dict[str, Any]]:
    """Kueue's webhook configurations reduced to the webhooks for its own kinds, each calling the manager at
    its loopback URL (their `service.path` kept) and trusting `ca_bundle` (base64 PEM)."""
    out = []
    for manifest in manifests:
        if manifest.get("kind") not in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for hook in manifest.get("webhooks") or []:
            if not any(GROUP in (rule.get("apiGroups") or []) for rule in hook.get("rules") or []):
                continue
            local = copy.deepcopy(hook)
            local["clientConfig"] = _client_config(hook["clientConfig"]["service"]["path"], ca_bundle)
            hooks.append(local)
        kind = "mutating" if manifest["kind"].startswith("Mutating") else "validating"
        out.append({**manifest, "metadata": {"name": f"kueue-{kind}-webhook-configuration"}, "webhooks": hooks})
    return out


def with_conversion(crd: dict[str, Any], ca_bundle: str) -> dict[str, Any]:
    """A Kueue CRD as Kueue's own install applies it: the kinds served in two versions convert through the
    manager's webhook."""
    if crd["spec"]["names"]["plural"] not in CONVERTED:
        return crd
    conversion = {
        "strategy": "Webhook",
        "webhook": {"clientConfig": _client_config("/convert", ca_bundle), "conversionReviewVersions": ["v1"]},
    }
    return {**crd, "spec": {**crd["spec"], "conversion": conversion}}


def _ca_bundle(layout: Layout) -> str:
    return base64.b64encode((layout.pki / "ca.crt").read_bytes()).decode()


def _apply(layout: Layout, name: str, objects: list[dict[str, Any]]) -> None:
    """Apply `objects` server-side (Kueue's CRDs are too large for the client-side apply annotation)."""
    path = state_dir(layout) / name
    path.write_text("\n---\n".join(json.dumps(o) for o in objects))
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(path), timeout=120)


def _ready() -> bool:
    return http_ok(f"http://127.0.0.1:{HEALTH_PORT}/readyz")


def start(layout: Layout) -> None:
    """Install Kueue's CRDs and webhooks and start its manager (a running one is left alone)."""
    if running(layout):
        return
    if not api_ready(layout):
        raise ClusterError("the dev cluster is not running: run 'make dev-cluster' first")
    program, crds, hooks = home(layout) / "kueue", home(layout) / "crds", home(layout) / "webhook.yaml"
    if not (program.exists() and crds.is_dir() and hooks.exists()):
        raise ClusterError(f"{program.parent} is incomplete: run 'make dev-cluster KUEUE=1' (it builds Kueue)")
    for port in (WEBHOOK_PORT, HEALTH_PORT):
        ensure_port_free(port, "Kueue's manager")
    state = state_dir(layout)
    certs = state / "certs"
    try:  # the webhook server reads tls.crt and tls.key from its certDir
        client_certificate(certs, "tls", "kueue-webhook", None, layout.pki, ip_san="127.0.0.1")
    except RealNodeError as e:
        raise ClusterError(f"Kueue's serving certificate: {e}") from e
    etc = state / "etc"
    shutil.rmtree(etc, ignore_errors=True)
    shutil.copytree(certs, etc / "kueue" / "metrics" / "certs")
    ca = _ca_bundle(layout)
    definitions = [with_conversion(yaml.safe_load(f.read_text()), ca) for f in sorted(crds.glob("*.yaml"))]
    _apply(layout, "crds.json", definitions)
    kubectl(layout, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(state / "crds.json"), timeout=70)
    if kubectl(layout, "get", "namespace", NAMESPACE, check=False).returncode != 0:
        kubectl(layout, "create", "namespace", NAMESPACE)
    settings = state / "config.yaml"
    settings.write_text(json.dumps(configuration(certs), indent=2))  # JSON is YAML
    log = state / "kueue.log"
    argv = [
        *OVERLAY_ETC, str(etc),
        str(program), f"--config={settings}",
        # its on-demand visibility API is an aggregated API server of its own (a Service, certificates)
        "--feature-gates=VisibilityOnDemand=false",
    ]  # fmt: skip
    env = {"KUBECONFIG": str(layout.kubeconfig), "PATH": "/usr/bin:/bin"}
    pid = spawn(argv, pidfile(layout), log, env)
    wait_ready("Kueue's manager", _ready, pid, log, START_TIMEOUT, ClusterError)
    _apply(layout, "webhooks.json", webhook_configurations(list(yaml.safe_load_all(hooks.read_text())), ca))
    say(f"Kueue running (pid {pid}, log {log})")


def stop(layout: Layout) -> None:
    """Stop Kueue's manager if it runs. Its webhook configurations stay with the cluster's state (which `down`
    removes): while it is stopped, the API server refuses writes of Kueue's kinds, none of anything else."""
    stop_pidfile(pidfile(layout), 15)
