"""The operator's command line: --network-policies names the operator's pods, or the start fails in one line."""

from __future__ import annotations

import argparse

import pytest
from ringleader_operator.main import operator_pods


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ringleader-system/app=ringleader", ("ringleader-system", {"app": "ringleader"})),
        (
            "ops/app.kubernetes.io/name=ringleader,app.kubernetes.io/instance=rl",
            ("ops", {"app.kubernetes.io/name": "ringleader", "app.kubernetes.io/instance": "rl"}),
        ),
    ],
    ids=["one-label", "prefixed-keys"],
)
def test_operator_pods_are_a_namespace_and_labels(text: str, expected: tuple[str, dict[str, str]]) -> None:
    assert operator_pods(text) == expected


@pytest.mark.parametrize("text", ["ringleader-system", "/app=x", "ops/", "ops/app", "ops/=x"])
def test_anything_else_is_a_usage_error_naming_the_value(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not NAMESPACE/key=value"):
        operator_pods(text)
