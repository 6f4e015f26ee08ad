"""What a live peer sends a replacement (elastic/healing.send and receive): the state's skeleton, then each tensor's
bytes as they are, received into tensors the receiver allocates from the skeleton. The process group's send and
recv are a queue here; the healing tests run them over gloo between processes (bit-identical runs)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ringleader_trainer.elastic import healing
from ringleader_trainer.elastic.healing import HealError
from torch import nn


@pytest.fixture
def wire(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.Tensor]]:
    """The messages sent, in order; a recv takes the oldest (its size must match, as gloo's must)."""
    sent: list[torch.Tensor] = []

    def send(tensor: torch.Tensor, dst: int) -> None:
        sent.append(tensor.clone())

    def recv(tensor: torch.Tensor, src: int) -> None:
        message = sent.pop(0)
        assert message.shape == tensor.shape and message.dtype == tensor.dtype
        tensor.copy_(message)

    monkeypatch.setattr(torch.distributed, "send", send)
    monkeypatch.setattr(torch.distributed, "recv", recv)
    yield sent


def same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_a_state_arrives_whole_and_exact(wire: list[torch.Tensor]) -> None:
    model = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 5)).sum().backward()
    optimizer.step()
    state: dict[str, Any] = {
        "model": model.state_dict(),  # an OrderedDict with its `_metadata`, and BatchNorm's int64 counter
        "optimizer": optimizer.state_dict(),  # Adam's 0-dim step tensors, param_groups of plain values
        "rng": [torch.get_rng_state(), (torch.tensor([True, False]), torch.zeros(0, 3))],  # bool; empty
        "strided": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous
        "half": torch.randn(2, 3).to(torch.bfloat16),
        "step": 41,
        "data": {"epoch": 2, "order": None},
    }
    healing.send(state, to=1)
    got = healing.receive(source=0)
    assert not wire  # every message taken
    assert same(state, got)
    assert got["model"]._metadata == state["model"]._metadata
    fresh = nn.Sequential(nn.Linear(5, 4), nn.BatchNorm1d(4))
    fresh.load_state_dict(got["model"])  # what take_state does with it
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True))


def test_the_tensors_travel_as_their_bytes_not_serialized(wire: list[torch.Tensor]) -> None:
    big = torch.randn(1000, 1000)
    healing.send({"w": big}, to=1)
    skeleton, raw = wire[1], wire[2]
    assert skeleton.numel() < 10_000  # the stand-in holds no data
    assert raw.numel() == big.numel() * 4 and torch.equal(raw, big.reshape(-1).view(torch.uint8))


def test_a_peer_that_says_its_tensors_are_too_large_is_refused_before_they_come(
    wire: list[torch.Tensor], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(healing, "MAX_STATE_BYTES", 5000)  # the skeleton is smaller
    healing.send(OrderedDict(a=torch.zeros(2000), b=torch.zeros(1000)), to=1)  # 12,000 bytes of float32
    with pytest.raises(HealError, match=r"rank 3 would send tensors of 12000 bytes"):
        healing.receive(source=3)
    assert len(wire) == 2  # the tensors' bytes were never read


def test_a_skeleton_that_is_not_a_state_is_refused(wire: list[torch.Tensor]) -> None:
    data = healing.encode({"x": 1})
    wire.extend([torch.tensor([data.numel()]), torch.zeros_like(data)])  # the right size, foreign bytes
    with pytest.raises(HealError, match=r"the state rank 2 sent cannot be read"):
        healing.receive(source=2)
