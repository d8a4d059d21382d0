"""Elementwise ATen ops: arithmetic, comparisons, logic, math functions, activations,
casts. Binary ops promote with torch's rules (``_promote``) before computing, so the
computation runs in torch's dtype, not JAX's."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxgrad.nn.aten import register
from jaxgrad.nn.aten._promote import promote


@register("aten.add.Tensor", "aten.add.Scalar")
def add(input, other, *, alpha=1):
    (input, other), _ = promote(input, other)
    return input + other * alpha if alpha != 1 else input + other


@register("aten.mul.Tensor", "aten.mul.Scalar")
def mul(input, other):
    (input, other), _ = promote(input, other)
    return input * other


@register("aten.relu.default")
def relu(input):
    return jnp.maximum(input, jnp.zeros((), input.dtype))
