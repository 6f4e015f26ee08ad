"""Shards are disjoint, cover the data, reshuffle per epoch and reproduce; the built-in models learn."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ringleader_trainer.examples.data import digits, load_digits, shard_loader, stratified_split
from ringleader_trainer.examples.models import digits_mlp, parameter_count, wide_mlp


def indices_of(loader: torch.utils.data.DataLoader) -> list[int]:  # type: ignore[type-arg]
    return list(iter(loader.sampler))


def test_digits_split_is_stratified_and_seeded() -> None:
    a, b = digits(seed=0), digits(seed=0)
    assert len(a.train) + len(a.test) == 1797 and len(a.test) == 360
    assert torch.equal(a.train.tensors[0], b.train.tensors[0])
    assert set(a.test.tensors[1].tolist()) == set(range(10))
    assert abs(float(a.train.tensors[0].mean())) < 1e-3  # standardized with the training statistics


@pytest.mark.parametrize(
    ("counts", "fraction", "test_size"),
    [([178, 182, 177], 0.2, 108), ([10, 10, 10], 0.5, 15), ([3, 97], 0.1, 10), ([5, 5], 0.21, 3)],
)
def test_stratified_split_gives_each_class_its_share_and_covers_every_sample_once(
    counts: list[int], fraction: float, test_size: int
) -> None:
    labels = np.repeat(np.arange(len(counts)), counts)
    train, test = stratified_split(labels, fraction, seed=3)
    assert len(test) == test_size  # ceil(n x fraction), as scikit-learn's train_test_split
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(len(labels)))  # disjoint, complete
    for c, n in enumerate(counts):  # each class within one sample of its exact share
        assert abs(int((labels[test] == c).sum()) - n * test_size / len(labels)) < 1
    again, other = stratified_split(labels, fraction, seed=3), stratified_split(labels, fraction, seed=4)
    assert np.array_equal(again[1], test) and not np.array_equal(other[1], test)


def test_the_shipped_digits_are_the_1797_images_of_64_pixel_counts() -> None:
    x, y = load_digits()
    assert x.shape == (1797, 64) and y.shape == (1797,)
    assert x.min() == 0 and x.max() == 16 and sorted(set(y.tolist())) == list(range(10))


def test_shards_are_disjoint_equal_and_reshuffled_per_epoch() -> None:
    train = digits().train
    world = 3
    epoch0 = [indices_of(shard_loader(train, r, world, 32, seed=7, epoch=0)) for r in range(world)]
    assert len({len(s) for s in epoch0}) == 1  # equal shard sizes: no rank waits on another
    flat = [i for s in epoch0 for i in s]
    assert len(flat) == len(set(flat)) >= len(train) - world  # disjoint, dropping at most world-1 samples
    epoch1 = indices_of(shard_loader(train, 0, world, 32, seed=7, epoch=1))
    assert epoch1 != epoch0[0]
    assert indices_of(shard_loader(train, 0, world, 32, seed=7, epoch=0)) == epoch0[0]  # reproducible


def test_the_digits_mlp_learns_on_one_process() -> None:
    torch.manual_seed(0)
    data = digits()
    model = digits_mlp()
    # lr 0.02: one process at the example's lr 0.1 diverges on some splits (the example has 4 workers x 32).
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-3)
    for epoch in range(15):
        for x, y in shard_loader(data.train, 0, 1, 32, seed=0, epoch=epoch):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    x_test, y_test = data.test.tensors
    accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    assert accuracy >= 0.95


def test_the_benchmark_model_has_about_25m_parameters() -> None:
    assert 24_000_000 <= parameter_count(wide_mlp()) <= 26_000_000
