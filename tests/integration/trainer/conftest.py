"""The trainer's tests fork their ranks from a server that imported torch once (tests.support.prefork), and
no rank outlives its test: a test that fails before its job ended would leave it training beside the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import launch


@pytest.fixture(autouse=True)
def no_rank_outlives_its_test() -> Iterator[None]:
    yield
    while launch.LAUNCHED:
        launch.LAUNCHED.pop().kill()


def pytest_configure(config: pytest.Config) -> None:
    launch.PREFORK = True
