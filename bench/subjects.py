"""The operators the control-plane benchmark compares, each set up and started the same way: out of cluster on
this host, as a service account of the audited namespace with its own least-privilege RBAC, watching all
namespaces, one fresh process per measured run. Each factory expects the audited namespace to exist."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from ringleader_devcluster.commands import helm, kubectl
from ringleader_devcluster.controlplane import AUDITED_NAMESPACE
from ringleader_devcluster.layout import REPO_ROOT, Layout
from ringleader_devcluster.operatorprocess import OPERATOR_HEALTH_PORT, OPERATOR_METRICS_PORT

from bench.common import apply, spawn, wait_established
from bench.identity import kubeconfig_for, username
from bench.peer import training_operator


@dataclass
class Subject:
    """One operator under test: how to make its job of N workers (one pod each) and how to run it."""

    name: str
    account: str
    group: str
    version: str
    plural: str
    job: Callable[[str, int, dict[str, Any]], dict[str, Any]]
    start: Callable[[Path, Sequence[str]], subprocess.Popen[bytes]]  # (log path, extra flags) -> a ready process

    @property
    def user(self) -> str:
        return username(self.account)


def ringleader(layout: Layout, core: client.CoreV1Api, workdir: Path, tree: Path = REPO_ROOT) -> Subject:
    """This checkout's operator with the helm chart's RBAC (default values: cluster-wide, one replica); `tree`:
    another checkout's operator and CRD instead (an earlier commit, to compare against)."""
    rendered = helm(
        layout, "template", "ringleader", str(REPO_ROOT / "helm" / "ringleader"), "--namespace", AUDITED_NAMESPACE,
        "--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    account = next(d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount")
    install_crd(layout, core, tree)
    apply(layout, *docs)
    kubeconfig = kubeconfig_for(core, layout.kubeconfig, account, workdir / "ringleader.kubeconfig")

    def start(log: Path, flags: Sequence[str]) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "ringleader_operator", "--standalone", "--metrics-port",
                str(OPERATOR_METRICS_PORT), "--health-port", str(OPERATOR_HEALTH_PORT), *flags]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        if tree != REPO_ROOT:
            packages = [str(tree / "operator"), str(tree / "api"), env.get("PYTHONPATH", "")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in packages if p)
        return spawn(argv, env, log, f"http://127.0.0.1:{OPERATOR_HEALTH_PORT}/healthz", "the Ringleader operator")

    return Subject("ringleader", account, "ringleader.dev", "v1alpha1", "trainingjobs", ringleader_job, start)


def install_crd(layout: Layout, core: client.CoreV1Api, tree: Path = REPO_ROOT) -> None:
    """Apply `tree`'s TrainingJob CRD and wait until it is served."""
    kubectl(layout, "apply", "--server-side", "--force-conflicts", "-f", str(tree / "crds" / "trainingjob.yaml"),
            timeout=60)  # fmt: skip
    wait_established(client.ApiextensionsV1Api(core.api_client), "trainingjobs.ringleader.dev")


def ringleader_job(name: str, workers: int, pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A TrainingJob of `workers` workers whose pods run `pod_spec` (its container named as the trainer)."""
    spec = {**pod_spec, "containers": [{**c, "name": "trainer"} for c in pod_spec["containers"]]}
    return {
        "apiVersion": "ringleader.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {"workers": {"replicas": workers, "template": {"spec": spec}}},
    }


def kubeflow_training_operator(layout: Layout, core: client.CoreV1Api, workdir: Path) -> Subject:
    """Kubeflow's training-operator with its own RBAC and webhook (bench/peer/training_operator.py)."""
    kubeconfig = training_operator.setup(layout, core, workdir)
    to = training_operator

    def start(log: Path, flags: Sequence[str]) -> subprocess.Popen[bytes]:
        proc = to.start(layout, kubeconfig, log, flags)
        to.check_webhook(client.CustomObjectsApi(core.api_client), AUDITED_NAMESPACE)
        return proc

    return Subject("training-operator", to.ACCOUNT, to.GROUP, to.VERSION, to.PLURAL, to.job, start)


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
