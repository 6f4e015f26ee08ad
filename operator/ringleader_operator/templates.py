"""The shape of a pod template, checked before anything reads it.

A TrainingJob's templates are free-form in the CRD (`x-kubernetes-preserve-unknown-fields`): the API server
admits `{"spec": "x"}` or `"env": 5`. Everything the operator reads of a template is checked here first, so a
template of the wrong shape becomes one InvalidSpec naming the field instead of an exception in every round.
Fields the operator does not read are left to the API server, which checks the pods built from them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, ValidationError

from .quantities import parse_quantity

Quantity = Any  # a string or a number; checked by parse_quantity below, whose message names the value


class _Shape(BaseModel):
    """What the operator reads must have its type; everything else passes through unchecked."""

    model_config = ConfigDict(extra="allow", strict=True)


class EnvVar(_Shape):
    name: StrictStr


class ContainerPort(_Shape):
    containerPort: StrictInt | None = None
    name: StrictStr | None = None


class ResourceRequirements(_Shape):
    limits: dict[StrictStr, Quantity] | None = None
    requests: dict[StrictStr, Quantity] | None = None


class VolumeMount(_Shape):
    mountPath: StrictStr | None = None


class Container(_Shape):
    name: StrictStr | None = None  # a missing name gets its own message (builders.trainer_container_index)
    command: list[StrictStr] | None = None
    args: list[StrictStr] | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    volumeMounts: list[VolumeMount] | None = None


class Named(_Shape):
    name: StrictStr | None = None


class Toleration(_Shape):
    key: StrictStr | None = None
    operator: StrictStr | None = None
    value: StrictStr | None = None
    effect: StrictStr | None = None


class PodSpec(_Shape):
    containers: list[Container] = Field(default_factory=list)
    initContainers: list[Container] | None = None
    volumes: list[Named] | None = None
    tolerations: list[Toleration] | None = None
    nodeSelector: dict[StrictStr, StrictStr] | None = None
    schedulingGates: list[Named] | None = None
    schedulerName: StrictStr | None = None
    priorityClassName: StrictStr | None = None
    overhead: dict[StrictStr, Quantity] | None = None


class ObjectMeta(_Shape):
    labels: dict[StrictStr, StrictStr] | None = None
    annotations: dict[StrictStr, StrictStr] | None = None


class PodTemplate(_Shape):
    metadata: ObjectMeta | None = None
    spec: PodSpec = Field(default_factory=PodSpec)


def _path(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a field path: ("spec", "containers", 0, "env") -> spec.containers[0].env."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def check(template: Any, where: str) -> str | None:
    """None when `template` (found at `where`, e.g. spec.workers.template) has the shape the operator reads and
    every resource quantity in it parses; else one line naming the first field that does not."""
    try:
        shape = PodTemplate.model_validate(template)
    except ValidationError as e:
        first = e.errors(include_url=False, include_input=False)[0]
        return f"{where}{_path(tuple(first['loc']))}: {first['msg']}"
    spec = shape.spec
    for kind, containers in (("containers", spec.containers), ("initContainers", spec.initContainers or [])):
        for i, c in enumerate(containers):
            for part in ("limits", "requests"):
                for resource, value in (getattr(c.resources, part, None) or {}).items():
                    try:
                        parse_quantity(value)
                    except ValueError as e:
                        return f"{where}.spec.{kind}[{i}].resources.{part}.{resource}: {e}"
    for resource, value in (spec.overhead or {}).items():
        try:
            parse_quantity(value)
        except ValueError as e:
            return f"{where}.spec.overhead.{resource}: {e}"
    return None
