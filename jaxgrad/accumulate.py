"""Gradient accumulation over micro-batches, explicitly: no ``.grad`` to accumulate into.

torch accumulates by default — every ``backward()`` adds into ``.grad`` — which makes
micro-batching free and forgetting ``zero_grad()`` a silent bug. JAX returns gradients
as values, so accumulation is a sum the caller writes: ``accumulate_grads`` runs it as a
``jax.lax.scan`` over the leading axis of ``micro_batches`` (jit-compatible; memory
does not grow with the number of micro-batches k).

``reduction="mean"`` returns the gradient of ``mean_i loss_i`` — torch's
``(loss / k).backward()`` per micro-batch — which for equal-sized micro-batches of a
mean-reduced loss equals the gradient on the combined batch. ``"sum"`` returns the
gradient of ``sum_i loss_i``: torch's loop when the ``/ k`` is forgotten.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

REDUCTIONS = ("mean", "sum")


def leading_axis(micro_batches) -> int:
    """The common leading dimension k of every leaf of ``micro_batches``.

    Raises:
      ValueError: for no leaves, a scalar leaf, or leaves whose leading axes differ
        (each leaf's path and leading size are listed).
    """
    leaves, _ = jax.tree_util.tree_flatten_with_path(micro_batches)
    if not leaves:
        raise ValueError("`micro_batches` has no array leaves; expected leaves of shape (k, ...).")
    sizes = {}
    for path, leaf in leaves:
        shape = jnp.shape(leaf)
        name = jax.tree_util.keystr(path) or "<root>"
        if len(shape) == 0:
            raise ValueError(
                f"`micro_batches` leaf {name} is a scalar; every leaf needs a leading "
                f"micro-batch axis k, shape (k, ...)."
            )
        sizes[name] = shape[0]
    if len(set(sizes.values())) != 1:
        listing = ", ".join(f"{name}: {size}" for name, size in sizes.items())
        raise ValueError(
            f"`micro_batches` leaves disagree on the leading (micro-batch) axis: {listing}; "
            f"all must have the same k."
        )
    return next(iter(sizes.values()))


def accumulate_grads(loss_fn: Callable, params, micro_batches, *, reduction: str = "mean"):
    """``(loss, grads)`` accumulated over k micro-batches with ``lax.scan``.

    Args:
      loss_fn: ``loss_fn(params, batch) -> scalar`` for one micro-batch.
      params: the pytree to differentiate with respect to.
      micro_batches: a pytree whose leaves have shape `(k, ...)`; slice i along the
        leading axis is micro-batch i (e.g. ``(x, y)`` with ``x`` `(k, batch, in)`).
      reduction: ``"mean"`` (gradient of the mean of the k losses) or ``"sum"``.

    Returns:
      ``(loss, grads)``: the mean (or sum) of the k losses, shape `()`, and its gradient,
      a pytree like ``params``.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"`reduction` (={reduction!r}) must be one of {REDUCTIONS}.")
    k = leading_axis(micro_batches)
    first = jax.tree.map(lambda leaf: leaf[0], micro_batches)
    loss_shape = jax.eval_shape(loss_fn, params, first)
    if not hasattr(loss_shape, "shape") or loss_shape.shape != ():
        shape = getattr(loss_shape, "shape", type(loss_shape).__name__)
        raise ValueError(
            f"`loss_fn` must return a scalar loss per micro-batch; it returned shape {shape}."
        )
    value_and_grad = jax.value_and_grad(loss_fn)

    def body(carry, batch):
        loss_total, grads_total = carry
        loss, grads = value_and_grad(params, batch)
        return (loss_total + loss, jax.tree.map(jnp.add, grads_total, grads)), None

    zeros = (jnp.zeros((), loss_shape.dtype), jax.tree.map(jnp.zeros_like, params))
    (loss, grads), _ = jax.lax.scan(body, zeros, micro_batches)
    if reduction == "mean":
        loss = loss / k
        grads = jax.tree.map(lambda g: g / k, grads)
    return loss, grads


def split_batch(batch, k: int):
    """Reshape every leaf `(n, ...)` of ``batch`` into `(k, n // k, ...)` micro-batches.

    Raises:
      ValueError: when a leaf's leading size is not divisible by ``k``.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"`k` (={k!r}) must be a positive int.")

    def split(leaf):
        n = leaf.shape[0]
        if n % k:
            raise ValueError(f"a batch leaf of leading size {n} cannot be split into k={k} "
                             f"equal micro-batches.")
        return leaf.reshape((k, n // k) + leaf.shape[1:])

    return jax.tree.map(split, batch)
