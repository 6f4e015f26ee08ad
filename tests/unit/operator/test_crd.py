"""The CRD is generated from the pydantic models: the checked-in copy must match, and the schema must be
structural (what the API server requires)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ringleader_operator import reference
from ringleader_operator.crd import crd, render

REPO = Path(__file__).resolve().parents[3]


def test_checked_in_crd_matches_the_models() -> None:
    checked_in = (REPO / "crds" / "trainingjob.yaml").read_text()
    assert checked_in == render(), "crds/trainingjob.yaml is stale: run `make crds`"


def test_checked_in_reference_matches_the_models() -> None:
    checked_in = (REPO / "docs" / "trainingjob.md").read_text()
    assert checked_in == reference.render(), "docs/trainingjob.md is stale: run `make crds`"


def test_the_reference_lists_every_spec_field() -> None:
    text = reference.render()
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert all(f"`spec.{name}`" in text for name in spec)
    assert "`spec.runPolicy.restartBackoff.capSeconds` | number | `60.0` | >= 0" in text


def _walk(node: Any, path: str = "") -> list[str]:
    """Paths that break structural-schema rules: $ref/anyOf/$defs/titles, or a property node without type."""
    bad = []
    if isinstance(node, dict):
        for key in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "title"):
            if key in node:
                bad.append(f"{path}: {key}")
        for name, sub in (node.get("properties") or {}).items():
            if "type" not in sub and not sub.get("x-kubernetes-preserve-unknown-fields"):
                bad.append(f"{path}.{name}: no type")
            bad += _walk(sub, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                bad += _walk(node[key], f"{path}[{key}]")
    return bad


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []


def test_printer_columns_and_subresources() -> None:
    version = crd()["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Strategy",
        "Workers",
        "Phase",
        "Step",
        "Loss",
        "Progress",
        "ETA",
        "Age",
    ]
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.workers.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    assert yaml.safe_load(render())["spec"]["names"]["shortNames"] == ["tj"]
