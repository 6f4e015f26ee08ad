"""Each strategy name the spec allows names a strategy class, imported only when asked for."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ringleader_trainer.env import StrategyName
from ringleader_trainer.strategies import strategy_class


@pytest.mark.parametrize("name", list(StrategyName))
def test_each_strategy_name_gives_the_class_of_that_name(name: StrategyName) -> None:
    assert strategy_class(name).name == name
    assert strategy_class(str(name)) is strategy_class(name)


def test_a_name_no_strategy_has_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        strategy_class("ring-of-fire")


def test_a_rank_that_is_not_a_pipeline_or_sharded_does_not_import_their_modules() -> None:
    # Asserted in a fresh interpreter: this one may have imported them for another test.
    code = (
        "import sys; import ringleader_trainer.startup, ringleader_trainer.examples.train; "
        "from ringleader_trainer.strategies import strategy_class; strategy_class('allreduce'); "
        "print(sorted(m for m in sys.modules if m.startswith('torch.distributed.pipelining') or m in "
        f"{sorted(STRATEGY_MODULES)!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["['ringleader_trainer.strategies.allreduce']"], out.stdout


# Each strategy's own module (their tools, such as the ring or the parameter server's shards, are not counted).
STRATEGY_MODULES = {
    f"ringleader_trainer.strategies.{m}"
    for m in ("allreduce", "local_sgd", "diloco", "parameter_server.strategy", "pipeline", "sharded")
}
