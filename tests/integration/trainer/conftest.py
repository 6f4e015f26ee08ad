"""The trainer's tests fork their ranks from a server that imported torch once (tests.support.prefork)."""

from __future__ import annotations

import pytest

from tests.support import launch


def pytest_configure(config: pytest.Config) -> None:
    launch.PREFORK = True
