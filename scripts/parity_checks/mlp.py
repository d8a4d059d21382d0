"""MLPs of every supported activation, in float64 and float32: forward, loss, gradients."""

from __future__ import annotations

import functools

import numpy as np
import torch

import torchref
from parity_checks.harness import TORCH_DTYPES, Check, model_parity, random_batch

SIZES = [12, 16, 16, 5]


def _mlp_check(activation: str, dtype: str, loss: str) -> object:
    torch.manual_seed(0)
    module = torchref.mlp(SIZES, activation, dtype=TORCH_DTYPES[dtype])
    x, y = random_batch(np.random.default_rng(0), 8, SIZES[0], SIZES[-1], dtype, loss)
    return model_parity(module, x, y, loss=loss, jit=True, name=f"mlp {SIZES} {activation} {loss}")


CHECKS = [
    Check(
        name=f"mlp {activation} ({loss})",
        dtype=dtype,
        area="nn",
        run=functools.partial(_mlp_check, activation, dtype, loss),
    )
    for dtype in ("float64", "float32")
    for activation in torchref.models.ACTIVATIONS
    for loss in (("mse", "cross_entropy") if activation == "relu" else ("mse",))
]
