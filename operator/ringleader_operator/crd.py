"""Generate the TrainingJob CustomResourceDefinition from the pydantic models in `ringleader_api` (api/).

    python -m ringleader_operator.crd > crds/trainingjob.yaml      (what `make crds` runs)

The JSON Schema pydantic produces is turned into a structural OpenAPI v3 schema: references inlined,
`X | None` collapsed to X (absence is how optional fields are spelled), titles dropped. Cross-field rules the
schema cannot express become CEL `x-kubernetes-validations`, each with a message naming the field, so the API
server itself rejects a bad TrainingJob at `kubectl apply` (no webhook).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import yaml
from ringleader_api import (
    DNS_LABEL_MAX,
    GROUP,
    KIND,
    PLURAL,
    SETTINGS,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    TrainingJobSpec,
    TrainingJobStatus,
)

# Each strategy's settings field as the spec spells it (localSGD).
SETTINGS_FIELDS = {
    strategy.value: TrainingJobSpec.model_fields[name].alias or name for strategy, name in SETTINGS.items()
}

# Rules on spec (self = spec). Messages name the field and say why.
SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": "self.strategy != 'parameter-server' || "
        "(has(self.parameterServers) && self.parameterServers.replicas >= 1)",
        "message": "spec.parameterServers.replicas must be at least 1 when spec.strategy is parameter-server",
        "fieldPath": ".parameterServers",
        "reason": "FieldValueRequired",
    },
    {
        "rule": "self.strategy == 'parameter-server' || !has(self.parameterServers)",
        "message": "spec.parameterServers is only allowed when spec.strategy is parameter-server",
        "fieldPath": ".parameterServers",
        "reason": "FieldValueForbidden",
    },
    *(
        {
            "rule": f"self.strategy == '{strategy}' || !has(self.{field})",
            "message": f"spec.{field} is only allowed when spec.strategy is {strategy}",
            "fieldPath": f".{field}",
            "reason": "FieldValueForbidden",
        }
        for strategy, field in SETTINGS_FIELDS.items()
    ),
    {
        "rule": "!has(self.pipeline) || !has(self.pipeline.stages) || "
        "(self.workers.replicas * (has(self.workers.procsPerPod) ? self.workers.procsPerPod : 1)) "
        "% self.pipeline.stages == 0",
        "message": "spec.pipeline.stages must divide the worker ranks, spec.workers.replicas x procsPerPod (each "
        "pipeline has one rank per stage)",
        "fieldPath": ".pipeline.stages",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.sharded) || !has(self.sharded.replicas) || self.sharded.replicas == 1 || "
        "((self.workers.replicas * (has(self.workers.procsPerPod) ? self.workers.procsPerPod : 1)) "
        "% self.sharded.replicas == 0 && (!has(self.sharded.stage) || self.sharded.stage >= 2))",
        "message": "spec.sharded.replicas must divide the worker ranks, spec.workers.replicas x procsPerPod, and "
        "needs stage 2 or 3 (each replica group shards the model with FSDP2)",
        "fieldPath": ".sharded.replicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.parameterServers) || !has(self.parameterServers.procsPerPod) || "
        "self.parameterServers.procsPerPod == 1",
        "message": "spec.parameterServers.procsPerPod must be 1: each shard is one process",
        "fieldPath": ".parameterServers.procsPerPod",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.workers.procsPerPod) || self.workers.procsPerPod == 1 || !has(self.workers.gpus) || "
        "self.workers.gpus == 0 || self.workers.gpus == self.workers.procsPerPod",
        "message": "spec.workers.procsPerPod must equal spec.workers.gpus when the pods have GPUs (one GPU per rank)",
        "fieldPath": ".workers.procsPerPod",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.parameterServer) || !has(self.parameterServer.maxStaleness) || "
        "self.parameterServer.mode == 'bounded-staleness'",
        "message": "spec.parameterServer.maxStaleness is only allowed when spec.parameterServer.mode is "
        "bounded-staleness",
        "fieldPath": ".parameterServer.maxStaleness",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.parameterServer) || !has(self.parameterServer.backup) || !self.parameterServer.backup || "
        "(has(self.parameterServers) && self.parameterServers.replicas >= 2)",
        "message": "spec.parameterServer.backup needs two or more parameter servers (spec.parameterServers.replicas): "
        "each shard's backup is kept on the next shard",
        "fieldPath": ".parameterServer.backup",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.checkpoint) || !has(self.checkpoint.claimName) || size(self.checkpoint.claimName) > 0",
        "message": "spec.checkpoint.claimName must not be empty",
        "fieldPath": ".checkpoint.claimName",
        "reason": "FieldValueInvalid",
    },
]

ELASTIC = "has(self.workers.minReplicas) || has(self.workers.maxReplicas)"
SPEC_RULES += [
    {
        "rule": "!has(self.workers.minReplicas) || self.workers.replicas >= self.workers.minReplicas",
        "message": "spec.workers.replicas must be at least spec.workers.minReplicas",
        "fieldPath": ".workers.replicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.workers.maxReplicas) || self.workers.replicas <= self.workers.maxReplicas",
        "message": "spec.workers.replicas must be at most spec.workers.maxReplicas",
        "fieldPath": ".workers.replicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.workers.minReplicas) || !has(self.workers.maxReplicas) || "
        "self.workers.minReplicas <= self.workers.maxReplicas",
        "message": "spec.workers.minReplicas must not exceed spec.workers.maxReplicas",
        "fieldPath": ".workers.minReplicas",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": f"(self.strategy != 'parameter-server' && self.strategy != 'pipeline') || !({ELASTIC})",
        "message": "spec.workers.minReplicas and maxReplicas (elastic resize) are for the strategies whose workers "
        "resize in place, not parameter-server or pipeline",
        "fieldPath": ".workers",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"!has(self.sharded) || !has(self.sharded.replicas) || self.sharded.replicas == 1 || !({ELASTIC})",
        "message": "spec.sharded.replicas above 1 does not combine with spec.workers.minReplicas or maxReplicas: "
        "the replica groups fix the world's shape",
        "fieldPath": ".sharded.replicas",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "!has(self.parameterServers) || "
        "(!has(self.parameterServers.minReplicas) && !has(self.parameterServers.maxReplicas))",
        "message": "spec.parameterServers cannot be elastic: minReplicas and maxReplicas are for workers",
        "fieldPath": ".parameterServers",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"{ELASTIC} || self.workers.replicas == oldSelf.workers.replicas",
        "message": "spec.workers.replicas is immutable unless the job is elastic (spec.workers.minReplicas or "
        "maxReplicas set)",
        "fieldPath": ".workers.replicas",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": "has(self.managedBy) == has(oldSelf.managedBy) && "
        "(!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
        "message": "spec.managedBy is immutable",
        "fieldPath": ".managedBy",
        "reason": "FieldValueInvalid",
    },
    {
        "rule": "!has(self.parameterServers) || !has(oldSelf.parameterServers) || "
        "self.parameterServers.replicas == oldSelf.parameterServers.replicas",
        "message": "spec.parameterServers.replicas is immutable",
        "fieldPath": ".parameterServers.replicas",
        "reason": "FieldValueForbidden",
    },
]

# Rules on the whole object: the name must make valid pod names, hostnames and a Service name.
ROOT_RULES: list[dict[str, str]] = [
    {
        "rule": "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "message": "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
        "letter): it names the job's Service and its pods' hostnames",
    },
    {
        "rule": "size(self.metadata.name) + size('-worker-') + size(string(self.spec.workers.replicas - 1)) "
        f"<= {DNS_LABEL_MAX}",
        "message": f"metadata.name is too long: '<name>-worker-<index>' must fit {DNS_LABEL_MAX} characters "
        "(pod names are hostnames)",
    },
    {
        "rule": f"!has(self.spec.parameterServers) || size(self.metadata.name) + size('-ps-') + "
        f"size(string(self.spec.parameterServers.replicas - 1)) <= {DNS_LABEL_MAX}",
        "message": f"metadata.name is too long: '<name>-ps-<index>' must fit {DNS_LABEL_MAX} characters",
    },
]

IMMUTABLE = "self == oldSelf"

PRINTER_COLUMNS = [
    {"name": "Strategy", "type": "string", "jsonPath": ".spec.strategy"},
    {"name": "Workers", "type": "string", "jsonPath": ".status.workers", "description": "ready/desired"},
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    {"name": "Loss", "type": "number", "jsonPath": ".status.progress.loss"},
    {"name": "Progress", "type": "number", "jsonPath": ".status.progress.percent", "description": "percent"},
    {"name": "ETA", "type": "integer", "jsonPath": ".status.progress.etaSeconds", "description": "seconds"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def structural(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Turn one pydantic JSON Schema node into a structural OpenAPI v3 node (recursively)."""
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
        return structural(merged, defs)
    node = copy.deepcopy(schema)
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union of {len(options)} types structurally: {options}")
        inner = structural(options[0], defs)
        node = {**inner, **{k: v for k, v in node.items() if k not in ("default",) or v is not None}}
        if node.get("default") is None:
            node.pop("default", None)
    node.pop("title", None)
    node.pop("$defs", None)
    if "properties" in node:
        node["type"] = "object"
        node["properties"] = {k: structural(v, defs) for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = structural(node["additionalProperties"], defs)
    elif node.get("additionalProperties") is True:
        node.pop("additionalProperties")  # free-form objects say so with x-kubernetes-preserve-unknown-fields
    if "items" in node:
        node["items"] = structural(node["items"], defs)
    if "enum" in node and "type" not in node:
        node["type"] = "string"
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(node.get(exclusive), int | float) and not isinstance(node[exclusive], bool):
            # JSON Schema's exclusive bound is a number; OpenAPI v3's (Kubernetes') a flag on the bound
            node[bound], node[exclusive] = node[exclusive], True
    return node


def _schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True)
    return structural(raw, raw.get("$defs", {}))


def spec_schema() -> dict[str, Any]:
    spec = _schema_of(TrainingJobSpec)
    props = spec["properties"]
    # Objects whose every field has a default: default them to {} so the API server fills in the fields.
    props["runPolicy"]["default"] = {}
    props["strategy"]["x-kubernetes-validations"] = [{"rule": IMMUTABLE, "message": "spec.strategy is immutable"}]
    for role in ("workers", "parameterServers"):
        props[role]["properties"]["template"]["x-kubernetes-validations"] = [
            {"rule": IMMUTABLE, "message": f"spec.{role}.template is immutable"}
        ]
    spec["x-kubernetes-validations"] = SPEC_RULES
    return spec


def crd() -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": _schema_of(TrainingJobStatus),
        },
        "required": ["spec"],
        "x-kubernetes-validations": ROOT_RULES,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": ["all"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    # `kubectl scale tj/<name> --replicas=N` sets the workers of an elastic job (the spec's
                    # rules bound it); HPA-style tools find the worker pods by the selector.
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.workers.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def render() -> str:
    header = "# Generated by `make crds` from the models in api/ringleader_api. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120)


if __name__ == "__main__":
    sys.stdout.write(render())
