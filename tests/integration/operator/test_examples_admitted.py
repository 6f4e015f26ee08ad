"""Every pod the operator makes of every example (examples/kubeflow/ converted with `ringleader convert`) is
admitted where Pod Security "restricted" is enforced, judged by the API server's own admission in a dry run. The
examples are run, under the chart's operator in such a namespace: tests/e2e/test_examples_chart.py."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException
from ringleader_api import TrainingJob
from ringleader_operator.builders import build_pod, desired_ranks

from tests.support.examples import EXAMPLES, KUBEFLOW_EXAMPLES, converted


def quantities_as_strings(pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with its resource quantities as strings: the API server takes numbers too, this client does not."""
    for c in pod["spec"]["containers"]:
        for part in ("limits", "requests"):
            values = (c.get("resources") or {}).get(part) or {}
            values.update({k: str(v) for k, v in values.items()})
    return pod


def test_every_pod_of_every_example_passes_pod_security_restricted(core: client.CoreV1Api, namespace: str) -> None:
    """The pods the operator builds from each example, as written, created (dry run) in a namespace enforcing
    Pod Security "restricted": the API server's own admission judges them."""
    core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    loose = {"metadata": {"name": "loose"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    with pytest.raises(ApiException) as refused:  # the namespace does enforce it
        core.create_namespaced_pod(namespace, loose, dry_run="All")
    assert refused.value.status == 403 and "violates PodSecurity" in str(refused.value.body)

    examples = [(p.name, [d for d in yaml.safe_load_all(p.read_text()) if d]) for p in EXAMPLES]
    examples += [(f"kubeflow/{p.name}", converted(p)) for p in KUBEFLOW_EXAMPLES]
    refusals, admitted = [], 0
    for example, docs in examples:
        doc = next(d for d in docs if d["kind"] == "TrainingJob")
        job = TrainingJob.model_validate({**doc, "metadata": {**doc["metadata"], "namespace": namespace, "uid": "u"}})
        for role, index in desired_ranks(job):
            try:
                core.create_namespaced_pod(namespace, quantities_as_strings(build_pod(job, role, index)), dry_run="All")
                admitted += 1
            except ApiException as e:
                refusals.append(f"{example} {role.value}-{index}: {e.status} {e.body}")
    assert not refusals, "\n".join(refusals)
    assert admitted >= len(examples)
