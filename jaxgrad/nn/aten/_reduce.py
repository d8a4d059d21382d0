"""Reductions: sums, means, extrema, norms, softmax, cumulative ops, sorting."""

from __future__ import annotations

import jax.numpy as jnp

from jaxgrad.nn.aten import register


@register("aten.mean.dim")
def mean_dim(input, dim, keepdim=False, *, dtype=None):
    out = jnp.mean(input, axis=tuple(dim) if dim else None, keepdims=keepdim)
    return out if dtype is None else out.astype(dtype)
