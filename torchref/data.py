"""The torch side of ``jaxgrad.data``: the same numpy arrays, as tensors.

Contract: nothing is re-loaded or re-shuffled here. The dataset is the numpy
``Dataset`` the jaxgrad loaders return (framework-neutral), and the batch order is
``jaxgrad.data.batch_indices`` re-implemented in one line of numpy (this package never
imports jax), so a torch loop and a JAX loop over the same ``(seed, epoch)`` see the
same examples in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch


def batch_order(num_examples: int, *, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The epoch's example order: ``np.random.default_rng([seed, epoch]).permutation``."""
    if not shuffle:
        return np.arange(num_examples, dtype=np.int64)
    return np.random.default_rng([int(seed), int(epoch)]).permutation(num_examples).astype(np.int64)


def iterate_batches(
    x, y, batch_size: int, *, seed: int, epoch: int, shuffle: bool = True, drop_last: bool = False
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(x_batch, y_batch)`` tensors in ``jaxgrad.data.batch_indices`` order.

    Args:
      x: `(n, features)` numpy array or tensor.
      y: `(n,)` int64 labels.
    """
    x = torch.as_tensor(np.asarray(x))
    y = torch.as_tensor(np.asarray(y))
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"`x` has {x.shape[0]} examples but `y` has {y.shape[0]}; they must match."
        )
    if batch_size < 1:
        raise ValueError(f"`batch_size` (={batch_size}) must be a positive integer.")
    order = torch.from_numpy(batch_order(x.shape[0], seed=seed, epoch=epoch, shuffle=shuffle))
    stop = x.shape[0] - x.shape[0] % batch_size if drop_last else x.shape[0]
    for start in range(0, stop, batch_size):
        indices = order[start : start + batch_size]
        yield x[indices], y[indices]
