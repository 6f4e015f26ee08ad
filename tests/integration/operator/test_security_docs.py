"""The ValidatingAdmissionPolicy docs/security.md offers, applied as written (its service account's name
replaced by a test account's): a pod that account creates is admitted only when a TrainingJob controls it,
and nobody else's pods are touched by it."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiException
from ringleader_devcluster.layout import REPO_ROOT

from tests.support.cluster import wait_for

DOC = REPO_ROOT / "docs" / "security.md"
DOC_ACCOUNT = "system:serviceaccount:ringleader-system:ringleader"


def policy_documents(account: str) -> list[dict[str, Any]]:
    """The policy and its binding from the docs' yaml block, named for this test and matching `account`."""
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert block, "docs/security.md has no yaml block"
    assert DOC_ACCOUNT in block[1]
    docs = list(yaml.safe_load_all(block[1].replace(DOC_ACCOUNT, account)))
    suffix = uuid.uuid4().hex[:6]
    for d in docs:
        d["metadata"]["name"] += f"-{suffix}"
        if d["kind"] == "ValidatingAdmissionPolicyBinding":
            d["spec"]["policyName"] += f"-{suffix}"
    return docs


@pytest.fixture
def policy(api: client.ApiClient, namespace: str) -> Iterator[str]:
    """The docs' policy in force for the account `<namespace>:operator`; that account's name."""
    account = f"system:serviceaccount:{namespace}:operator"
    rbac = client.RbacAuthorizationV1Api(api)  # RBAC comes first: the account may create pods here
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "operator"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "User", "name": account, "apiGroup": "rbac.authorization.k8s.io"}],
    })  # fmt: skip
    admission = client.AdmissionregistrationV1Api(api)
    policy, binding = policy_documents(account)
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    yield account
    admission.delete_validating_admission_policy_binding(binding["metadata"]["name"])
    admission.delete_validating_admission_policy(policy["metadata"]["name"])


def pod(name: str, owners: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": owners},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


JOB_OWNER = {
    "apiVersion": "ringleader.dev/v1alpha1",
    "kind": "TrainingJob",
    "name": "j",
    "uid": "u",
    "controller": True,
}


def test_the_docs_admission_policy_limits_the_operator_to_pods_a_training_job_owns(
    core: client.CoreV1Api, kubeconfig: Path, namespace: str, policy: str
) -> None:
    as_operator = config.new_client_from_config(config_file=str(kubeconfig))
    as_operator.set_default_header("Impersonate-User", policy)  # the admin may impersonate (system:masters)
    operator_core = client.CoreV1Api(as_operator)

    def refused(api: client.CoreV1Api, body: dict[str, Any]) -> str | None:
        try:
            api.create_namespaced_pod(namespace, body, dry_run="All")
        except ApiException as e:
            return str(e.body)
        return None

    # The policy takes a moment to be in force; until then the unowned pod is admitted.
    def in_force() -> str | None:
        message = refused(operator_core, pod("unowned", []))
        return message if message and "only pods that a TrainingJob owns" in message else None

    message = wait_for("the policy in force", in_force, timeout=30)
    assert "ValidatingAdmissionPolicy" in message
    rs_owner = {**JOB_OWNER, "apiVersion": "apps/v1", "kind": "ReplicaSet"}
    assert "only pods that a TrainingJob owns" in (refused(operator_core, pod("by-rs", [rs_owner])) or "")
    assert "only pods that a TrainingJob owns" in (
        refused(operator_core, pod("not-controller", [{**JOB_OWNER, "controller": False}])) or ""
    )
    assert refused(operator_core, pod("rank", [JOB_OWNER])) is None  # a rank is admitted
    assert refused(core, pod("someone-elses", [])) is None  # other users' pods are not the policy's business
