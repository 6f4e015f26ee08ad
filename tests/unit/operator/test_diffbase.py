"""kopf's diff base without pods (diffbase.py): a pod's events build, fetch and store nothing; a TrainingJob's
essence is kopf's own."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from ringleader_operator.diffbase import JobsOnlyDiffBaseStorage

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "j-worker-0", "labels": {"a": "b"},
                    "annotations": {"ringleader.dev/last-handled-configuration": '{"spec": {}}\n'},
                    "managedFields": [{"manager": "kubelet"}] * 50},
       "spec": {"containers": [{"name": "t", "env": [{"name": f"V{i}", "value": "x"} for i in range(100)]}]},
       "status": {"phase": "Running"}}  # fmt: skip
JOB = {"apiVersion": "ringleader.dev/v1alpha1", "kind": "TrainingJob",
       "metadata": {"name": "j", "labels": {"team": "a"}, "annotations": {"note": "x"}},
       "spec": {"workers": {"replicas": 2}}, "status": {"phase": "Running"}}  # fmt: skip


def storages() -> tuple[JobsOnlyDiffBaseStorage, kopf.AnnotationsDiffBaseStorage]:
    return JobsOnlyDiffBaseStorage(prefix="ringleader.dev"), kopf.AnnotationsDiffBaseStorage(prefix="ringleader.dev")


def test_a_pod_has_no_essence_and_nothing_is_stored_on_it() -> None:
    ours, _ = storages()
    body = kopf.Body(POD)  # type: ignore[arg-type]
    assert ours.build(body=body) == {}
    assert ours.fetch(body=body) is None  # although the pod carries the annotation
    patch = kopf.Patch()
    ours.store(body=body, patch=patch, essence=kopf.BodyEssence(spec={"x": 1}))
    assert not patch


@pytest.mark.parametrize("body", [JOB, {**JOB, "kind": "Pod"}], ids=["training-job", "not-a-core-pod"])
def test_every_other_object_keeps_kopfs_essence(body: dict[str, Any]) -> None:
    ours, kopfs = storages()
    b = kopf.Body(body)  # type: ignore[arg-type]
    essence = ours.build(body=b)
    assert essence == kopfs.build(body=b) and essence["spec"] == body["spec"]
    patch, theirs = kopf.Patch(), kopf.Patch()
    ours.store(body=b, patch=patch, essence=essence)
    kopfs.store(body=b, patch=theirs, essence=essence)
    assert patch == theirs and patch
