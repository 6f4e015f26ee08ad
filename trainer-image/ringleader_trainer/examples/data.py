"""Built-in data: the 8x8 handwritten digits (shipped inside this package, no download) and a synthetic set.

Each rank trains on its own disjoint shard, reshuffled every epoch from a seed shared by all ranks, so runs
are reproducible: that is torch's DistributedSampler (drop_last, so every rank takes the same number of
steps and no collective waits for a rank that ran out of data).

The digits are read with numpy and split here rather than through scikit-learn: importing scikit-learn
(scipy with it) costs about 2 s of CPU, paid by every rank at every start and recovery (docs/trainer.md).
"""

from __future__ import annotations

import gzip
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DIGITS_FILE = "digits.csv.gz"  # in ringleader_trainer/examples/datasets/; its README says where it comes from


@dataclass(frozen=True)
class Split:
    train: TensorDataset
    test: TensorDataset
    features: int
    classes: int


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, test), shuffled by `seed`: the test set takes ceil(n x test_fraction) samples, each
    class its proportional share (the largest remainders round up), so every class is in both sets."""
    rng = np.random.default_rng(seed)
    classes, counts = np.unique(labels, return_counts=True)
    n_test = math.ceil(len(labels) * test_fraction)
    shares = counts * n_test / len(labels)
    per_class = np.floor(shares).astype(int)
    remainders = shares - per_class + rng.random(len(classes)) * 1e-9  # seeded tie-break between equal shares
    per_class[np.argsort(-remainders)[: n_test - per_class.sum()]] += 1
    train: list[np.ndarray] = []
    test: list[np.ndarray] = []
    for c, k in zip(classes, per_class, strict=True):
        members = rng.permutation(np.flatnonzero(labels == c))
        test.append(members[:k])
        train.append(members[k:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 digits: 64 pixel counts (0..16) per image, and the labels 0..9."""
    path = resources.files("ringleader_trainer.examples").joinpath("datasets", DIGITS_FILE)
    with path.open("rb") as raw, gzip.open(raw) as text:
        table = np.loadtxt(text, delimiter=",", dtype=np.float32)
    return table[:, :-1], table[:, -1].astype(np.int64)


def digits(test_fraction: float = 0.2, seed: int = 0) -> Split:
    """8x8 digit images as 64 standardized features, 10 classes; a stratified, seeded train/test split."""
    x, y = load_digits()
    train, test = stratified_split(y, test_fraction, seed)
    x_train, x_test, y_train, y_test = x[train], x[test], y[train], y[test]
    # Standardized with the training set's statistics: ~1 point of test accuracy over plain scaling.
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-3
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return Split(
        train=TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train)),
        test=TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test)),
        features=64,
        classes=10,
    )


def shard_loader(
    data: TensorDataset, rank: int, world: int, batch_size: int, seed: int, epoch: int = 0
) -> DataLoader[tuple[torch.Tensor, ...]]:
    """The batches of rank `rank` for `epoch`: disjoint from every other rank's, reshuffled per epoch, all of
    `batch_size` (a short last one is left out: every epoch has the same steps, which resuming mid-epoch counts
    on, and a pipeline splits every batch into equal micro-batches)."""
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        data, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True)


def synthetic(features: int = 1024, classes: int = 10, samples: int = 8192, seed: int = 0) -> Split:
    """Gaussian inputs labelled by a random linear teacher: learnable, cheap to make, any size."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    cut = samples - samples // 8
    return Split(
        train=TensorDataset(x[:cut], y[:cut]), test=TensorDataset(x[cut:], y[cut:]), features=features, classes=classes
    )
