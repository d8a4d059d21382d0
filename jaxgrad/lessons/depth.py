"""The lessons' depth experiments in JAX: vanishing and exploding products.

Each function is one measured claim; ``torchref.depth`` is its torch twin.

- ``weight_grad_norms``: one batch, one backward, the weight-gradient norm of each
  layer (lesson 000, 6×128 ReLU vs sigmoid; lesson 002, 12 sigmoid layers of 64;
  lesson 004 example 6, a 10-layer sigmoid network).
- ``sigmoid_chain_grad``: d/dx of 20 sigmoids applied in a row. Lesson 004 prints
  1.14e-13 without its input; x = 0.5 reproduces it (1.1431e-13; x = 0 gives
  1.27e-13, x = 1 gives 9.1e-14). Why it is that small: after a few steps the chain
  sits at sigmoid's fixed point s* = 0.6590 (s* = σ(s*)), whose local derivative is
  s*(1−s*) = 0.2247, so the gradient is ≈ C·0.2247²⁰ — below the bound 0.25²⁰.
- ``repeated_multiply_grad``: d/dx of x·3·3·…·3 (20 times) is exactly 3²⁰ =
  3,486,784,401 in float64; float32 cannot hold it (3²⁰ > 2²⁴ and odd).
- ``sigmoid_bound``: σ'(0) = 0.25 from autodiff, raised to n: 0.25⁶ ≈ 2.4e-4,
  0.25¹⁰ ≈ 9.5e-7 (lessons 000, 001) — exact powers of two.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxgrad import losses
from jaxgrad.diagnostics import layer_grad_norms

LOSSES = {"cross_entropy": losses.cross_entropy, "mse": losses.mse_loss}
SIGMOID_CHAIN_INPUT = 0.5


def weight_grads(model, params, x, y, *, loss: str = "cross_entropy", jit: bool = True) -> dict:
    """Gradients of ``loss(model(x), y)`` for every parameter (flat dict)."""
    if loss not in LOSSES:
        raise ValueError(f"`loss` (={loss!r}) must be one of {', '.join(LOSSES)}.")
    loss_fn = LOSSES[loss]
    grad_fn = jax.grad(lambda p: loss_fn(model.apply(p, x), y))
    return (jax.jit(grad_fn) if jit else grad_fn)(params)


def weight_grad_norms(
    model, params, x, y, *, loss: str = "cross_entropy", jit: bool = True
) -> dict[str, float]:
    """``{layer: ‖∂loss/∂weight‖}`` for each layer with a weight, in layer order.

    Args:
      model: a ``jaxgrad.nn`` model; params: its flat params.
      x: `(batch, in_features)`; y: int labels `(batch,)` for cross-entropy, or a
        target like the output for ``"mse"``.
    """
    norms = layer_grad_norms(weight_grads(model, params, x, y, loss=loss, jit=jit))
    return {layer: p["weight"] for layer, p in norms.items() if "weight" in p}


def sigmoid_chain_grad(x: float = SIGMOID_CHAIN_INPUT, n: int = 20, dtype=jnp.float64) -> float:
    """d/dx σ(σ(…σ(x)…)) with ``n`` sigmoids."""

    def chain(value):
        for _ in range(n):
            value = jax.nn.sigmoid(value)
        return value

    return float(jax.grad(chain)(jnp.asarray(x, dtype=dtype)))


def repeated_multiply_grad(
    x: float = 1.0, factor: float = 3.0, n: int = 20, dtype=jnp.float64
) -> float:
    """d/dx of ``x`` multiplied by ``factor`` ``n`` times (one multiply per step)."""

    def chain(value):
        for _ in range(n):
            value = value * jnp.asarray(factor, dtype=dtype)
        return value

    return float(jax.grad(chain)(jnp.asarray(x, dtype=dtype)))


def sigmoid_bound(n: int, dtype=jnp.float32) -> float:
    """σ'(0)ⁿ with σ'(0) from ``jax.grad``: the most n sigmoids can pass back."""
    return float(jax.grad(jax.nn.sigmoid)(jnp.asarray(0.0, dtype=dtype)) ** n)
