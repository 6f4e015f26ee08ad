"""Table tests of the pure pod translation: env resolution, $(VAR) expansion, volumes, GPUs, rejections."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_devcluster.node.podenv import (
    Lookups,
    MissingReference,
    PodInputs,
    UnsupportedPod,
    expand_vars,
    resolve_env,
)
from ringleader_devcluster.node.podplan import plan_pod, plan_volume

CONFIG_MAPS = {"cfg": {"lr": "0.1", "bs": "32"}, "kube-root-ca.crt": {"ca.crt": "CA"}}
SECRETS = {"sec": {"token": "s3cret"}}
LOOKUPS = Lookups(config_map=lambda _ns, n: CONFIG_MAPS.get(n), secret=lambda _ns, n: SECRETS.get(n))
BASE = {"PATH": "/venv/bin:/usr/bin"}


def pod(containers: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "uid": "u-1",
            "labels": {"role": "worker"},
            "annotations": {"note": "hi"},
        },
        "spec": {
            "nodeName": "process-node",
            "containers": containers or [{"name": "main", "command": ["true"]}],
            **spec,
        },
    }


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        ("$(A)-$(B)", {"A": "1", "B": "2"}, "1-2"),
        ("$(MISSING)", {}, "$(MISSING)"),
        ("$$(A)", {"A": "1"}, "$(A)"),
        ("$$$(A)", {"A": "1"}, "$1"),
        ("no refs $ here", {}, "no refs $ here"),
        ("$(A", {"A": "1"}, "$(A"),
    ],
    ids=["two-refs", "undefined-kept", "escaped", "escape-then-ref", "lone-dollar", "unclosed"],
)
def test_expand_vars(text: str, env: dict[str, str], want: str) -> None:
    assert expand_vars(text, env) == want


@pytest.mark.parametrize(
    ("entry", "want"),
    [
        ({"name": "X", "value": "plain"}, "plain"),
        ({"name": "X", "value": "$(PATH)"}, "/venv/bin:/usr/bin"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, "w-0"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}, "ml"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}, "198.18.1.2"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}, "198.18.0.1"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}, "process-node"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['role']"}}}, "worker"),
        ({"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}}, "hi"),
        ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "lr"}}}, "0.1"),
        ({"name": "X", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}}, "s3cret"),
        ({"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}}}, None),
        ({"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}, "2"),
    ],
    ids=[
        "value",
        "expanded",
        "name",
        "namespace",
        "pod-ip",
        "host-ip",
        "node",
        "label",
        "annotation",
        "configmap",
        "secret",
        "optional-missing",
        "resource",
    ],
)
def test_resolve_env_single_entry(entry: dict[str, Any], want: str | None) -> None:
    container = {"name": "main", "env": [entry], "resources": {"limits": {"cpu": "2"}}}
    env = resolve_env(PodInputs(pod([container]), LOOKUPS, BASE, "198.18.1.2", "198.18.0.1"), container)
    assert env.get("X") == want


def test_env_from_with_prefix_then_env_overrides_in_order() -> None:
    container = {
        "name": "main",
        "envFrom": [{"prefix": "C_", "configMapRef": {"name": "cfg"}}],
        "env": [{"name": "C_lr", "value": "0.5"}, {"name": "BOTH", "value": "$(C_lr)/$(C_bs)"}],
    }
    env = resolve_env(PodInputs(pod([container]), LOOKUPS, BASE, "", ""), container)
    assert (env["C_lr"], env["C_bs"], env["BOTH"], env["PATH"]) == ("0.5", "32", "0.5/32", BASE["PATH"])


@pytest.mark.parametrize(
    "entry",
    [
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k"}}},
        {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "nokey"}}},
        {"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}},
    ],
    ids=["missing-configmap", "missing-key", "missing-secret"],
)
def test_missing_references_make_the_pod_wait(entry: dict[str, Any]) -> None:
    container = {"name": "main", "command": ["true"], "env": [entry]}
    with pytest.raises(MissingReference):
        plan_pod(pod([container]), LOOKUPS, BASE, "", "")


@pytest.mark.parametrize(
    ("spec", "reason", "mentions"),
    [
        ({"volumes": [{"name": "v", "nfs": {"server": "s", "path": "/"}}]}, "UnsupportedVolume", "nfs"),
        ({"containers": [{"name": "main", "image": "img:1"}]}, "ContainerCannotRun", "command"),
        ({"ephemeralContainers": [{"name": "dbg"}]}, "UnsupportedFeature", "ephemeral"),
        (
            {"initContainers": [{"name": "side", "command": ["x"], "restartPolicy": "Always"}]},
            "UnsupportedFeature",
            "sidecar",
        ),
        (
            {
                "containers": [
                    {"name": "main", "command": ["x"], "volumeMounts": [{"name": "ghost", "mountPath": "/g"}]}
                ]
            },
            "InvalidVolumeMount",
            "ghost",
        ),
        (
            {
                "containers": [
                    {
                        "name": "main",
                        "command": ["x"],
                        "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.generation"}}}],
                    }
                ]
            },
            "UnsupportedFieldRef",
            "metadata.generation",
        ),
        (
            {"containers": [{"name": "main", "command": ["x"], "resources": {"limits": {"nvidia.com/gpu": "half"}}}]},
            "InvalidGPURequest",
            "half",
        ),
    ],
    ids=["nfs-volume", "no-command", "ephemeral", "sidecar", "unknown-mount", "fieldref", "gpu-not-int"],
)
def test_unsupported_pods_are_rejected_with_a_reason(spec: dict[str, Any], reason: str, mentions: str) -> None:
    p = pod()
    p["spec"].update(spec)
    with pytest.raises(UnsupportedPod) as err:
        plan_pod(p, LOOKUPS, BASE, "", "")
    assert err.value.reason == reason
    assert mentions in err.value.message


def test_full_plan_argv_mounts_security_and_gpus() -> None:
    containers: list[dict[str, Any]] = [
        {
            "name": "trainer",
            "image": "ringleader/trainer:1",
            "command": ["python", "-m", "train"],
            "args": ["--rank", "$(RANK)"],
            "env": [{"name": "RANK", "value": "3"}],
            "workingDir": "/work",
            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt", "subPath": "run1"}],
            "resources": {"limits": {"nvidia.com/gpu": 2}},
            "securityContext": {"runAsUser": 1000},
        },
        {"name": "side", "command": ["sleep", "1"], "resources": {"requests": {"nvidia.com/gpu": "1"}}},
    ]
    p = pod(
        containers,
        volumes=[{"name": "ckpt", "persistentVolumeClaim": {"claimName": "data"}}],
        securityContext={"runAsUser": 2000, "runAsGroup": 3000},
        terminationGracePeriodSeconds=7,
        hostname="w-0",
        subdomain="job",
        restartPolicy="OnFailure",
        initContainers=[{"name": "init", "command": ["true"], "resources": {"limits": {"nvidia.com/gpu": 4}}}],
    )
    plan = plan_pod(p, LOOKUPS, BASE, "198.18.1.2", "198.18.0.1")
    trainer, side = plan.containers
    assert trainer.argv == ("python", "-m", "train", "--rank", "3")
    assert (trainer.run_as_user, trainer.run_as_group, side.run_as_user) == (1000, 3000, 2000)
    assert trainer.mounts[0].sub_path == "run1" and trainer.working_dir == "/work"
    assert plan.volumes[0].claim == "data"
    assert (trainer.gpus, side.gpus, plan.gpus) == (2, 1, 4)  # max(init 4, sum 3)
    assert (plan.grace_seconds, plan.restart_policy, plan.subdomain) == (7, "OnFailure", "job")
    assert plan.init_containers[0].init


def test_defaults_grace_restart_policy_hostname() -> None:
    plan = plan_pod(pod(), LOOKUPS, BASE, "", "")
    assert (plan.grace_seconds, plan.restart_policy, plan.hostname, plan.host_network) == (30, "Always", "w-0", False)


def test_service_account_projected_volume_collects_token_ca_and_namespace() -> None:
    volume = {
        "name": "kube-api-access",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ]
        },
    }
    plan = plan_volume(PodInputs(pod(), LOOKUPS, BASE, "", ""), volume)
    assert plan.kind == "files"
    assert dict(plan.files) == {"ca.crt": b"CA", "namespace": b"ml"}
    assert plan.token_requests == (("token", "", 3607),)


@pytest.mark.parametrize(
    ("volume", "kind", "files"),
    [
        ({"name": "v", "emptyDir": {}}, "dir", {}),
        ({"name": "v", "hostPath": {"path": "/data", "type": "DirectoryOrCreate"}}, "host", {}),
        ({"name": "v", "configMap": {"name": "cfg"}}, "files", {"lr": b"0.1", "bs": b"32"}),
        (
            {"name": "v", "configMap": {"name": "cfg", "items": [{"key": "lr", "path": "sub/lr.txt"}]}},
            "files",
            {"sub/lr.txt": b"0.1"},
        ),
        ({"name": "v", "secret": {"secretName": "sec"}}, "files", {"token": b"s3cret"}),
        ({"name": "v", "secret": {"secretName": "nope", "optional": True}}, "files", {}),
        (
            {"name": "v", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
            "files",
            {"labels": b'role="worker"'},
        ),
    ],
    ids=["emptydir", "hostpath", "configmap", "configmap-items", "secret", "optional-secret", "downward-labels"],
)
def test_volume_kinds(volume: dict[str, Any], kind: str, files: dict[str, bytes]) -> None:
    plan = plan_volume(PodInputs(pod(), LOOKUPS, BASE, "", ""), volume)
    assert plan.kind == kind
    assert dict(plan.files) == files
