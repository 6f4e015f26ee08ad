"""The operator's command line: --network-policies names the operator's pods and --kube-api-burst is a whole number,
or the start fails in one line."""

from __future__ import annotations

import argparse

import pytest
from ringleader_operator.main import operator_pods, positive


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


@pytest.mark.parametrize(("text", "ok"), [("1", True), ("100", True), ("0", False), ("-3", False), ("2.5", False)])
def test_the_burst_is_a_whole_number_of_at_least_one(text: str, ok: bool) -> None:
    if ok:
        assert positive(text) == int(text)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"'{text}' is not a whole number >= 1"):
            positive(text)
