"""Per-layer gradient norms (lesson 000's 6×128 nets) and checkpointed gradients."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

import jaxgrad.nn
import torchref.models
from jaxgrad import data, losses
from jaxgrad.lessons import depth as jdepth
from jaxgrad.memory import checkpointed_apply
from jaxgrad.parity import BIT_IDENTICAL, compare
from parity_checks.harness import TORCH_DTYPES, Check, jax_precision
from torchref import depth as tdepth

SIZES = [64] + [128] * 6 + [10]  # lesson 000: 6 hidden layers of 128, on digits


@functools.lru_cache(maxsize=1)
def _batch():
    digits = data.load_digits()
    index = data.batch_indices(len(digits.y_train), 64, seed=0, epoch=0)[0]
    return digits.x_train[index], digits.y_train[index]


def _norms_check(activation: str, dtype: str):
    x, y = _batch()
    x = x.astype(dtype)
    torch.manual_seed(0)
    module = torchref.models.mlp(SIZES, activation, dtype=TORCH_DTYPES[dtype])
    reference = tdepth.weight_grad_norms(module, torch.from_numpy(x), torch.from_numpy(y))
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(module)
        candidate = jdepth.weight_grad_norms(
            model, params, jnp.asarray(x), jnp.asarray(y), jit=False
        )
    # the norms are accumulated in float64 from `dtype` gradients: compare at `dtype`'s tier
    as_dtype = lambda norms: {k: np.asarray(v, dtype=dtype) for k, v in norms.items()}  # noqa: E731
    return compare(
        as_dtype(reference), as_dtype(candidate), name=f"layer weight-grad norms 6x128 {activation}"
    )


def _checkpoint_check(every: int, dtype: str):
    x, y = _batch()
    torch.manual_seed(0)
    with jax_precision(dtype):
        model, params = jaxgrad.nn.from_torch(
            torchref.models.mlp(SIZES, "sigmoid", dtype=TORCH_DTYPES[dtype])
        )
        xj, yj = jnp.asarray(x.astype(dtype)), jnp.asarray(y)
        grad = lambda apply: jax.jit(jax.grad(lambda p: losses.cross_entropy(apply(p, xj), yj)))  # noqa: E731
        plain = grad(model.apply)(params)
        checked = grad(checkpointed_apply(model, every=every))(params)
        return compare(
            plain, checked, **BIT_IDENTICAL, name=f"jax.checkpoint every {every} children vs plain"
        )


CHECKS = [
    Check(
        name=f"layer grad norms 6x128 {activation}",
        dtype=dtype,
        area="diagnostics",
        run=functools.partial(_norms_check, activation, dtype),
    )
    for dtype in ("float32", "float64")
    for activation in ("relu", "sigmoid")
] + [
    Check(
        name=f"checkpointed grads bit-identical (every {every})",
        dtype=dtype,
        area="diagnostics",
        run=functools.partial(_checkpoint_check, every, dtype),
    )
    for dtype in ("float32",)
    for every in (2, 4)  # bit-identity is a within-JAX property
]
