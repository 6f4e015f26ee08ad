"""Kueue in the dev cluster for the tests that queue jobs: its API and its manager started once."""

from __future__ import annotations

import pytest
from ringleader_devcluster import kueue as devkueue
from ringleader_devcluster.commands import ClusterError
from ringleader_devcluster.layout import Layout

from tests.support.shared import one_at_a_time

API = ("kueue.x-k8s.io", "v1beta2")  # group and version of Kueue's objects


def start(layout: Layout) -> None:
    """Kueue's manager running (`make test` builds it; `make dev-cluster KUEUE=1` otherwise); the test fails
    saying why when it cannot start."""
    try:
        with one_at_a_time(layout):
            devkueue.start(layout)
    except ClusterError as e:
        pytest.fail(f"kueue: {e}")
