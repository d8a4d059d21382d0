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

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxgrad.nn.functional._lowering import in_loop

REDUCTIONS = ("mean", "sum")


def _sizes(tree, what: str, axis_name: str, symbol: str) -> dict:
    """``{leaf path: leading size}``; raises for no leaves, a scalar leaf, or leaves
    whose leading sizes differ."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    if not leaves:
        raise ValueError(f"`{what}` has no array leaves; expected leaves of shape ({symbol}, ...).")
    sizes = {}
    for path, leaf in leaves:
        shape = jnp.shape(leaf)
        name = jax.tree_util.keystr(path) or "<root>"
        if len(shape) == 0:
            raise ValueError(
                f"`{what}` leaf {name} is a scalar; every leaf needs a leading "
                f"{axis_name} axis {symbol}, shape ({symbol}, ...)."
            )
        sizes[name] = shape[0]
    if len(set(sizes.values())) != 1:
        listing = ", ".join(f"{name}: {size}" for name, size in sizes.items())
        raise ValueError(
            f"`{what}` leaves disagree on the leading ({axis_name}) axis: {listing}; "
            f"all must have the same length."
        )
    return sizes


def _reject_list_of_micro_batches(micro_batches) -> None:
    # torch's loop takes `for x, y in micro_batches`: a list of k (x, y) pairs. As a
    # pytree that list would be read as k·2 leaves sharing the *batch* axis, and scan
    # would iterate over examples: refuse it with the conversion.
    if (
        isinstance(micro_batches, list)
        and micro_batches
        and all(isinstance(item, (tuple, list, dict)) for item in micro_batches)
    ):
        raise TypeError(
            f"`micro_batches` is a list of {len(micro_batches)} micro-batches (torch's "
            "`for x, y in micro_batches` form); accumulate_grads wants one pytree whose "
            "leaves have a leading micro-batch axis k, e.g. (x, y) with x `(k, batch, ...)`. "
            "Stack the list: `jax.tree.map(lambda *xs: jnp.stack(xs), *micro_batches)`, or "
            "split one batch: `split_batch((x, y), k)`."
        )


def leading_axis(micro_batches) -> int:
    """The common leading dimension k of every leaf of ``micro_batches``.

    Raises:
      TypeError: for a Python list of micro-batches (torch's form), with the fix.
      ValueError: for no leaves, a scalar leaf, leaves whose leading axes differ (each
        leaf's path and leading size are listed), or k = 0.
    """
    _reject_list_of_micro_batches(micro_batches)
    k = next(iter(_sizes(micro_batches, "micro_batches", "micro-batch", "k").values()))
    if k == 0:
        raise ValueError(
            "`micro_batches` holds zero micro-batches (leading axis k = 0); "
            "accumulating over none would give a 0/0 loss. Pass k >= 1."
        )
    return k


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

    Raises:
      TypeError: ``micro_batches`` is a Python list of micro-batches (torch's loop
        form); the message gives the one-line conversion.
      ValueError: a bad ``reduction``, leaves without a common leading axis, k = 0, or a
        ``loss_fn`` that does not return a scalar.
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
    with in_loop():  # convolutions in a rolled loop: patches (nn.functional._lowering)
        (loss, grads), _ = jax.lax.scan(body, zeros, micro_batches)
    if reduction == "mean":
        loss = loss / k
        grads = jax.tree.map(lambda g: g / k, grads)
    return loss, grads


def split_batch(batch, k: int):
    """Reshape every leaf `(n, ...)` of ``batch`` into `(k, n // k, ...)` micro-batches.

    Args:
      batch: a pytree (e.g. ``(x, y)``) whose leaves share the leading batch size n.
      k: the number of micro-batches, a positive int dividing n.

    Raises:
      TypeError: ``k`` is not an int (``split_batch(x, y)`` instead of
        ``split_batch((x, y), k)``).
      ValueError: ``k`` < 1, leaves of different batch sizes (listed by path), a
        scalar leaf, or n not divisible by k (or n < k: empty micro-batches).
    """
    if not isinstance(k, int) or isinstance(k, bool):
        hint = (
            " Pass the batch as one pytree: `split_batch((x, y), k)`."
            if hasattr(k, "shape")
            else ""
        )
        raise TypeError(f"`k` must be an int, got {type(k).__name__}.{hint}")
    if k < 1:
        raise ValueError(f"`k` (={k}) must be >= 1: the number of micro-batches.")
    n = next(iter(_sizes(batch, "batch", "batch", "n").values()))
    if n % k or n < k:
        raise ValueError(
            f"`batch` of leading size {n} cannot be split into k={k} equal, "
            f"non-empty micro-batches; k must divide {n}."
        )
    return jax.tree.map(lambda leaf: jnp.reshape(leaf, (k, n // k) + jnp.shape(leaf)[1:]), batch)
