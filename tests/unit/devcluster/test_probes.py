"""Table tests of probe parsing: defaults, named ports, handler kinds, and rejection of bad probes."""

from __future__ import annotations

from typing import Any

import pytest
from ringleader_devcluster.node.probe_spec import InvalidProbe, parse_probe

CONTAINER = {"name": "main", "ports": [{"name": "metrics", "containerPort": 9090}]}


@pytest.mark.parametrize(
    ("spec", "kind", "port", "extra"),
    [
        ({"tcpSocket": {"port": 29500}}, "tcp", 29500, {}),
        ({"httpGet": {"port": "metrics", "path": "/healthz"}}, "http", 9090, {"path": "/healthz"}),
        ({"httpGet": {"port": "8080"}}, "http", 8080, {"path": "/", "scheme": "HTTP"}),
        ({"exec": {"command": ["cat", "/tmp/ok"]}}, "exec", 0, {"command": ("cat", "/tmp/ok")}),
        (
            {"tcpSocket": {"port": 1}, "periodSeconds": 2, "failureThreshold": 1, "initialDelaySeconds": 3},
            "tcp",
            1,
            {"period": 2.0, "failure_threshold": 1, "initial_delay": 3.0},
        ),
    ],
    ids=["tcp", "http-named-port", "http-defaults", "exec", "timing"],
)
def test_parse_probe(spec: dict[str, Any], kind: str, port: int, extra: dict[str, Any]) -> None:
    probe = parse_probe(spec, CONTAINER)
    assert probe is not None
    assert (probe.kind, probe.port) == (kind, port)
    for key, value in extra.items():
        assert getattr(probe, key) == value
    if "periodSeconds" not in spec:
        assert (probe.period, probe.timeout, probe.success_threshold, probe.failure_threshold) == (10, 1, 1, 3)


@pytest.mark.parametrize(
    "spec", [{"httpGet": {"port": "nope"}}, {"grpc": {"port": 1}}], ids=["unknown-named-port", "no-handler"]
)
def test_bad_probes_are_rejected(spec: dict[str, Any]) -> None:
    with pytest.raises(InvalidProbe):
        parse_probe(spec, CONTAINER)


def test_absent_probe_is_none() -> None:
    assert parse_probe(None, CONTAINER) is None
