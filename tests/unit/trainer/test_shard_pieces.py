"""A replacement's shards from a replica (sharded with replica groups): `fill` copies a replica's local pieces
into this worker's state in place, takes its plain values, and refuses a state that lacks an entry or holds a
piece of another shape, naming the sender."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ringleader_trainer.elastic.healing import HealError
from ringleader_trainer.strategies.sharded import fill


def mine() -> dict[str, dict[str, Any]]:
    return {"model": {"w": torch.zeros(2, 3)}, "optimizer": {"state.w.step": torch.tensor(0.0), "lr": 0.1}}


def test_a_replicas_pieces_are_copied_in_place_and_its_values_taken() -> None:
    state = mine()
    weights = state["model"]["w"]
    fill(state, {"model": {"w": torch.ones(2, 3)}, "optimizer": {"state.w.step": torch.tensor(7.0), "lr": 0.05}},
         "rank 3")  # fmt: skip
    assert state["model"]["w"] is weights and torch.equal(weights, torch.ones(2, 3))
    assert state["optimizer"]["state.w.step"].item() == 7.0 and state["optimizer"]["lr"] == 0.05


@pytest.mark.parametrize(
    ("pieces", "message"),
    [
        ({"model": {}, "optimizer": {}}, "the state rank 3 sent has no model entry w"),
        ({"model": {"w": torch.ones(3, 2)}, "optimizer": {}}, "rank 3 sent model entry w in another shape"),
        ({"model": {"w": "not a tensor"}, "optimizer": {}}, "rank 3 sent model entry w in another shape"),
        (None, "the state rank 3 sent has no model entry w"),
    ],
)
def test_a_state_that_does_not_fit_is_refused_naming_its_sender(pieces: Any, message: str) -> None:
    with pytest.raises(HealError, match=message):
        fill(mine(), pieces, "rank 3")
