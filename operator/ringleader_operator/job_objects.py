"""The objects a job owns as a whole, pure: the headless Service its ranks find each other by, the token Secret
the data plane authenticates with, the NetworkPolicy that admits only its own pods. The ranks' pods are built in
builders.py; a gang's objects (PodGroups, Workloads) in gang_backends/."""

from __future__ import annotations

from typing import Any

from ringleader_api import Strategy, TrainingJob

from .names import (
    MASTER_PORT,
    METRICS_PORT,
    PS_PORT,
    TOKEN_KEY,
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
