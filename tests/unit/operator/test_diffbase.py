"""kopf's diff base, kept for nothing (diffbase.py): no object's events build, fetch or store an essence, and
no annotation is written."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from ringleader_operator.diffbase import NoDiffBaseStorage

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "j-worker-0", "labels": {"a": "b"},
                    "annotations": {"ringleader.dev/last-handled-configuration": '{"spec": {}}\n'},
                    "managedFields": [{"manager": "kubelet"}] * 50},
       "spec": {"containers": [{"name": "t", "env": [{"name": f"V{i}", "value": "x"} for i in range(100)]}]},
       "status": {"phase": "Running"}}  # fmt: skip
JOB = {"apiVersion": "ringleader.dev/v1alpha1", "kind": "TrainingJob",
       "metadata": {"name": "j", "labels": {"team": "a"},
                    "annotations": {"ringleader.dev/last-handled-configuration": '{"spec": {}}\n'}},
       "spec": {"workers": {"replicas": 2}}, "status": {"phase": "Running"}}  # fmt: skip


@pytest.mark.parametrize("obj", [POD, JOB], ids=["pod", "training-job"])
def test_no_object_has_an_essence_and_nothing_is_stored_on_it(obj: dict[str, Any]) -> None:
    ours = NoDiffBaseStorage()
    body = kopf.Body(obj)  # type: ignore[arg-type]
    assert ours.build(body=body) == {}
    assert ours.fetch(body=body) is None  # although the object carries kopf's annotation (an older operator's)
    assert kopf.AnnotationsDiffBaseStorage(prefix="ringleader.dev").fetch(body=body) is not None
    patch = kopf.Patch()
    ours.store(body=body, patch=patch, essence=kopf.BodyEssence(spec={"x": 1}))
    assert not patch
