"""The project's own operator image, built from its Dockerfile with buildah on a base image made locally, runs on
the real node in a namespace that enforces Pod Security "restricted": non-root, no torch, its entry point works,
and it reaches the API server as in-cluster clients do."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from ringleader_devcluster import images, realnode
from ringleader_devcluster.layout import Layout

from tests.support.cluster import busybox_pod, logs, wait_phase
from tests.support.shared import one_at_a_time

CHECK = (
    "import os, importlib.util, ringleader_operator.main as m; "
    "print('uid', os.getuid(), 'torch', importlib.util.find_spec('torch') is not None, flush=True); "
    # the API as an in-cluster client reaches it: the `kubernetes` Service's cluster IP (kube-proxy), the API
    # server's certificate for that address, the pod's ServiceAccount token
    "import json, ssl, urllib.request as u; sa = '/var/run/secrets/kubernetes.io/serviceaccount/'; "
    "url = f\"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}\"; "
    "req = u.Request(url + '/apis/authentication.k8s.io/v1/selfsubjectreviews', "
    'data=b\'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}\', '
    "headers={'Authorization': 'Bearer ' + open(sa + 'token').read(), 'Content-Type': 'application/json'}); "
    "ctx = ssl.create_default_context(cafile=sa + 'ca.crt'); "
    "print('api user', json.load(u.urlopen(req, context=ctx, timeout=10))['status']['userInfo']['username']); "
    "m.main(['--help'])"
)


@pytest.fixture(scope="module", autouse=True)
def operator_image(layout: Layout, kubeconfig: Path) -> None:
    """Built once into the cache (again only when its inputs change) and imported into the node's containerd."""
    with one_at_a_time(layout):
        realnode.import_image(realnode.Paths.of(layout), images.build(layout, images.OPERATOR))
        realnode.import_image(realnode.Paths.of(layout), realnode.busybox_archive(layout))


def restricted(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with what Pod Security "restricted" asks of every pod and container."""
    pod["spec"]["securityContext"] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for c in pod["spec"]["containers"]:
        c["securityContext"] = {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        }
    return pod


def test_the_operator_image_runs_non_root_without_torch_in_a_restricted_namespace(
    core: client.CoreV1Api, namespace: str
) -> None:
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    with pytest.raises(ApiException) as refused:  # the namespace does enforce it
        core.create_namespaced_pod(namespace, busybox_pod("loose", "true"))
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)

    pod = busybox_pod("operator", "")
    pod["spec"]["containers"][0] |= {"image": images.OPERATOR.name, "command": ["python", "-c", CHECK]}
    pod["spec"]["automountServiceAccountToken"] = True
    core.create_namespaced_pod(namespace, restricted(pod))
    phase = wait_phase(core, namespace, "operator", {"Succeeded", "Failed"}, timeout=60).status.phase
    out = logs(core, namespace, "operator")
    assert phase == "Succeeded", out
    assert "uid 65532 torch False" in out and "usage: ringleader-operator" in out
    assert f"api user system:serviceaccount:{namespace}:default" in out


def test_a_failed_build_names_the_dockerfile_step_and_why(layout: Layout, tmp_path: Path) -> None:
    """...and leaves no working container (nor its mounted layer) behind in buildah's storage."""
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo fine\nRUN echo the reason >&2; exit 7\nRUN true\n"
    )
    broken = images.Image("localhost/ringleader/broken:dev", "Dockerfile", ())
    containers = [*images._buildah(layout), "containers", "--quiet"]
    before = set(subprocess.run(containers, capture_output=True, text=True, check=True, timeout=60).stdout.split())
    with pytest.raises(realnode.RealNodeError) as failed:
        images._bud(layout, broken, tmp_path)
    assert str(failed.value) == (
        "building Dockerfile failed at STEP 3/4 `RUN echo the reason >&2; exit 7` (exit status 7): the reason"
    )
    after = set(subprocess.run(containers, capture_output=True, text=True, check=True, timeout=60).stdout.split())
    assert after <= before
