"""Built-in data: scikit-learn's digits (shipped inside the package, no download) and a synthetic set.

Each rank trains on its own disjoint shard, reshuffled every epoch from a seed shared by all ranks, so runs
are reproducible: that is torch's DistributedSampler (drop_last, so every rank takes the same number of
steps and no collective waits for a rank that ran out of data).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@dataclass(frozen=True)
class Split:
    train: TensorDataset
    test: TensorDataset
    features: int
    classes: int


def digits(test_fraction: float = 0.2, seed: int = 0) -> Split:
    """8x8 digit images as 64 standardized features, 10 classes; a stratified, seeded train/test split."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x.astype(np.float32), y, test_size=test_fraction, random_state=seed, stratify=y
    )
    # Standardized with the training set's statistics: ~1 point of test accuracy over plain scaling.
    mean, std = x_train.mean(axis=0), x_train.std(axis=0) + 1e-3
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    return Split(
        train=TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train).long()),
        test=TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test).long()),
        features=64,
        classes=10,
    )


def shard_loader(
    data: TensorDataset, rank: int, world: int, batch_size: int, seed: int, epoch: int = 0
) -> DataLoader[tuple[torch.Tensor, ...]]:
    """The batches of rank `rank` for `epoch`: disjoint from every other rank's, reshuffled per epoch."""
    sampler: DistributedSampler[tuple[torch.Tensor, ...]] = DistributedSampler(
        data, num_replicas=world, rank=rank, shuffle=True, seed=seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    return DataLoader(data, batch_size=batch_size, sampler=sampler)


def synthetic(features: int = 1024, classes: int = 10, samples: int = 8192, seed: int = 0) -> Split:
    """Gaussian inputs labelled by a random linear teacher: learnable, cheap to make, any size."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    y = (x @ torch.randn(features, classes, generator=g)).argmax(dim=1)
    cut = samples - samples // 8
    return Split(
        train=TensorDataset(x[:cut], y[:cut]), test=TensorDataset(x[cut:], y[cut:]), features=features, classes=classes
    )
