"""The chart's copies of the CRDs are the repository's, byte for byte (helm installs CRDs only from the chart's
own crds/ folder, so a stale copy would install an old schema)."""

from __future__ import annotations

import json

import yaml
from ringleader_devcluster.layout import REPO_ROOT

CHART = REPO_ROOT / "helm" / "ringleader"


def test_chart_crds_are_the_repository_crds() -> None:
    ours = {p.name: p.read_bytes() for p in (REPO_ROOT / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert chart == ours, "helm/ringleader/crds differs from crds/: run `make crds`"


def test_every_value_is_in_the_schema() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) == set(schema["properties"]), set(values) ^ set(schema["properties"])
