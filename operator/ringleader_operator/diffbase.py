"""What kopf keeps of an object to tell whether it changed (its "diff base"), pods left out.

kopf builds an object's essence on every watch event of every resource it watches, whether or not a handler
needs a diff: a deep copy of the whole body, then trimmed (`DiffBaseStorage.build`). The operator's pod
handlers (the index and the event handler) never look at a diff, yet each of a pod's three or four events paid
for a deep copy of it, managedFields and all: about a fifth of the operator's CPU while a 256-worker job
started (py-spy). TrainingJobs keep kopf's annotation storage unchanged: `on.update(field="spec")` needs it.
"""

from __future__ import annotations

from typing import Any

import kopf


def _is_pod(body: Any) -> bool:
    return bool(body.get("kind") == "Pod" and body.get("apiVersion") == "v1")


class JobsOnlyDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, except that a pod has no essence: nothing is built, fetched or
    stored for it (its handlers watch events, not changes)."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        if _is_pod(body):
            return kopf.BodyEssence()
        return super().build(body=body, extra_fields=extra_fields)

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        if _is_pod(body):
            return None
        return super().fetch(body=body)

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if not _is_pod(body):
            super().store(body=body, patch=patch, essence=essence)
