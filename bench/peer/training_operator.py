"""Kubeflow's training-operator run out of cluster against the dev cluster: the control-plane benchmark's peer.

Built from the Go module proxy by bench/peer/build-training-operator.sh (version in bench/peer/versions.env)
into the cache, with the CRD, ClusterRole and webhook configuration that ship in its module. In a cluster its
Deployment, Service and cert controller provide what it waits for; out of cluster `setup` provides it:

- the PyTorchJob CRD, and its ClusterRole bound to the service account `training-operator` of the audited
  namespace, which it runs as (a bound-token kubeconfig), so its requests are counted like Ringleader's;
- its namespace (MY_POD_NAMESPACE, where its cert controller keeps the Secret): the audited namespace;
- the ValidatingWebhookConfiguration `validator.training-operator.kubeflow.org` with the module's PyTorchJob
  webhook, pointing by URL at its webhook server on 127.0.0.1, failurePolicy Ignore;
- the Secret `training-operator-webhook-cert` with a CA and a serving certificate made by openssl, valid for the
  name its cert controller checks (training-operator.<namespace>.svc) and for 127.0.0.1: the cert controller
  finds them valid and keeps them, injects the CA into the webhook configuration, and waits for the serving
  files in /tmp/k8s-webhook-server/serving-certs (a path fixed in its code), which `setup` writes. The API
  server then really calls its validating webhook on every PyTorchJob create, as in a cluster.

Started without flags it runs with its defaults (one controller thread, client QPS 20, burst 30), as its
Deployment does; the benchmark's matched configuration adds its budget flags (bench/control_plane_plan.py).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from ringleader_devcluster.commands import kubectl
from ringleader_devcluster.controlplane import AUDITED_NAMESPACE
from ringleader_devcluster.layout import Layout, read_versions

from bench.common import apply, spawn, wait_established
from bench.identity import ensure, kubeconfig_for
from bench.record import PEER_VERSIONS

ACCOUNT = "training-operator"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
SECRET = "training-operator-webhook-cert"
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")  # fixed in its pkg/cert
WEBHOOK_PORT, METRICS_PORT, HEALTH_PORT = 19443, 18090, 18091
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"


def home(layout: Layout) -> Path:
    """Where the build script put the binary, CRD, ClusterRole and webhook manifests."""
    return layout.cache / f"training-operator-{read_versions(PEER_VERSIONS)['TRAINING_OPERATOR_VERSION']}"


def binary(layout: Layout) -> Path:
    path = home(layout) / "training-operator"
    if not path.exists():
        raise SystemExit(f"bench: {path} is missing: run bench/peer/build-training-operator.sh (make bench does)")
    return path


def openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise SystemExit("bench: openssl is needed to make the training-operator's webhook certificates") from None
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"bench: openssl {args[0]} failed: {e.stderr.strip()}") from None


def make_certificates(out: Path, namespace: str) -> dict[str, bytes]:
    """ca.crt, ca.key (PKCS#1, as its cert controller parses it), tls.crt, tls.key: a CA named
    training-operator-ca and a server certificate for the webhook's service name and 127.0.0.1."""
    out.mkdir(parents=True, exist_ok=True)
    ca_key, ca_crt, key, csr, crt = (out / n for n in ("ca.key", "ca.crt", "tls.key", "tls.csr", "tls.crt"))
    days = "3650"
    openssl("genrsa", "-traditional", "-out", str(ca_key), "2048")
    openssl(
        "req", "-x509", "-new", "-key", str(ca_key), "-out", str(ca_crt), "-days", days,
        "-subj", "/O=training-operator/CN=training-operator-ca",
        "-addext", "subjectAltName=DNS:training-operator-ca",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,digitalSignature,keyEncipherment",
    )  # fmt: skip
    openssl("genrsa", "-traditional", "-out", str(key), "2048")
    openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", "/O=training-operator/CN=training-operator")
    ext = out / "server.ext"
    ext.write_text(
        f"subjectAltName=DNS:{ACCOUNT}.{namespace}.svc,IP:127.0.0.1\n"
        "extendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(crt), "-days", days, "-extfile", str(ext),
    )  # fmt: skip
    return {p.name: p.read_bytes() for p in (ca_crt, ca_key, crt, key)}


def webhook_configuration(layout: Layout) -> dict[str, Any]:
    """The module's PyTorchJob webhook, called by URL on this host, failures ignored."""
    docs = [d for d in yaml.safe_load_all((home(layout) / "webhook.yaml").read_text()) if d]
    hooks = [w for d in docs for w in d["webhooks"] if "pytorchjob" in w["name"]]
    for w in hooks:
        path = w["clientConfig"]["service"]["path"]
        w["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}"}
        w["failurePolicy"] = "Ignore"
        w["timeoutSeconds"] = 5
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": hooks,
    }


def setup(layout: Layout, core: client.CoreV1Api, workdir: Path) -> Path:
    """Everything it needs outside a cluster (see the module's docstring); returns its kubeconfig."""
    crds = home(layout) / "crds"
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(crds), timeout=60)
    wait_established(client.ApiextensionsV1Api(core.api_client), f"{PLURAL}.{GROUP}")
    role = yaml.safe_load((home(layout) / "rbac" / "role.yaml").read_text())
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role["metadata"]["name"]},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": AUDITED_NAMESPACE}],
    }
    certs = make_certificates(workdir / "certs", AUDITED_NAMESPACE)
    secret = {"metadata": {"name": SECRET}, "data": {k: base64.b64encode(v).decode() for k, v in certs.items()}}
    with contextlib.suppress(client.ApiException):
        core.delete_namespaced_secret(SECRET, AUDITED_NAMESPACE)  # certificates of an earlier setup
    ensure(core.create_namespaced_secret, AUDITED_NAMESPACE, secret)
    apply(layout, role, binding, webhook_configuration(layout))
    CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (CERT_DIR / name).write_bytes(certs[name])
    return kubeconfig_for(core, layout.kubeconfig, ACCOUNT, workdir / "kubeconfig")


def start(layout: Layout, kubeconfig: Path, log: Path, flags: Sequence[str] = ()) -> subprocess.Popen[bytes]:
    """Start it with `flags` added (e.g. its client budget) and return once it reports ready (certificates
    mounted, CA injected, webhook serving)."""
    argv = [
        str(binary(layout)),
        "--enable-scheme=pytorchjob",
        f"--metrics-bind-address=127.0.0.1:{METRICS_PORT}",
        f"--health-probe-bind-address=127.0.0.1:{HEALTH_PORT}",
        f"--webhook-server-port={WEBHOOK_PORT}",
        f"--kubeconfig={kubeconfig}",
        *flags,
    ]
    env = {**os.environ, "MY_POD_NAMESPACE": AUDITED_NAMESPACE, "KUBECONFIG": str(kubeconfig)}
    return spawn(argv, env, log, f"http://127.0.0.1:{HEALTH_PORT}/readyz", "training-operator")


def check_webhook(custom: client.CustomObjectsApi, namespace: str) -> None:
    """Prove the API server reaches its validating webhook: a PyTorchJob without a `pytorch` container, created
    as a dry run, must be denied by it (with the webhook unreachable, failurePolicy Ignore would let it in)."""
    bad = job("webhook-check", 1, {"containers": [{"name": "pytorch", "image": "none"}]})
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = "not-pytorch"
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad, dry_run="All")
    except client.ApiException as e:
        if "denied the request" in (e.body or ""):
            return
        raise
    raise SystemExit("bench: the training-operator's webhook was not called (check the webhook configuration)")


def job(name: str, workers: int, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A PyTorchJob of `workers` pods: a Master and workers - 1 Workers, as its users write one."""
    spec = {**pod_spec, "containers": [{**c, "name": "pytorch"} for c in pod_spec["containers"]]}
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": {"spec": spec}}}
    if workers > 1:
        replicas["Worker"] = {"replicas": workers - 1, "restartPolicy": "OnFailure", "template": {"spec": spec}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {"pytorchReplicaSpecs": replicas},
    }
