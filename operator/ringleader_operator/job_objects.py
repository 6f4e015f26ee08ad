"""The objects a job owns as a whole, pure: the headless Service its ranks find each other by, the token Secret
the data plane authenticates with, the NetworkPolicy that admits only its own pods, and where it has one
(rank_env.wants_coordinator) its coordinator: a Deployment of one pod, its headless Service and NetworkPolicy. The
ranks' pods are built in builders.py; a gang's objects (PodGroups, Workloads) in gang_backends/."""

from __future__ import annotations

from typing import Any

from ringleader_api import Strategy, TrainingJob

from .builders import trainer_container_index
from .names import (
    COORDINATOR_LABEL,
    MASTER_PORT,
    METRICS_PORT,
    PS_PORT,
    TOKEN_KEY,
    coordinator_name,
    job_labels,
    owner_reference,
    token_secret_name,
    uid_suffixed,
)


def job_metadata(job: TrainingJob, name: str) -> dict[str, Any]:
    """The metadata of an object the job owns as a whole (its Service, PodGroup, token Secret, NetworkPolicy)."""
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": job_labels(job.name),
        "ownerReferences": [owner_reference(job)],
    }


def build_token_secret(job: TrainingJob, token: str) -> dict[str, Any]:
    """The job's token Secret, owned by the job (deleted with it) and immutable (kubelets need not watch it).
    `token` comes from the caller (a fresh random value: the I/O layer's)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": job_metadata(job, token_secret_name(job)),
        "type": "Opaque",
        "immutable": True,
        "stringData": {TOKEN_KEY: token},
    }


def build_network_policy(job: TrainingJob, operator_namespace: str, operator_labels: dict[str, str]) -> dict[str, Any]:
    """`<job>-ranks-<uid prefix>`: ingress to the job's pods only from the job's own pods (any port: the
    rendezvous, gloo's and NCCL's ephemeral ports, the parameter server, the ring) and from the operator's pods to
    the metrics port. Egress is left open. Policies add up: a user's own policy can admit more (a Prometheus)."""
    ranks = {"matchLabels": job_labels(job.name)}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": job_metadata(job, uid_suffixed(job, "ranks")),
        "spec": {
            "podSelector": ranks,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": ranks}]},
                {
                    "from": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
                            "podSelector": {"matchLabels": dict(operator_labels)},
                        }
                    ],
                    "ports": [{"protocol": "TCP", "port": METRICS_PORT}],
                },
            ],
        },
    }


def build_service(job: TrainingJob) -> dict[str, Any]:
    """Headless Service `<job>`: gives every rank the DNS name `<pod>.<job>`, published before pods are
    ready, because rendezvous needs the names while ranks are still starting."""
    ports = [{"name": "c10d", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}]
    if job.spec.strategy == Strategy.PARAMETER_SERVER:
        ports.append({"name": "ps", "port": PS_PORT, "targetPort": PS_PORT, "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": job_metadata(job, job.name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": job_labels(job.name),
            "ports": ports,
        },
    }


# What the coordinator's pod asks for: it hosts a store and decides groups (a few MB and a little CPU; the
# interpreter with torch's library loaded is most of its memory).
COORDINATOR_RESOURCES = {"requests": {"cpu": "100m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
# From the workers' template: where the coordinator may run and with what identity, so it lands where the job's
# image can be pulled and its ranks can reach it. Not their scheduler (a gang's), GPUs, volumes or init containers.
_FROM_TEMPLATE = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "imagePullSecrets",
    "securityContext",
    "serviceAccountName",
)


def coordinator_labels(job: TrainingJob) -> dict[str, str]:
    return {COORDINATOR_LABEL: job.name}


def build_coordinator(job: TrainingJob) -> dict[str, Any]:
    """The job's coordinator (`python -m ringleader_trainer.elastic.coordinator`): a Deployment of one pod from the
    workers' trainer image, so Kubernetes starts it again wherever it is lost (a replaced coordinator costs the
    ranks one heal in which nobody receives). It serves the rendezvous store on MASTER_PORT and asks for no GPU.
    Recreate: an old and a new coordinator never serve at once."""
    template = job.spec.workers.template
    trainer = template["spec"]["containers"][trainer_container_index(template, "spec.workers.template")]
    spec = {key: template["spec"][key] for key in _FROM_TEMPLATE if template["spec"].get(key) is not None}
    container: dict[str, Any] = {
        "name": "coordinator",
        "image": trainer.get("image"),
        "command": ["python", "-u", "-m", "ringleader_trainer.elastic.coordinator"],
        "env": [{"name": "RINGLEADER_RENDEZVOUS", "value": f"{coordinator_name(job)}:{MASTER_PORT}"}],
        "ports": [{"name": "c10d", "containerPort": MASTER_PORT, "protocol": "TCP"}],
        "resources": COORDINATOR_RESOURCES,
    }
    for key in ("imagePullPolicy", "securityContext"):
        if trainer.get(key) is not None:
            container[key] = trainer[key]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": job_metadata(job, coordinator_name(job)),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": coordinator_labels(job)},
            "template": {
                "metadata": {"labels": coordinator_labels(job)},
                "spec": {**spec, "containers": [container], "terminationGracePeriodSeconds": 5},
            },
        },
    }


def build_coordinator_service(job: TrainingJob) -> dict[str, Any]:
    """Headless Service `<job>-coordinator-<uid prefix>`: the coordinator's pod's address by name, published before
    it is ready (the ranks' connects retry until it serves)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": job_metadata(job, coordinator_name(job)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": coordinator_labels(job),
            "ports": [{"name": "c10d", "port": MASTER_PORT, "targetPort": MASTER_PORT, "protocol": "TCP"}],
        },
    }


def build_coordinator_network_policy(job: TrainingJob) -> dict[str, Any]:
    """Ingress to the coordinator's pod only from the job's pods, and only to the store's port (the store, like
    torch.distributed's everywhere, has no authentication of its own: docs/security.md)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": job_metadata(job, coordinator_name(job)),
        "spec": {
            "podSelector": {"matchLabels": coordinator_labels(job)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": job_labels(job.name)}}],
                 "ports": [{"protocol": "TCP", "port": MASTER_PORT}]},
            ],
        },
    }  # fmt: skip
