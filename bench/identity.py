"""Run a benchmarked operator as a service account of the audited namespace, as it runs in a real cluster.

The dev cluster's API server audits exactly the requests of service accounts in AUDITED_NAMESPACE
(ringleader_devcluster.cluster), so giving each operator its own account there is what lets the benchmark count
the requests each one issues (bench/audit.py)."""

from __future__ import annotations

from pathlib import Path

import yaml
from kubernetes import client
from ringleader_devcluster.controlplane import AUDITED_NAMESPACE

TOKEN_SECONDS = 4 * 3600  # outlives the longest benchmark run


def ensure(create: object, *args: object) -> None:
    """Call a create_* API method, treating "already exists" as done."""
    try:
        create(*args)  # type: ignore[operator]
    except client.ApiException as e:
        if e.status != 409:
            raise


def username(account: str, namespace: str = AUDITED_NAMESPACE) -> str:
    """The user name the API server (and so the audit log) gives a service account."""
    return f"system:serviceaccount:{namespace}:{account}"


def ensure_namespace(core: client.CoreV1Api, name: str = AUDITED_NAMESPACE) -> None:
    ensure(core.create_namespace, {"metadata": {"name": name}})


def kubeconfig_for(
    core: client.CoreV1Api, admin_kubeconfig: Path, account: str, out: Path, namespace: str = AUDITED_NAMESPACE
) -> Path:
    """Write a kubeconfig that authenticates as `account` with a fresh bound token, to the admin kubeconfig's
    API server and CA. The account is created when missing; its permissions are the caller's business."""
    ensure(core.create_namespaced_service_account, namespace, {"metadata": {"name": account}})
    request = {"spec": {"audiences": [], "expirationSeconds": TOKEN_SECONDS}}
    token = core.create_namespaced_service_account_token(account, namespace, request).status.token
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
        "current-context": account,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out
